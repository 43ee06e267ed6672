"""Behaviour unchanged: campaigns compute exactly what the recorded baseline computed.

Each test runs one campaign of ``benchmarks/behaviour_digests.py`` (the tests' small
campaign, and the first generations of each shipped config) with this checkout's code
and asserts that the sha256 of every run's ``archive.h5`` and of every ``metrics.csv``
column except the timing ones (``*_seconds``, ``utilisation``) equal those recorded in
``tests/data/behaviour_digests.json`` for this machine's kernel family and the pinned
environment (``tests/recorded.py``); on a family with no record the test says so in
one line and skips. A mismatch lists the files and columns that differ.

Record again only when a change of behaviour is intended, or a pinned package is
upgraded (and say so in the commit), from the repository root, once per kernel family
the machine can run (the default; ``OPENBLAS_CORETYPE=Prescott``; ``SkylakeX`` on an
AVX-512 CPU; ``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"`` for numpy's
AVX2 loops), each on the command line::

    python benchmarks/behaviour_digests.py --repo . --out tests/data/behaviour_digests.json
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from recorded import recorded_digests

REPO = Path(__file__).resolve().parents[2]
DIGESTS = REPO / "tests" / "data" / "behaviour_digests.json"


def _load_digests_module():
    spec = importlib.util.spec_from_file_location(
        "behaviour_digests", REPO / "benchmarks" / "behaviour_digests.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


behaviour_digests = _load_digests_module()


@pytest.fixture(scope="module")
def warm_runtime():
    """One private warm-start folder for the campaigns of this module, whose servers
    are stopped at its end."""
    with behaviour_digests.warm_servers(REPO) as runtime:
        yield runtime


@pytest.mark.parametrize("campaign", behaviour_digests.CAMPAIGNS)
def test_campaign_digests_are_unchanged(campaign, tmp_path, request):
    expected = recorded_digests(DIGESTS)[campaign]
    if campaign == "small":  # the tests' small campaign, already run once for the suite
        done = request.getfixturevalue("small_campaign_done")
        actual = behaviour_digests.results_digests(done / "results" / "small")
    else:
        config = behaviour_digests.campaign_configs()[campaign]
        actual = behaviour_digests.run_campaign(
            config,
            repo=REPO,
            workdir=tmp_path / campaign,
            runtime=request.getfixturevalue("warm_runtime"),
        )
    different = behaviour_digests.differences(expected, actual)
    assert not different, (
        f"campaign {campaign!r}: {len(different)} of {len(expected)} digests differ from "
        f"{DIGESTS.relative_to(REPO)}:\n" + "\n".join(different)
    )


def test_dask_mode_without_workers_computes_what_its_cluster_did(tmp_path, request):
    """The shortened ``bo`` campaign (Dask mode, 8 LocalCluster workers) with
    ``dask.workers: 0``, every segment evaluating in its own process and no cluster
    started, gives the digests recorded for it."""
    expected = recorded_digests(DIGESTS)["bo"]
    config = behaviour_digests.campaign_configs()["bo"]
    config["dask"] = {**config.get("dask", {}), "workers": 0}
    actual = behaviour_digests.run_campaign(
        config,
        repo=REPO,
        workdir=tmp_path / "bo",
        runtime=request.getfixturevalue("warm_runtime"),
    )
    assert not behaviour_digests.differences(expected, actual)
    logs = "".join(path.read_text() for path in (tmp_path / "bo").rglob("window_*.log"))
    assert "generation 3/3" in logs and "tcp://" not in logs  # no Dask worker's line
