"""Crashes and bad evaluations: real kills, failing plugins, corrupt checkpoints."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
from conftest import (
    PLUGINS,
    archive_digests,
    evaluation_digests,
    job_log_text,
    kill_tree_after,
    merged,
    run_folder,
    run_log,
    run_snakemake,
    shard_results,
    snakemake_command,
    write_config,
    write_final,
)

from evocamp.base.seeding import evaluation_seeds, run_key
from evocamp.config import run_spec, validate_config
from evocamp.loop.engine import initialise, tell


def test_sigkill_at_several_moments_then_rerun(
    tmp_path, small_config, reference_small, reference_small_evaluations
):
    """Kill the whole snakemake process tree three times at different moments; rerunning
    the same command completes and the archives equal an uninterrupted run's, and so
    do the kept evaluations (every row once: none lost, none twice)."""
    write_config(tmp_path, small_config)
    kills = 0
    for delay in (3.0, 4.5, 3.6):  # a warm-started small campaign takes ~10 s
        if kill_tree_after(tmp_path, delay) == -signal.SIGKILL:
            kills += 1
    assert kills >= 2, "the campaign finished before it could be killed twice"
    run_snakemake(tmp_path, "runs")
    assert archive_digests(tmp_path) == reference_small
    assert evaluation_digests(tmp_path) == reference_small_evaluations


def test_resume_without_the_node_cache_rebuilds_the_window(tmp_path, small_config, reference_small):
    """A campaign stopped between kept checkpoints continues on a node whose state cache
    does not hold its states (another login node, a reboot): the next tell rebuilds
    each run's state from the kept checkpoint and the window's shard files, and the
    archives equal an uninterrupted run's. Finished runs leave nothing in the cache."""
    write_config(tmp_path, small_config)
    cache = tmp_path / "node-cache"
    env = {"EVOCAMP_STATE_CACHE": str(cache)}
    stopped = [
        run_folder(tmp_path, small_config, algorithm, "sphere", 0) / "work" / "state_000002.h5"
        for algorithm in small_config["algorithms"]
    ]
    run_snakemake(tmp_path, *(str(state.relative_to(tmp_path)) for state in stopped), env=env)
    for state in stopped:
        with h5py.File(state, "r") as handle:
            assert "optimizer" not in handle, state  # light: the full state is cached
    shutil.rmtree(cache)
    run_snakemake(tmp_path, "runs", env=env)
    assert archive_digests(tmp_path) == reference_small
    log = job_log_text(tmp_path, "small", "cmame/sphere/seed0", "gen_000003/tell.log")
    assert "rebuilt from results/small/cmame/sphere/seed0/checkpoints/gen_000000.h5" in log
    assert "by telling generation(s) 1..2 again" in log
    assert list(cache.iterdir()) == []


def test_resume_from_delta_checkpoints_after_sigkill(tmp_path, small_config):
    """Kept checkpoints 3 (full), 6 and 9 (deltas of 3 and 6, the default
    checkpoint_full_every of 10): a campaign stopped at 6 and killed in the window
    after it resumes from the delta chain (the tell reads the archive through it, the
    shards their parents; CMA-MAE's learning archive is a delta too) and gives the
    archives of the same runs told in memory."""
    config = merged(small_config, {"generations": 9, "shards": 2})
    config["algorithms"] = {
        "me": config["algorithms"]["me"],
        "cmamae": {
            "type": "cma_mae",
            "emitters": 2,
            "batch_size": 8,
            "sigma": 0.5,
            "archive": {"dims": [10, 10], "learning_rate": 0.1, "threshold_min": 0.0},
        },
    }
    write_config(tmp_path, config)
    folders = {
        name: run_folder(tmp_path, config, name, "sphere", 0) for name in config["algorithms"]
    }
    windows = [
        str(folder.relative_to(tmp_path) / "metrics/segment_000006.csv")
        for folder in folders.values()
    ]
    run_snakemake(tmp_path, *windows)
    kill_tree_after(tmp_path, 2.0)
    run_snakemake(tmp_path, "runs")
    campaign = validate_config(config)
    for name, folder in folders.items():
        state = initialise(run_spec(campaign, algorithm=name, domain="sphere", seed=0))
        for _ in range(9):
            state = tell(state, shard_results(state, 2))
        told = write_final(tmp_path / f"{name}.h5", state, evaluations=16 * 9)
        assert (folder / "archive.h5").read_bytes() == told
        for generation, base in ((6, 3), (9, 6)):
            with h5py.File(folder / f"checkpoints/gen_{generation:06d}.h5", "r") as handle:
                assert handle.attrs["delta_base"] == base
                assert "archive_delta" in handle and "archive" not in handle
                assert handle["optimizer"].attrs.get("learning_delta", False) == (name == "cmamae")


def plugin_config(small_config, control_file, **domain):
    config = merged(
        small_config,
        {
            "domains": {
                "sphere": {
                    "type": "plugin",
                    "function": "evocamp_test_plugin:noisy_sphere",
                    "python_path": str(PLUGINS),
                    "solution_dim": 6,
                    "measure_ranges": [[-3, 3], [-3, 3]],
                    "params": {"control_file": str(control_file)},
                    **domain,
                }
            },
        },
    )
    config["algorithms"] = {"me": small_config["algorithms"]["me"]}
    return config


def seed_of(config, generation: int, index: int) -> int:
    key = run_key(algorithm="me", domain="sphere", seed=0)
    batch = 16
    return int(evaluation_seeds(config["master_seed"], key, generation, batch)[index])


def test_failing_evaluation_names_where_and_resumes(tmp_path, small_config):
    """A plugin that raises at generation 5, solution 11 (shard 2 of 3): the run fails with
    one message naming run, generation, shard and solution; kept checkpoints stay; after
    the fix the rerun continues and matches a run that never failed."""
    control = tmp_path / "control"
    config = plugin_config(small_config, control)
    write_config(tmp_path, config)
    control.write_text(f"raise {seed_of(config, 5, 11)}")
    failed = run_snakemake(tmp_path, "runs", check=False)
    assert failed.returncode != 0
    message = (
        "evocamp: error: run me/sphere/seed0, generation 5, shard 2, solution 11: "
        "the evaluation function raised ValueError: simulated crash"
    )
    assert message in failed.stderr + failed.stdout
    folder = run_folder(tmp_path, config, "me", "sphere", 0)
    log = run_log(tmp_path, "small", "me/sphere/seed0", "gen_000005/evaluate_002.log")
    assert message in log.read_text()
    assert (folder / "checkpoints" / "gen_000003.h5").exists()
    with h5py.File(folder / "checkpoints" / "gen_000003.h5", "r") as handle:
        assert handle.attrs["generation"] == 3
    control.unlink()
    resumed = run_snakemake(tmp_path, "runs")
    assert "initialise" not in resumed.stdout + resumed.stderr.split("Job stats")[0]

    clean = tmp_path / "clean"
    write_config(clean, config)
    run_snakemake(clean, "runs")
    assert archive_digests(tmp_path) == archive_digests(clean)


def test_nan_objective_names_the_solution(tmp_path, small_config):
    control = tmp_path / "control"
    config = plugin_config(small_config, control, chunk_size=4)
    write_config(tmp_path, config)
    control.write_text(f"nan {seed_of(config, 2, 6)}")
    failed = run_snakemake(tmp_path, "runs", check=False)
    assert failed.returncode != 0
    assert (
        "evocamp: error: run me/sphere/seed0, generation 2, shard 1, solution 6: "
        "'objective' is not finite (nan)"
    ) in failed.stderr


def test_wrong_shape_is_reported(tmp_path, small_config):
    control = tmp_path / "control"
    config = plugin_config(small_config, control)
    write_config(tmp_path, config)
    control.write_text(f"shape {seed_of(config, 1, 0)}")
    failed = run_snakemake(tmp_path, "runs", check=False)
    assert failed.returncode != 0
    assert (
        "evocamp: error: run me/sphere/seed0, generation 1, shard 0, solution 0: "
        "'measures' has shape (1, 3), expected (1, 2)"
    ) in failed.stderr


def test_corrupt_checkpoint_is_named(tmp_path, small_config):
    """A truncated checkpoint gives one message naming the file; nothing is deleted."""
    config = merged(small_config, {"generations": 4})
    config["algorithms"] = {"me": small_config["algorithms"]["me"]}
    write_config(tmp_path, config)
    run_snakemake(tmp_path, "runs")
    folder = run_folder(tmp_path, config, "me", "sphere", 0)
    final = folder / "checkpoints" / "gen_000004.h5"
    final.write_bytes(final.read_bytes()[:2000])
    write_config(tmp_path, merged(config, {"generations": 5}))
    failed = run_snakemake(tmp_path, "runs", check=False)
    assert failed.returncode != 0
    assert (
        f"evocamp: error: checkpoint {final.relative_to(tmp_path)} is corrupt or truncated"
    ) in failed.stderr
    for kept in ("gen_000000.h5", "gen_000003.h5", "gen_000004.h5"):
        assert (folder / "checkpoints" / kept).exists()
    assert (folder / "archive.h5").exists()


def test_seeds_do_not_depend_on_sharding():
    key = run_key(algorithm="a", domain="d", seed=1)
    whole = evaluation_seeds(5, key, 3, 10)
    assert len(set(whole.tolist())) == 10
    again = evaluation_seeds(5, key, 3, 12)[:10]
    np.testing.assert_array_equal(whole, again)
    assert not np.array_equal(whole, evaluation_seeds(5, key, 4, 10))


def optimizer_config(small_config, control_file) -> dict:
    config = merged(small_config, {})
    config["algorithms"] = {
        "rs": {
            "type": "plugin",
            "class": "evocamp_test_optimizers:RandomSearch",
            "python_path": str(PLUGINS),
            "params": {"batch": 8, "control_file": str(control_file)},
        }
    }
    return config


def test_failing_plugin_optimizer_names_where_and_resumes(tmp_path, small_config):
    """A user's optimizer whose tell() raises at generation 3: one message naming the
    class, the method, the run and the generation; the kept checkpoint stays; after the
    fix the rerun continues and matches a run that never failed."""
    control = tmp_path / "control"
    config = merged(optimizer_config(small_config, control), {"generations": 4, "shards": 1})
    config["checkpoint_every"] = 2
    write_config(tmp_path, config)
    control.write_text("tell 3")
    failed = run_snakemake(tmp_path, "runs", check=False)
    assert failed.returncode != 0
    message = (
        "evocamp: error: run rs/sphere/seed0, generation 3: optimizer class "
        "evocamp_test_optimizers:RandomSearch, method tell() raised ValueError: "
        "tell failed on purpose at generation 3"
    )
    assert message in failed.stderr + failed.stdout
    log = run_log(tmp_path, "small", "rs/sphere/seed0", "gen_000003/tell.log").read_text()
    assert message in log and "Traceback" in log
    folder = run_folder(tmp_path, config, "rs", "sphere", 0)
    assert (folder / "checkpoints" / "gen_000002.h5").exists()
    control.unlink()
    run_snakemake(tmp_path, "runs")
    clean = tmp_path / "clean"
    write_config(clean, config)
    run_snakemake(clean, "runs")
    assert archive_digests(tmp_path) == archive_digests(clean)


def test_a_rerun_ends_the_jobs_a_killed_snakemake_left_running(tmp_path, small_config):
    """Snakemake alone SIGKILLed while a shard's evaluation hangs (its jobs are not in a
    group it kills): the rerun ends that job and every process of it (the warm step, its
    evaluation) before it starts the shard again, says so in one line, and finishes."""
    import psutil

    config = merged(
        small_config,
        {
            "generations": 1,
            "checkpoint_every": 1,
            "shards": 2,
            "domains": {
                "sphere": {
                    "type": "plugin",
                    "function": "evocamp_test_plugin:hangs_first_attempt",
                    "python_path": str(PLUGINS),
                    "solution_dim": 6,
                    "measure_ranges": [[-3, 3], [-3, 3]],
                    "chunk_size": 8,  # one call per shard: one hang each, the first time
                }
            },
        },
    )
    config["algorithms"] = {"me": small_config["algorithms"]["me"]}
    write_config(tmp_path, config)
    (tmp_path / "hang-once").mkdir()
    snakemake = subprocess.Popen(
        snakemake_command(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    left = []
    try:
        deadline = time.time() + 120
        while not any((tmp_path / "hang-once").iterdir()) and time.time() < deadline:
            time.sleep(0.1)
        snakemake.kill()
        snakemake.wait()
        left = [p for p in psutil.process_iter() if _works_in(p, tmp_path)]
        assert any("evaluate" in p.cmdline() for p in left), "no shard job was left running"
        rerun = run_snakemake(tmp_path, "runs")
        assert [p for p in left if _alive(p)] == []
        (ended,) = [line for line in rerun.stderr.splitlines() if line.startswith("evocamp: ended")]
        assert "job(s) a killed Snakemake left running here: " in ended and "(evaluate)" in ended
    finally:
        for process in left:
            with contextlib.suppress(psutil.Error):
                process.kill()


def _works_in(process, workdir) -> bool:
    """Whether ``process`` (not this one) runs in ``workdir``."""
    import psutil

    try:
        return process.pid != os.getpid() and Path(process.cwd()).resolve() == workdir.resolve()
    except psutil.Error:
        return False


def _alive(process) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
