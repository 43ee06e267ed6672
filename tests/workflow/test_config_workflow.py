"""Configuration through the real Snakemake: refused before any job, --configfile is
the whole campaign."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from conftest import REPO, merged, run_snakemake, write_config


def test_snakemake_rejects_bad_config_before_any_job(tmp_path, small_config):
    write_config(tmp_path, merged(small_config, {"shards": 0}))
    completed = run_snakemake(tmp_path, check=False)
    assert completed.returncode != 0
    assert "key 'shards': 0 is less than the minimum of 1" in completed.stderr
    assert not (tmp_path / "results").exists()


def test_snakemake_rejects_a_key_given_twice_before_any_job(tmp_path, small_config):
    """Snakemake's YAML loading keeps the second of two keys; the workflow names both
    lines instead."""
    write_config(tmp_path, small_config)
    text = (tmp_path / "config.yaml").read_text()
    (tmp_path / "config.yaml").write_text(text + "shards: 1\n")
    completed = run_snakemake(tmp_path, check=False)
    assert completed.returncode != 0
    line = len(text.splitlines()) + 1
    first = 1 + next(i for i, text in enumerate(text.splitlines()) if text.startswith("shards:"))
    assert f"key 'shards' is given twice (lines {first} and {line})" in completed.stderr
    assert not (tmp_path / "results").exists()


def test_snakemake_refuses_a_results_dir_it_cannot_write_before_any_job(tmp_path, small_config):
    """Not the first job's "No such file or directory": the planning (-n) names the key."""
    write_config(tmp_path, merged(small_config, {"results_dir": "/proc/evocamp-results"}))
    completed = run_snakemake(tmp_path, "--dry-run", check=False)
    assert completed.returncode != 0
    assert (
        "key 'results_dir': '/proc/evocamp-results' cannot be written: no folder can be made "
        "in /proc (No such file or directory)"
    ) in completed.stdout + completed.stderr  # a dry run prints its errors on stdout


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


def test_snakemake_names_a_plugin_that_cannot_be_imported_before_any_job(tmp_path, small_config):
    config = merged(small_config, {})
    config["domains"] = {
        "sphere": {
            "type": "plugin",
            "function": "evocamp_test_plugn:noisy_sphere",
            "python_path": str(REPO / "tests" / "plugins"),
            "measure_ranges": [[-3, 3], [-3, 3]],
        }
    }
    write_config(tmp_path, config)
    completed = run_snakemake(tmp_path, check=False)
    assert completed.returncode != 0
    assert (
        "key 'domains.sphere.function': evocamp_test_plugn:noisy_sphere cannot be imported: "
        "module 'evocamp_test_plugn' fails to import (ModuleNotFoundError: No module named "
        f"'evocamp_test_plugn'; python_path: {REPO / 'tests' / 'plugins'})"
    ) in completed.stderr
    assert not (tmp_path / "results").exists()


def test_snakemake_says_once_what_to_write_for_a_qd_types_old_batch_size(tmp_path, small_config):
    """The small campaign writes its QD entries' per-emitter batch size under the old key
    ``batch_size``: the workflow plans the runs and says once, per entry, what to write."""
    write_config(tmp_path, small_config)
    completed = run_snakemake(tmp_path, "--dry-run")
    line = (
        "evocamp: warning: algorithms.me: 'batch_size' is per emitter for map_elites: "
        "write 'emitter_batch_size: 8'"
    )
    assert completed.stderr.count(line) == 1, completed.stderr[-3000:]
    assert completed.stderr.count("is per emitter for") == 2
