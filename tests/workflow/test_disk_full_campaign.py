"""A campaign whose results folder fills up: the failing job names the file in one
line, nothing already written is lost, and after space is freed the rerun finishes with
the archives of a run that never failed. A real small tmpfs, real Snakemake."""

from __future__ import annotations

import hashlib

from conftest import (
    archive_digests,
    merged,
    resize_filesystem,
    run_folder,
    run_snakemake,
    small_filesystem,
    write_config,
)

#: CMA-ME in 100-d with a 40 x 40 grid: light states and shard files are small, the
#: whole state of a kept generation (covariance matrices, archive) is not.
CAMPAIGN = {
    "campaign": "full",
    "master_seed": 2,
    "generations": 6,
    "checkpoint_every": 3,
    "shards": 2,
    "seeds": 1,
    "algorithms": {
        "cmame": {"type": "cma_me", "emitters": 2, "batch_size": 8, "archive": {"dims": [40, 40]}}
    },
    "domains": {"sphere": {"type": "sphere", "solution_dim": 100}},
}


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_full_disk_is_named_and_the_rerun_after_freeing_space_is_bitwise_equal(tmp_path):
    reference = tmp_path / "reference"
    write_config(reference, CAMPAIGN)
    run_snakemake(reference, "runs")
    expected = archive_digests(reference)

    workdir = tmp_path / "campaign"
    write_config(workdir, merged(CAMPAIGN, {"generations": 3}))
    with small_filesystem(workdir / "results", size="16m") as results:
        run_snakemake(workdir, "runs")
        folder = run_folder(workdir, CAMPAIGN, "cmame", "sphere", 0)
        kept = folder / "checkpoints" / "gen_000003.h5"
        kept_before = digest(kept)
        write_config(workdir, CAMPAIGN)
        # Leave room for shard files, light states and logs, not for a whole state.
        used = sum(p.stat().st_size for p in results.rglob("*") if p.is_file())
        whole = kept.stat().st_size
        resize_filesystem(results, size=f"{(used + whole // 2) // 4096 * 4096 + 65536}")
        failed = run_snakemake(workdir, "runs", check=False)
        assert failed.returncode != 0
        text = failed.stdout + failed.stderr
        assert "evocamp: error: no space left on device while writing " in text, text[-3000:]
        assert "nothing already written was lost" in text
        assert "Traceback" not in text.split("evocamp: error: no space left", 1)[0][-2000:]
        assert digest(kept) == kept_before
        resize_filesystem(results, size="64m")
        run_snakemake(workdir, "runs")
        assert archive_digests(workdir) == expected
