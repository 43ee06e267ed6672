"""A BBOB suite grid (2 functions x 1 dimension x 2 instances) through the real
Snakemake to COCO's figures and tables, and its IOHprofiler export loaded back with
iohinspector, whose fixed-budget and fixed-target numbers are evocamp's own."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_snakemake, write_config

from evocamp.reporting.status import run_progress
from evocamp.reporting.suite import BBOB_TARGETS
from evocamp.results import export_ioh, load_campaign, load_evaluations
from evocamp.tasks import bbob

pytestmark = pytest.mark.slow

CAMPAIGN = {
    "campaign": "bbob",
    "generations": 4,
    "checkpoint_every": 2,
    "seeds": 1,
    "mode": "dask",
    "dask": {"workers": 0},  # as config/bbob.yaml: no cluster, no per-run figures
    "figures": {"per_run": False},
    "storage": {"keep_evaluations": True},
    "algorithms": {
        "cma": {"type": "cma_es", "popsize": 6},
        "rs": {"type": "random_search", "batch_size": 6},
    },
    "domains": {
        "bbob": {"type": "bbob", "functions": [1, 8], "dimensions": [2], "instances": [1, 2]}
    },
}


def test_a_bbob_grid_runs_to_the_ecdf_figure_and_exports_what_iohinspector_reads(tmp_path):
    iohinspector = pytest.importorskip("iohinspector")
    write_config(tmp_path, CAMPAIGN)
    run_snakemake(tmp_path)
    campaign = tmp_path / "results" / "bbob"
    for name in ("bbob_ecdf", "critical_difference", "ecdf"):
        assert (campaign / "figures" / f"{name}.png").stat().st_size > 0
    assert not list(campaign.glob("*/*/seed0/figures"))  # figures.per_run: false
    ert = (campaign / "tables" / "bbob_ert.csv").read_text().splitlines()
    assert len(ert) == 1 + 2 * 2 * len(BBOB_TARGETS)  # (function, algorithm) x targets
    assert "4 problems: autorank needs at least 5" in (campaign / "tables" / "ranks.md").read_text()
    metrics = load_campaign(campaign)
    assert sorted(set(metrics.domain)) == [f"bbob_f{f}_d2_i{i}" for f in (1, 8) for i in (1, 2)]

    assert export_ioh(campaign, tmp_path / "ioh") == 8
    manager = iohinspector.DataManager()
    for algorithm in ("cma", "rs"):
        manager.add_folder(str(tmp_path / "ioh" / algorithm))
    loaded = manager.load(monotonic=True, include_meta_data=True).to_pandas()
    evaluations = load_evaluations(campaign)
    for (algorithm, domain), rows in evaluations.groupby(["algorithm", "domain"]):
        function, instance = int(domain.split("_")[1][1:]), int(domain.split("_")[3][1:])
        ours = rows.sort_values(["generation", "index"]).precision.to_numpy()
        best_so_far = np.minimum.accumulate(ours)
        theirs = loaded[
            (loaded.algorithm_name == algorithm)
            & (loaded.function_id == function)
            & (loaded.instance == instance)
        ].sort_values("evaluations")
        # Fixed budget: the best precision after each budget is evocamp's best so far
        # (to the 10 decimals of IOHprofiler's .dat files, as ioh's logger writes them).
        for budget in (1, 6, 12, 24):
            seen = theirs[theirs.evaluations <= budget].raw_y
            assert seen.min() == pytest.approx(best_so_far[budget - 1], rel=0, abs=5e-11)
        # Fixed target: the first evaluation reaching each target is evocamp's.
        for target in (1e2, 1e1, 1.0):
            hits = np.flatnonzero(best_so_far <= target)
            reached = theirs[theirs.raw_y <= target].evaluations
            if len(hits):
                assert reached.min() == hits[0] + 1
            else:
                assert reached.empty
        # The metrics' best precision (minus the best objective, minus f_opt) is the export's.
        run = metrics[(metrics.algorithm == algorithm) & (metrics.domain == domain)]
        final = -run.best_objective.iloc[-1] - bbob.optimum(function, instance, 2)
        assert theirs.raw_y.min() == pytest.approx(final, rel=0, abs=5e-11)
        # evocamp status shows the precision too.
        best, label = run_progress(campaign / algorithm / domain / "seed0", campaign).best()
        assert label == "best precision value (min.)"
        assert best[-1] == pytest.approx(final, rel=1e-12, abs=1e-15)
