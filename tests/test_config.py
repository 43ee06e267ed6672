"""Configuration: every problem named by its key, before any job runs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, merged, run_snakemake, write_config

from evocamp.config import ConfigError, load_config_file, run_spec, validate_config


def error_of(config: dict) -> str:
    with pytest.raises(ConfigError) as caught:
        validate_config(config)
    return str(caught.value)


def test_default_config_is_valid_and_defaults_are_filled():
    config = load_config_file(REPO / "config" / "config.yaml")
    assert config["results_dir"] == "results"
    assert config["mode"] == "shards"
    assert config["algorithms"]["cma_me"]["archive"]["dims"] == [20, 20]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"shard": 2}, "key '(top level)': unknown key(s) ['shard']"),
        ({"shards": 0}, "key 'shards': 0 is less than the minimum of 1"),
        ({"shards": "four"}, "key 'shards': 'four' is not of type 'integer'"),
        (
            {"shards": 17},
            "key 'shards': 17 shards is more than the 16 solutions per "
            "generation of algorithm 'me' on domain 'sphere'; allowed is 1..16",
        ),
        ({"generations": 0}, "key 'generations': 0 is less than the minimum of 1"),
        ({"checkpoint_every": 501}, "key 'checkpoint_every': 501 is greater than the maximum"),
        ({"seeds": 0}, "key 'seeds': 0 is neither a positive number of seeds"),
        (
            {"algorithms": {"me": {"type": "map-elites"}}},
            "key 'algorithms.me.type': 'map-elites' is not one of",
        ),
        (
            {"algorithms": {"me": {"sigma": -1}}},
            "key 'algorithms.me.sigma': -1 is less than or equal to the minimum of 0",
        ),
        (
            {"algorithms": {"me": {"archive": {"dims": [10, 10, 10]}}}},
            "key 'algorithms.me.archive.dims': 3 dims given but domain 'sphere' has 2 measures",
        ),
        (
            {"algorithms": {"me": {"archive": {"learning_rate": 1.5}}}},
            "key 'algorithms.me.archive.learning_rate': 1.5 is greater than the maximum of 1",
        ),
        (
            {"domains": {"sphere": {"measure_ranges": [[-1, 1], [2, 2]]}}},
            "key 'domains.sphere.measure_ranges[1]': low 2 must be below high 2",
        ),
        (
            {"domains": {"sphere": {"bounds": [3, -3]}}},
            "key 'domains.sphere.bounds': low 3 must be below high -3",
        ),
        (
            {"domains": {"sphere": {"type": "plugin"}}},
            "key 'domains.sphere.function': required for type plugin",
        ),
        (
            {"domains": {"sphere": {"solutiondim": 4}}},
            "key 'domains.sphere': unknown key(s) ['solutiondim']",
        ),
        (
            {"experiments": [{"algorithm": "nope", "domain": "sphere"}]},
            "key 'experiments[0].algorithm': unknown algorithm 'nope'; defined are "
            "['cmame', 'me', 'mine', 'oes', 'snes']",
        ),
        (
            {"algorithms": {"oes": {"popsize": 15}}},
            "key 'algorithms.oes.popsize': openai_es samples antithetic pairs; 15 is odd",
        ),
        (
            {"algorithms": {"me": {"popsize": 10}}},
            "key 'algorithms.me.popsize': not used by type map_elites",
        ),
        (
            {"algorithms": {"oes": {"emitters": 2}}},
            "key 'algorithms.oes.emitters': not used by type openai_es",
        ),
        (
            {"algorithms": {"mine": {"class": None}}},
            "key 'algorithms.mine.class': None is not of type 'string'",
        ),
        (
            {"domains": {"sphere": {"type": "digits", "solution_dim": 6}}},
            "key 'domains.sphere.solution_dim': domain digits has 2410 parameters "
            "(leave solution_dim out), not 6",
        ),
        (
            {"domains": {"sphere": {"type": "digits", "solution_dim": 2410}}},
            "key 'algorithms.me.type': map_elites needs measures, but domain 'sphere' has "
            "none; use an ES (openai_es, snes) or a plugin",
        ),
    ],
)
def test_bad_values_are_named(small_config, overrides, message):
    assert message in error_of(merged(small_config, overrides))


def test_run_spec_leaves_out_what_may_change(small_config):
    config = validate_config(small_config)
    spec = run_spec(config, algorithm="cmame", domain="sphere", seed=0)
    assert "generations" not in spec and "shards" not in spec
    assert spec["algorithm_spec"]["ranker"] == "2imp"
    assert spec["domain_spec"]["measure_ranges"] == [[-15.36, 15.36], [-15.36, 15.36]]


def test_snakemake_rejects_bad_config_before_any_job(tmp_path, small_config):
    write_config(tmp_path, merged(small_config, {"shards": 0}))
    completed = run_snakemake(tmp_path, check=False)
    assert completed.returncode != 0
    assert "key 'shards': 0 is less than the minimum of 1" in completed.stderr
    assert not (tmp_path / "results").exists()


def test_configfile_is_the_whole_campaign(tmp_path):
    """A file given with --configfile replaces config/config.yaml (no merging of its
    algorithms and domains); keys it leaves out take the schema defaults; --config
    still overrides on top. Without --configfile the default campaign is planned."""
    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    (tmp_path / "mine.yaml").write_text(
        "campaign: mine\nalgorithms:\n  cma_me: {type: cma_me}\n"
        "domains:\n  rast: {type: rastrigin, solution_dim: 4}\n"
    )

    def planned(*args: str) -> tuple[set[str], str]:
        completed = subprocess.run(
            [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
            + ["--cores", "1", "--dry-run", "--printshellcmds", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        runs = set(re.findall(r"results/(\S+?)/logs/(\S+?)/finalise\.log", completed.stdout))
        return {"/".join(run) for run in runs}, completed.stdout

    runs, text = planned("--configfile", "mine.yaml", "--config", "seeds=1")
    assert runs == {"mine/cma_me/rast/seed0"}
    # The default campaign's cma_me (emitters: 2) lent nothing: the schema default is 1.
    assert '"emitters":1,' in text and '"emitters":2' not in text
    default_runs, _ = planned("--config", "seeds=1")
    assert default_runs == {"default/map_elites/sphere/seed0", "default/cma_me/sphere/seed0"}
