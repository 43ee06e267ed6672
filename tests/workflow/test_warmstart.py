"""Warm start: steps forked from a server that has pyribs imported, same results."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import (
    PLUGINS,
    SMALL_CAMPAIGN,
    archive_digests,
    job_log_text,
    run_snakemake,
    write_config,
)

from evocamp.config import run_spec, validate_config
from evocamp.warmstart import server_folder, stop_servers


def evocamp(*args: str, cwd: Path, **popen) -> subprocess.Popen:
    """``python -m evocamp ...`` as a rule runs it (PYTHONPATH = the workflow's src)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    return subprocess.Popen(
        [sys.executable, "-m", "evocamp", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def finished(process: subprocess.Popen) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


def running_server() -> psutil.Process:
    """Wait for this session's warm server to listen; return its process."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for lock in server_folder().glob("*.lock"):
            socket_file = lock.with_suffix(".sock")
            pid = lock.read_text().strip()
            if socket_file.exists() and pid and psutil.pid_exists(int(pid)):
                return psutil.Process(int(pid))
        time.sleep(0.2)
    raise AssertionError("no warm-start server came up within 60 s")


@pytest.fixture
def fresh_servers():
    """No server running; the next step starts one (spawn markers cleared)."""
    stop_servers()
    for marker in server_folder().glob("*.spawned"):
        marker.unlink()
    time.sleep(0.5)
    yield
    stop_servers()


def test_warm_and_cold_campaigns_are_bitwise_identical(tmp_path, small_campaign_done):
    """The shared small campaign ran warm (after its first step); its MAP-Elites run,
    run cold, gives the same archive."""
    cold, warm = tmp_path / "cold", small_campaign_done
    config = {**SMALL_CAMPAIGN, "algorithms": {"me": SMALL_CAMPAIGN["algorithms"]["me"]}}
    write_config(cold, config)
    run_snakemake(cold, "runs", env={"EVOCAMP_WARM_START": "0"})
    digests = archive_digests(cold)
    assert list(digests) == ["small/me/sphere/seed0"]
    assert digests.items() <= archive_digests(warm).items()
    cold_tells = job_log_text(cold, "small", "me/sphere/seed0", "gen_000006/tell.log")
    warm_tells = [
        job_log_text(warm, "small", "me/sphere/seed0", f"gen_{g:06d}/tell.log") for g in range(1, 7)
    ]
    assert "warm start" not in cold_tells
    # The first step of the campaign starts the server and runs cold; later ones are warm.
    assert "tell took" in warm_tells[-1] and "warm start]" in warm_tells[-1]
    assert "generation 6/6" in warm_tells[-1]


def plugin_state(tmp_path: Path, *, sleep: float) -> Path:
    """A generation-0 checkpoint of a run whose evaluations sleep ``sleep`` seconds."""
    config = validate_config(
        {
            **SMALL_CAMPAIGN,
            "domains": {
                "sleepy": {
                    "type": "plugin",
                    "function": "evocamp_test_plugin:noisy_sphere",
                    "python_path": str(PLUGINS),
                    "solution_dim": 6,
                    "measure_ranges": [[-3, 3], [-3, 3]],
                    "params": {"sleep": sleep},
                }
            },
        }
    )
    spec = run_spec(config, algorithm="me", domain="sleepy", seed=0)
    state = tmp_path / "gen_000000.h5"
    code, stderr = finished(
        evocamp("init", "--spec", json.dumps(spec), "--output", str(state), cwd=tmp_path)
    )
    assert code == 0, stderr
    return state


def test_killed_client_takes_its_warm_child_along(tmp_path, fresh_servers):
    state = plugin_state(tmp_path, sleep=60)
    server = running_server()
    output = tmp_path / "shard.h5"
    client = evocamp(
        "evaluate", "--state", str(state), "--shard", "0", "--shards", "1",
        "--output", str(output), cwd=tmp_path,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not server.children() and time.monotonic() < deadline:
        time.sleep(0.1)
    children = server.children()
    assert len(children) == 1, "the step did not run in a warm child"
    # The child takes the caller's folder just after the fork: wait for it.
    while children[0].cwd() != str(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children[0].cwd() == str(tmp_path)
    client.send_signal(signal.SIGKILL)
    client.wait()
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, "the warm child outlived its killed client"
    assert not output.exists()
    assert server.is_running()


def test_warm_errors_and_exit_status_reach_the_caller(tmp_path, fresh_servers):
    state = plugin_state(tmp_path, sleep=0)
    running_server()
    corrupt = tmp_path / "gen_000001.h5"
    corrupt.write_bytes(state.read_bytes()[:1000])
    code, stderr = finished(
        evocamp(
            "tell", "--state", str(corrupt), "--shard-files", str(state),
            "--output", str(tmp_path / "out.h5"), cwd=tmp_path,
        )
    )  # fmt: skip
    assert code == 1
    assert f"evocamp: error: checkpoint {corrupt} is corrupt or truncated" in stderr
    code, stderr = finished(evocamp("tell", "--no-such-option", cwd=tmp_path))
    assert code == 2
    assert "error: the following arguments are required: --state" in stderr


def test_stop_ends_the_server_and_removes_its_socket(tmp_path, fresh_servers):
    plugin_state(tmp_path, sleep=0)
    server = running_server()
    socket_files = list(server_folder().glob("*.sock"))
    assert stop_servers() == 1
    server.wait(timeout=10)
    assert not any(path.exists() for path in socket_files)
    code, stderr = finished(evocamp("init", "--help", cwd=tmp_path))
    assert code == 0  # with no server the step runs cold (and starts a new one)


def test_a_step_outliving_its_server_does_not_block_the_next_one(tmp_path, fresh_servers):
    """The server is stopped while a warm child runs a long step: the child does not
    hold the server's lock, so the next step starts a new server at once, and stopping
    servers again is not confused by the old server's pid."""
    state = plugin_state(tmp_path, sleep=60)
    server = running_server()
    client = evocamp(
        "evaluate", "--state", str(state), "--shard", "0", "--shards", "1",
        "--output", str(tmp_path / "shard.h5"), cwd=tmp_path,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not server.children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(server.children()) == 1, "the step did not run in a warm child"
    try:
        assert stop_servers() == 1
        server.wait(timeout=10)
        for marker in server_folder().glob("*.spawned"):  # spawn again at once
            marker.unlink()
        code, stderr = finished(evocamp("init", "--help", cwd=tmp_path))
        assert code == 0, stderr
        assert running_server().pid != server.pid, "a new server came up"
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()
