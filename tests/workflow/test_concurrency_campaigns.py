"""A campaign whose shards run their evaluations several at once
(``evaluation.concurrency``): the archive that of one at a time."""

from __future__ import annotations

import pytest
from conftest import archive_digests, run_snakemake, write_config
from test_failure_campaigns import misbehaving_config

#: Some raise, some crash (seeds are random: about 1 in 13 and 1 in 17).
FAILURES = "raise %13\nsegfault %17"


@pytest.mark.slow
def test_concurrency_changes_no_archive_and_asks_its_cores(tmp_path, small_config):
    evaluation = {"on_failure": "discard"}
    for concurrency in (1, 3):
        workdir = tmp_path / f"c{concurrency}"
        workdir.mkdir()
        (workdir / "control").write_text(FAILURES)
        config = misbehaving_config(
            small_config,
            workdir,
            evaluation={**evaluation, "concurrency": concurrency},
            generations=2,
            shards=2,
        )
        write_config(workdir, config)
        run_snakemake(workdir, "runs", cores=8)
        log = next((workdir / ".snakemake" / "log").iterdir()).read_text()
        assert ("threads: 3" in log) == (concurrency == 3)  # the evaluate jobs' cores
    assert archive_digests(tmp_path / "c1") == archive_digests(tmp_path / "c3")
    logs = [
        "".join(path.read_text() for path in (tmp_path / name / "results").rglob("*.log"))
        for name in ("c1", "c3")
    ]
    assert logs[0].count("(discarded)") == logs[1].count("(discarded)") > 0
