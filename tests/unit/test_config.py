"""Configuration: every problem named by its key, before any job runs."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from conftest import BO_CAMPAIGN, REPO, error_of, merged, write_config

from evocamp.base.errors import ConfigError
from evocamp.cli import main
from evocamp.config import (
    load_config_file,
    run_spec,
    run_spec_json,
    stored_name_notices,
    validate_config,
)


def test_default_config_is_valid_and_defaults_are_filled():
    config = load_config_file(REPO / "config" / "config.yaml")
    assert config["results_dir"] == "results"
    assert config["mode"] == "shards"
    assert config["algorithms"]["cma_me"]["archive"]["dims"] == [20, 20]


def test_a_results_dir_that_cannot_be_written_is_refused_by_check_config(tmp_path):
    """/proc lets root "write" by its permissions (os.access says yes) but makes no
    folder: evocamp check-config, in a real process, says so before any job; a writable
    results_dir passes and the check leaves nothing behind."""
    campaign = {"algorithms": {"me": {"type": "map_elites"}}, "domains": {"s": {"type": "sphere"}}}
    path = tmp_path / "campaign.yaml"

    def check_config(results_dir: str) -> subprocess.CompletedProcess:
        path.write_text(yaml.safe_dump({**campaign, "results_dir": results_dir}))
        command = ["evocamp", "check-config", str(path)]
        return subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)

    refused = check_config("/proc/evocamp-results")
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr == (
        "evocamp: error: invalid configuration:\n  key 'results_dir': '/proc/evocamp-results' "
        "cannot be written: no folder can be made in /proc (No such file or directory); name "
        "a folder this user can write (it is made when missing)\n"
    )
    accepted = check_config("deep/results")
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout == "me/s/seed0\nme/s/seed1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["campaign.yaml"]


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


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"algorithms": {"me": {"archive": {"k_neighbors": 5}}}},
            "key 'algorithms.me.archive.k_neighbors': not used by type map_elites",
        ),
        (
            {"algorithms": {"ns": {"type": "novelty_search", "archive": {"capacity": 10}}}},
            "key 'algorithms.ns.archive.capacity': not used by type novelty_search",
        ),
        (
            {"algorithms": {"ns": {"type": "novelty_search", "archive": {"learning_rate": 0.1}}}},
            "key 'algorithms.ns.archive.learning_rate': not used by type novelty_search (its "
            "emitters learn on a proximity archive, which has no cells)",
        ),
        (
            {"algorithms": {"ns": {"type": "novelty_search", "variation": "cma"}}},
            "key 'algorithms.ns.variation': 'cma' is not one of ['gaussian', 'iso_line']",
        ),
        (
            {"algorithms": {"dns": {"type": "dominated_novelty_search", "ranker": "obj"}}},
            "key 'algorithms.dns.ranker': not used by type dominated_novelty_search",
        ),
        (
            {"algorithms": {"dds": {"type": "density_descent", "archive": {"bandwidth": 0}}}},
            "key 'algorithms.dds.archive.bandwidth': 0 is less than or equal to the minimum of 0",
        ),
        (
            {
                "algorithms": {
                    "dds": {"type": "density_descent", "archive": {"density_method": "cnf"}}
                }
            },
            "key 'algorithms.dds.archive.density_method': 'cnf' is not one of",
        ),
        (
            {"algorithms": {"bandit": {"type": "cma_me_bandit", "variation": "gaussian"}}},
            "key 'algorithms.bandit.variation': not used by type cma_me_bandit",
        ),
        (
            {"algorithms": {"es": {"type": "cma_es", "emitters": 2}}},
            "key 'algorithms.es.emitters': not used by type cma_es",
        ),
        (
            {"algorithms": {"bop": {"type": "bop_elites"}}},
            "key 'algorithms.bop.type': bop_elites samples within bounds, but domain 'sphere' "
            "has none; give domains.sphere.bounds",
        ),
        (
            {"algorithms": {"bop": {"type": "bop_elites", "search_restarts": 0}}},
            "key 'algorithms.bop.search_restarts': 0 is less than the minimum of 1",
        ),
        (
            {"domains": {"sphere": {"cqd": {"obj_max": -5}}}},
            "key 'domains.sphere.cqd': obj_min 0.0 must be below obj_max -5",
        ),
        (
            {"domains": {"sphere": {"cqd": {"targets": 5}}}},
            "key 'domains.sphere.cqd': unknown key(s) ['targets']",
        ),
    ],
)
def test_bad_keys_of_the_issue_24_types_are_named(small_config, overrides, message):
    assert message in error_of(merged(small_config, overrides))


def test_bop_elites_without_pymoo_says_what_to_install(small_config, monkeypatch):
    """A missing optional extra (pymoo blocked as Python blocks a module: None in
    sys.modules) is named with the command that installs it."""
    monkeypatch.setitem(sys.modules, "pymoo", None)
    config = merged(
        small_config,
        {
            "algorithms": {"bop": {"type": "bop_elites", "batch_size": 3}},
            "domains": {"sphere": {"bounds": [-5.12, 5.12]}},
        },
    )
    assert (
        "key 'algorithms.bop.type': bop_elites needs pymoo, which is not installed: "
        "pip install 'evocamp[bop]'"
    ) in error_of(config)


def test_bop_elites_with_pymoo_0_6_2_is_refused(small_config, monkeypatch):
    """pymoo 0.6.2's pattern search draws unseeded random numbers: the version installed
    (as importlib.metadata reports it) is named with what to install."""
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: "0.6.2" if name == "pymoo" else real(name)
    )
    config = merged(
        small_config,
        {
            "algorithms": {"bop": {"type": "bop_elites", "batch_size": 3}},
            "domains": {"sphere": {"bounds": [-5.12, 5.12]}},
        },
    )
    assert (
        "key 'algorithms.bop.type': bop_elites needs pymoo>=0.6.1,<0.6.2, not pymoo 0.6.2 "
        "(results would not be reproducible): pip install 'evocamp[bop]'"
    ) in error_of(config)


def test_run_spec_leaves_out_what_may_change(small_config):
    config = validate_config(small_config)
    spec = run_spec(config, algorithm="cmame", domain="sphere", seed=0)
    assert "generations" not in spec and "shards" not in spec
    assert spec["algorithm_spec"]["ranker"] == "2imp"
    assert spec["domain_spec"]["measure_ranges"] == [[-15.36, 15.36], [-15.36, 15.36]]


def test_yaml_syntax_error_names_file_line_and_column(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text("campaign: x\nalgorithms:\n  me: {type: map_elites\ndomains: {}\n")
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    assert str(caught.value) == (
        f"campaign file {path} is not valid YAML, line 4, column 8: "
        "expected ',' or '}', but got ':'"
    )
    assert main(["check-config", str(path)]) == 1
    assert capsys.readouterr().err == f"evocamp: error: {caught.value}\n"


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path, capsys):
    path = tmp_path / "twice.yaml"
    path.write_text(
        "algorithms:\n  me: {type: map_elites}\n  me:\n    type: cma_me\n"
        "domains:\n  s: {type: sphere, solution_dim: 4, solution_dim: 5}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    assert str(caught.value) == (
        f"campaign file {path}: key 'algorithms.me' is given twice (lines 2 and 3); "
        "key 'domains.s.solution_dim' is given twice (lines 6 and 6) (a YAML mapping keeps "
        "the last of keys given twice, silently replacing the first: rename or remove one)"
    )
    assert main(["check-config", str(path)]) == 1
    assert capsys.readouterr().err == f"evocamp: error: {caught.value}\n"


def test_a_batch_that_cannot_fit_in_memory_is_refused_with_the_numbers():
    """About twice this machine's memory (4 parameters, 2 measures: 72 bytes a solution)."""
    import psutil

    memory = psutil.virtual_memory().total
    solutions = 2 * memory // 72
    config = {
        "algorithms": {"me": {"type": "map_elites", "batch_size": solutions}},
        "domains": {"s": {"type": "sphere", "solution_dim": 4}},
    }
    assert (
        f"key 'algorithms.me': a generation of {solutions:,} solutions of 4 parameters on "
        f"domain 's' takes at least {72 * solutions / 1e9:,.1f} GB of memory (solutions, "
        f"seeds, objectives, measures), more than this machine's {memory / 2**30:.1f} GiB; "
        "lower its batch size"
    ) in error_of(config)
    config["algorithms"]["me"]["batch_size"] = memory // 72 // 2
    validate_config(config)  # half of it is accepted


def test_a_results_dir_that_is_a_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").write_text("not a folder")
    config = {
        "algorithms": {"me": {"type": "map_elites"}},
        "domains": {"s": {"type": "sphere"}},
    }
    assert (
        "key 'results_dir': 'results' is an existing file, not a folder; name a folder "
        "(it is made when missing)"
    ) in error_of(config)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"algorithms": {"me": {"sigma": float("nan")}}}, "key 'algorithms.me.sigma': nan "),
        (
            {"domains": {"sphere": {"bounds": [float("-inf"), 1.0]}}},
            "key 'domains.sphere.bounds[0]': -inf is not a finite number",
        ),
        (
            {"algorithms": {"me": {"archive": {"qd_score_offset": float("inf")}}}},
            "key 'algorithms.me.archive.qd_score_offset': inf is not a finite number",
        ),
    ],
)
def test_nan_and_infinity_are_refused_by_key(small_config, overrides, message):
    assert message in error_of(merged(small_config, overrides))


def test_nan_from_a_yaml_file_is_refused(tmp_path):
    path = tmp_path / "nan.yaml"
    path.write_text(
        "algorithms:\n  me: {type: map_elites, sigma: .nan}\ndomains:\n  s: {type: sphere}\n"
    )
    with pytest.raises(ConfigError, match=r"key 'algorithms.me.sigma': nan is not a finite"):
        load_config_file(path)


def test_plugin_domain_that_cannot_be_imported_is_named_with_its_python_path(
    tmp_path, small_config
):
    config = merged(small_config, {})
    config["domains"] = {
        "mine": {
            "type": "plugin",
            "function": "my_domian:evaluate",
            "python_path": str(tmp_path),
            "measure_ranges": [[-1, 1], [-1, 1]],
        }
    }
    assert error_of(config) == (
        "invalid configuration:\n  key 'domains.mine.function': my_domian:evaluate cannot be "
        "imported: module 'my_domian' fails to import (ModuleNotFoundError: No module named "
        f"'my_domian'; python_path: {tmp_path})"
    )
    (tmp_path / "my_domian.py").write_text("def evaluat(solutions, seeds):\n    pass\n")
    assert (
        "key 'domains.mine.function': my_domian:evaluate cannot be imported: module "
        "'my_domian' has no attribute 'evaluate'"
    ) in error_of(config)
    assert validate_config(config, check_plugins=False)["domains"]["mine"]["type"] == "plugin"


def with_emitter_batch_size(config: dict) -> dict:
    """``config`` with its QD entries' ``batch_size`` written as ``emitter_batch_size``."""
    renamed = merged(config, {})
    for algorithm in renamed["algorithms"].values():
        if algorithm["type"] in ("map_elites", "cma_me") and "batch_size" in algorithm:
            algorithm["emitter_batch_size"] = algorithm.pop("batch_size")
    return renamed


def test_old_per_emitter_batch_size_is_read_with_one_line_and_the_same_run_spec(
    tmp_path, capsys, small_config
):
    """QD types' per-emitter batch size is ``emitter_batch_size``; the small campaign still
    writes it as ``batch_size``, which is read as the new key with one line saying what
    to write instead, and gives the same run spec (kept checkpoints are matched by it)."""
    written = with_emitter_batch_size(small_config)
    old, new = validate_config(small_config), validate_config(written)
    for name in ("me", "cmame"):
        old_spec = run_spec(old, algorithm=name, domain="sphere", seed=0)
        new_spec = run_spec(new, algorithm=name, domain="sphere", seed=0)
        assert run_spec_json(old_spec) == run_spec_json(new_spec)
        assert old_spec["algorithm_spec"]["batch_size"] == 8
    assert stored_name_notices(written) == []
    assert stored_name_notices(BO_CAMPAIGN) == []  # BO's batch_size is per generation
    path = write_config(tmp_path, small_config)
    assert main(["check-config", str(path)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        "evocamp: warning: algorithms.me: 'batch_size' is per emitter for map_elites: "
        "write 'emitter_batch_size: 8'",
        "evocamp: warning: algorithms.cmame: 'batch_size' is per emitter for cma_me: "
        "write 'emitter_batch_size: 8'",
    ]


def test_old_storage_keys_are_read_with_one_line_and_the_same_result(
    tmp_path, capsys, small_config
):
    """The storage keys are under ``storage``; a campaign that still writes
    ``keep_evaluations`` and ``evaluations.*`` gets the same settings and run specs, with
    one line saying what to write instead; both ways at once are refused."""
    from evocamp.files.evaluations import StorageSettings

    small_config = with_emitter_batch_size(small_config)  # no other old key
    storage = {"keep_evaluations": True, "max_solution_params": 5, "auto_max_mb": 3}
    new_way = merged(small_config, {"storage": storage})
    old_way = merged(
        small_config,
        {"keep_evaluations": True, "evaluations": {"max_solution_params": 5, "auto_max_mb": 3}},
    )
    new, old = validate_config(new_way), validate_config(old_way)
    assert StorageSettings.from_config(old) == StorageSettings.from_config(new)
    assert StorageSettings.from_config(new) == StorageSettings(
        keep=True, max_solution_params=5, auto_max_mb=3
    )
    assert "keep_evaluations" not in old and "evaluations" not in old
    for name in ("me", "cmame"):
        new_spec = run_spec(new, algorithm=name, domain="sphere", seed=0)
        old_spec = run_spec(old, algorithm=name, domain="sphere", seed=0)
        assert run_spec_json(old_spec) == run_spec_json(new_spec)
    assert stored_name_notices(new_way) == []
    path = write_config(tmp_path, old_way)
    assert main(["check-config", str(path)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        "evocamp: warning: keep_evaluations and evaluations are under storage now: "
        "write 'storage: {keep_evaluations: true, max_solution_params: 5, auto_max_mb: 3}'"
    ]
    both = merged(small_config, {"keep_evaluations": True, "storage": {"keep_evaluations": True}})
    assert (
        "key 'storage.keep_evaluations': the old key for it is given too; "
        "give only storage.keep_evaluations"
    ) in error_of(both)


def test_old_and_new_per_emitter_batch_size_together_are_refused(small_config):
    config = merged(small_config, {"algorithms": {"me": {"emitter_batch_size": 8}}})
    assert (
        "key 'algorithms.me.batch_size': emitter_batch_size is given too; "
        "give only emitter_batch_size"
    ) in error_of(config)
