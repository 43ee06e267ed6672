"""qUCB's cost-aware acquisition (``cost``, ``cost_cooling``) through the real workflow,
on a mixed space whose evaluation reports a deterministic cost: centralised qUCB gives
the same archives and evaluations at 1 and 2 shards, both variants in asynchronous mode
are replayed bit for bit from their completion logs, and the cost shapes proposals
(it is no dead key: the runs differ from plain qUCB's)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import (
    MIXED_SPACE,
    PLUGINS,
    archive_digests,
    evaluation_digests,
    merged,
    run_snakemake,
    write_config,
)

pytestmark = pytest.mark.slow

BO = {"batch_size": 4, "initial_points": 4, "candidates": 50, "trees": 5, "refine_generations": 2}
CONFIG = {
    "campaign": "cost",
    "master_seed": 2,
    "generations": 4,
    "shards": 2,
    "checkpoint_every": 2,
    "seeds": 1,
    "storage": {"keep_evaluations": True},
    "algorithms": {
        "cbo": {"type": "qucb_centralised", **BO, "cost": "cost", "cost_cooling": 8},
        "dbo": {"type": "qucb_decentralised", **BO, "cost": "cost"},
        "plain": {"type": "qucb_centralised", **BO},
    },
    "domains": {
        "net": {
            "type": "plugin",
            "function": "evocamp_test_plugin:costed_configurations",
            "python_path": str(PLUGINS),
            "measure_ranges": [],
            "extra_fields": ["cost"],
            "space": MIXED_SPACE,
        }
    },
}


def digests(workdir, *, only: tuple[str, ...]) -> tuple[dict, dict]:
    def kept(found: dict) -> dict:
        return {key: value for key, value in found.items() if key.split("/")[1] in only}

    return kept(archive_digests(workdir)), kept(evaluation_digests(workdir))


def test_cost_aware_qucb_is_the_same_at_one_and_two_shards_and_differs_from_plain(tmp_path):
    found = []
    for shards in (2, 1):
        workdir = tmp_path / f"shards{shards}"
        write_config(workdir, merged(CONFIG, {"shards": shards}))
        run_snakemake(workdir, "runs")
        found.append(digests(workdir, only=("cbo", "plain")))
    assert found[0] == found[1]
    archives = found[0][0]
    assert len(archives) == 2 and len(set(archives.values())) == 2


def test_asynchronous_cost_aware_runs_replay_bit_for_bit(tmp_path):
    config = merged(CONFIG, {"mode": "async", "async": {"slots": 2}, "dask": {"workers": 2}})
    config["algorithms"] = {name: CONFIG["algorithms"][name] for name in ("cbo", "dbo")}
    write_config(tmp_path, config)
    run_snakemake(tmp_path, "runs")
    runs = sorted((tmp_path / "results" / "cost").glob("*/net/seed0"))
    assert [run.parent.parent.name for run in runs] == ["cbo", "dbo"]
    for run in runs:
        replayed = subprocess.run(
            [sys.executable, "-m", "evocamp", "replay", str(run)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert replayed.returncode == 0, replayed.stderr
        assert "bitwise identical to" in replayed.stderr
        assert (run / "replayed_archive.h5").read_bytes() == (run / "archive.h5").read_bytes()
