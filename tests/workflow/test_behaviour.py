"""Behaviour unchanged: campaigns compute exactly what the recorded baseline computed.

Each test runs one campaign of ``benchmarks/behaviour_digests.py`` (the tests' small
campaign, and the first generations of each shipped config) with this checkout's code
and asserts that the sha256 of every run's ``archive.h5`` and of every ``metrics.csv``
column except the timing ones (``*_seconds``, ``utilisation``) equal those in
``tests/data/behaviour_digests.json``, which was recorded before a refactoring. A
mismatch lists the files and columns that differ.

Regenerate the file only when a change of behaviour is intended (and say so in the
commit), from the repository root::

    python benchmarks/behaviour_digests.py --repo . --out tests/data/behaviour_digests.json
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

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
RECORDED = json.loads(DIGESTS.read_text())


@pytest.fixture(scope="module")
def warm_runtime():
    """One private warm-start folder for the campaigns of this module, whose servers
    are stopped at its end."""
    with behaviour_digests.warm_servers(REPO) as runtime:
        yield runtime


@pytest.mark.parametrize("campaign", behaviour_digests.CAMPAIGNS)
def test_campaign_digests_are_unchanged(campaign, tmp_path, request):
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
    expected = RECORDED[campaign]
    different = behaviour_digests.differences(expected, actual)
    assert not different, (
        f"campaign {campaign!r}: {len(different)} of {len(expected)} digests differ from "
        f"{DIGESTS.relative_to(REPO)}:\n" + "\n".join(different)
    )
