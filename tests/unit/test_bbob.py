"""The BBOB suite (type bbob, through ioh): suite grids expanded into ordinary domains,
the functions' values and optima, the IOHprofiler export's files (the same bytes as
ioh's own logger, loaded back with iohinspector) and the COCO-style tables."""

from __future__ import annotations

import json

import numpy as np
import pytest
from campaigns import REPO

from evocamp.base.errors import ConfigError
from evocamp.catalogue.domains import minimised_value, objective_max
from evocamp.catalogue.factory import build_optimizer
from evocamp.cli import main
from evocamp.config import (
    experiments_of,
    load_config_file,
    run_spec,
    seeds_of,
    validate_config,
)
from evocamp.reporting.comparison import RunMetrics
from evocamp.reporting.suite import BBOB_TARGETS, ert_rows, rank_algorithms, suite_runtimes
from evocamp.results import IohRun, ioh_lines, write_ioh
from evocamp.tasks import bbob

ioh = pytest.importorskip("ioh")


def grid_config(**domain) -> dict:
    return {
        "algorithms": {"cma": {"type": "cma_es"}, "rs": {"type": "random_search"}},
        "domains": {"bbob": {"type": "bbob", **domain}},
        "shards": 1,
        "seeds": 1,
    }


def test_a_grid_expands_to_one_ordinary_domain_per_problem():
    config = validate_config(
        grid_config(functions=[1, "3-4"], dimensions=[2, 5], instances=[1, 2]),
        check_results_dir=False,
    )
    names = list(config["domains"])
    assert len(names) == 3 * 2 * 2
    assert names[:3] == ["bbob_f1_d2_i1", "bbob_f1_d2_i2", "bbob_f1_d5_i1"]
    assert names[-1] == "bbob_f4_d5_i2"
    assert [pair for pair in experiments_of(config) if pair[1] == "bbob_f3_d5_i2"] == [
        ("cma", "bbob_f3_d5_i2"),
        ("rs", "bbob_f3_d5_i2"),
    ]
    # The expanded domain's run spec is that of the same domain written by hand.
    single = validate_config(
        {
            **grid_config(),
            "domains": {
                "bbob_f3_d5_i2": {
                    "type": "bbob",
                    "solution_dim": 5,
                    "params": {"function": 3, "instance": 2},
                }
            },
        },
        check_results_dir=False,
    )
    expanded = run_spec(config, algorithm="cma", domain="bbob_f3_d5_i2", seed=0)
    assert expanded == run_spec(single, algorithm="cma", domain="bbob_f3_d5_i2", seed=0)
    domain = expanded["domain_spec"]
    assert domain["bounds"] == [-5.0, 5.0] and domain["extra_fields"] == ["precision"]
    assert domain["params"] == {"function": 3, "instance": 2} and domain["solution_dim"] == 5


def test_experiments_naming_a_grid_run_on_each_of_its_domains():
    config = grid_config(functions=[2], instances=["1-3"])
    config["experiments"] = [{"algorithm": "rs", "domain": "bbob"}]
    config = validate_config(config, check_results_dir=False)
    assert experiments_of(config) == [("rs", f"bbob_f2_d20_i{i}") for i in (1, 2, 3)]


def test_check_config_lists_the_expanded_runs(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(grid_config(functions=[1, 8], dimensions=[2], instances=[1, 2])))
    assert main(["check-config", str(path)]) == 0
    runs = capsys.readouterr().out.split()
    assert runs == [
        f"{a}/bbob_f{f}_d2_i{i}/seed0" for a in ("cma", "rs") for f in (1, 8) for i in (1, 2)
    ]


@pytest.mark.parametrize(
    ("domain", "problem"),
    [
        ({"functions": [25]}, "key 'domains.bbob.functions': a BBOB function is 1 to 24, not 25"),
        ({"functions": [1], "params": {"function": 2}}, "key 'domains.bbob.params.function'"),
        ({"dimensions": [1]}, "key 'domains.bbob.dimensions': a dimension is at least 2, not 1"),
        ({"params": {"function": 0}}, "key 'domains.bbob.params.function': a BBOB function is 1"),
        ({"type": "ackley", "functions": [1]}, "only allowed for type bbob, not ackley"),
    ],
)
def test_a_wrong_grid_is_named_with_its_key(domain, problem):
    with pytest.raises(ConfigError, match=problem.replace(".", r"\.")):
        validate_config(grid_config(**domain), check_results_dir=False)


@pytest.mark.parametrize(
    ("domain", "problem"),
    [
        ({"x0": "centre"}, "key 'domains.bbob.x0': 'centre' is neither a number nor random"),
        ({"bounded": "no"}, "key 'domains.bbob.bounded': 'no' is not of type 'boolean'"),
        (
            {"type": "ackley", "x0": "random"},
            "key 'domains.bbob.x0': random draws in a built-in domain's box (bbob), which "
            "type ackley has not; give a number",
        ),
    ],
)
def test_a_wrong_start_or_bounded_is_one_line_naming_its_key(domain, problem):
    with pytest.raises(ConfigError) as raised:
        validate_config(grid_config(**domain), check_results_dir=False)
    assert str(raised.value).splitlines()[1:] == [f"  {problem}"]


def test_x0_random_draws_in_cocos_box_from_the_run_and_bounded_false_unbounds_who_can():
    """``x0: random``: every run's initial point is uniform in [-4, 4]^d, drawn from its
    seed (the same for the same run, another for another seed); ``bounded: false``: the
    pycma family and evocamp's CMA-ES get no bounds, random search keeps [-5, 5]."""
    config = validate_config(
        {
            "algorithms": {
                "bipop": {"type": "bipop_cma_es"},
                "cma": {"type": "cma_es"},
                "rs": {"type": "random_search"},
            },
            "domains": {
                "bbob": {"type": "bbob", "solution_dim": 10, "x0": "random", "bounded": False}
            },
            "seeds": 2,
        },
        check_results_dir=False,
    )

    def built(algorithm: str, seed: int):
        return build_optimizer(run_spec(config, algorithm=algorithm, domain="bbob", seed=seed))

    first, again, other = built("bipop", 0), built("bipop", 0), built("bipop", 1)
    assert np.array_equal(first.x0, again.x0) and not np.array_equal(first.x0, other.x0)
    assert np.all(np.abs(np.concatenate([first.x0, other.x0])) <= bbob.START)
    assert len(np.unique(first.x0)) == 10 and first.es.boundary_handler.bounds is None
    assert first.restart_x0(0).tolist() == first.x0.tolist()
    assert not np.array_equal(first.restart_x0(1), first.x0)  # the first restart's own
    assert np.array_equal(built("cma", 0).x0, built("cma", 0).x0)
    assert np.isinf(built("cma", 0).es.upper_bounds).all()
    assert (built("rs", 0).low, built("rs", 0).high) == (-5.0, 5.0)
    default = validate_config(grid_config(dimensions=[3]), check_results_dir=False)
    cma = build_optimizer(run_spec(default, algorithm="cma", domain="bbob_f1_d3_i1", seed=0))
    assert not cma.x0.any() and (cma.es.upper_bounds == 5.0).all()


def test_values_are_ioh_s_and_precision_is_zero_at_the_optimum():
    x_opt = bbob.optimum_solution(1, 1, 2)
    found = bbob.bbob(np.stack([x_opt, np.zeros(2)]), np.zeros(2, np.uint64), function=1)
    # Sphere, instance 1, 2-D: f_opt = 79.48 at x_opt; f(0) = 80.88209408 (ioh 0.4.2).
    assert found["precision"][0] == 0.0
    assert found["objective"][1] == pytest.approx(-80.88209408, abs=1e-8)
    assert found["precision"][1] == pytest.approx(80.88209408 - 79.48, abs=1e-8)
    assert found["measures"].shape == (2, 0)
    spec = {"type": "bbob", "solution_dim": 2, "params": {"function": 1, "instance": 1}}
    assert objective_max(spec) == -79.48 and minimised_value(spec) == "precision"
    # Vectorised, and the same values on every call.
    rng = np.random.default_rng(0)
    solutions = rng.uniform(-5, 5, (50, 10))
    once = bbob.values(solutions, function=20, instance=3)
    one_by_one = [bbob.values(row[None], function=20, instance=3)[0] for row in solutions]
    assert np.array_equal(once, one_by_one)
    assert np.array_equal(once, bbob.values(solutions, function=20, instance=3))


def test_the_ioh_export_is_what_ioh_s_own_logger_writes(tmp_path):
    """The same evaluations logged by ioh's logger.Analyzer and written by write_ioh
    give the same .dat bytes and the same runs in the .json; iohinspector loads both
    with the same values."""
    iohinspector = pytest.importorskip("iohinspector")
    rng = np.random.default_rng(7)
    points = {
        (instance, seed): rng.uniform(-5, 5, (25, 3)) for instance in (1, 2) for seed in (0, 1)
    }
    logger = ioh.logger.Analyzer(
        root=str(tmp_path), folder_name="reference", algorithm_name="rs", store_positions=False
    )
    runs = []
    for instance in (1, 2):
        problem = ioh.get_problem(
            3, instance=instance, dimension=3, problem_class=ioh.ProblemClass.BBOB
        )
        problem.attach_logger(logger)
        for seed in (0, 1):
            for x in points[instance, seed]:
                problem(x)
            problem.reset()
            precision = bbob.bbob(
                points[instance, seed], np.zeros(25), function=3, instance=instance
            )["precision"]
            lines, best = ioh_lines(np.arange(1, 26), precision)
            found = {"evals": best + 1, "y": float(precision[best])}
            found["x"] = points[instance, seed][best].tolist()
            runs.append(IohRun("rs", 3, 3, instance, lines, 25, found, seed))
        problem.detach_logger()
    logger.close()
    write_ioh(runs, tmp_path / "export", info="test")
    reference = tmp_path / "reference"
    mine = tmp_path / "export" / "rs"
    dat = "data_f3_Rastrigin/IOHprofiler_f3_DIM3.dat"
    assert (mine / dat).read_text() == (reference / dat).read_text()
    theirs = json.loads((reference / "IOHprofiler_f3_Rastrigin.json").read_text())
    ours = json.loads((mine / "IOHprofiler_f3_Rastrigin.json").read_text())
    for key in ("function_id", "function_name", "maximization", "attributes"):
        assert ours[key] == theirs[key]
    assert ours["scenarios"][0]["path"] == theirs["scenarios"][0]["path"]
    for a, b in zip(ours["scenarios"][0]["runs"], theirs["scenarios"][0]["runs"], strict=True):
        assert (a["instance"], a["evals"], a["best"]["evals"]) == (
            b["instance"],
            b["evals"],
            b["best"]["evals"],
        )
        assert a["best"]["y"] == pytest.approx(b["best"]["y"], rel=1e-12)
    loaded = []
    for folder in (reference, mine):
        manager = iohinspector.DataManager()
        manager.add_folder(str(folder))
        loaded.append(
            manager.load(monotonic=True, include_meta_data=True).select(
                ["instance", "evaluations", "raw_y"]
            )
        )
    assert loaded[0]["evaluations"].to_list() == loaded[1]["evaluations"].to_list()
    assert np.allclose(loaded[0]["raw_y"].to_numpy(), loaded[1]["raw_y"].to_numpy(), rtol=1e-9)


def bbob_run(algorithm: str, function: int, seed: int, precision: list[float]) -> RunMetrics:
    rows = np.zeros(len(precision), dtype=[("evaluations", "f8"), ("best_objective", "f8")])
    rows["evaluations"] = np.arange(1, len(precision) + 1) * 10
    rows["best_objective"] = -np.asarray(precision)  # objective_max 0: best_value = precision
    return RunMetrics(
        algorithm,
        f"bbob_f{function}_d2_i1",
        seed,
        rows,
        minimised="precision",
        domain_spec={
            "type": "bbob",
            "solution_dim": 2,
            "params": {"function": function, "instance": 1},
        },
    )


def test_ert_per_function_counts_runs_to_each_precision_target():
    runs = [bbob_run("a", 1, 0, [50.0, 1e-3, 1e-9]), bbob_run("a", 1, 1, [50.0, 5.0, 5.0])]
    entries = suite_runtimes(runs)
    assert list(entries[0].runtimes[[0, 25, 50]]) == [10.0, 20.0, 30.0]  # 1e2, 1e-3, 1e-8
    assert np.isinf(entries[1].runtimes[50])
    rows = {row[2]: row for row in ert_rows(entries)}
    assert len(rows) == len(BBOB_TARGETS)
    # Target 1e-8: one of two runs reaches it at 30 evaluations; the other spent 30.
    assert rows[BBOB_TARGETS[50]][4:] == [2, 1, 60.0]
    assert rows[BBOB_TARGETS[0]][4:] == [2, 2, 10.0]


def test_ranks_need_five_problems_and_name_the_best():
    few = [bbob_run(a, f, 0, [v]) for a, v in (("a", 1.0), ("b", 2.0)) for f in (1, 2)]
    assert rank_algorithms(suite_runtimes(few), alpha=0.05).why_not.startswith("2 problems")
    pytest.importorskip("autorank")
    runs = [
        bbob_run(a, f, 0, [v * f])
        for a, v in (("a", 1.0), ("b", 2.0), ("c", 3.0))
        for f in range(1, 9)
    ]
    ranking = rank_algorithms(suite_runtimes(runs), alpha=0.05)
    assert ranking.problems == 8 and ranking.result.omnibus == "friedman"
    assert list(ranking.result.rankdf.index) == ["a", "b", "c"]
    assert ranking.result.pvalue < 0.05


def test_the_shipped_bbob_campaign_is_valid():
    config = load_config_file(REPO / "config" / "bbob.yaml", check_results_dir=False)
    assert len(experiments_of(config)) * len(seeds_of(config)) == 5 * 24 * 3 * 2
    assert config["dask"]["workers"] == 0 and not config["figures"]["per_run"]


def test_a_segment_writes_its_first_and_last_progress_line_and_one_a_second_between(
    monkeypatch,
):
    """Dask mode's segment loop in its own process (``dask.workers: 0``): generations of
    microseconds get the progress line of the segment's first and last generation and,
    between them, one at most every ``PROGRESS_SECONDS``; every generation's without the
    limit, and the same run either way."""
    from evocamp.executors import dask_mode
    from evocamp.loop.engine import initialise

    config = validate_config(
        {
            "campaign": "lines",
            "mode": "dask",
            "generations": 6,
            "checkpoint_every": 6,
            "seeds": 1,
            "algorithms": {"rs": {"type": "random_search", "batch_size": 4}},
            "domains": {
                "b": {"type": "bbob", "functions": [1], "dimensions": [2], "instances": [1]}
            },
        }
    )
    spec = run_spec(config, algorithm="rs", domain="b_f1_d2_i1", seed=0)

    def segment() -> tuple[list[str], object]:
        lines = []
        state = dask_mode.run_generations(
            initialise(spec), until=6, shards=1, client=None, workers=1, total=6,
            log=lines.append,
        )  # fmt: skip
        return [line.split(" | ")[0] for line in lines], state

    limited, state = segment()
    assert limited == ["rs/b_f1_d2_i1/seed0: generation 1/6", "rs/b_f1_d2_i1/seed0: generation 6/6"]
    monkeypatch.setattr(dask_mode, "PROGRESS_SECONDS", 0.0)
    every, again = segment()
    assert every == [f"rs/b_f1_d2_i1/seed0: generation {g}/6" for g in range(1, 7)]
    for column in ("evaluations", "best_objective", "gen_obj_mean"):
        assert again.metrics_window[column].tobytes() == state.metrics_window[column].tobytes()
