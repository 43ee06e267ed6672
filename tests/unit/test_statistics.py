"""Campaign statistics (evocamp.reporting.statistics and the analyses it runs) on
metrics files written by the package's own writer: significance tests against scipy,
Holm on a hand-made example, aggregates, runtime to target against a direct count,
tables stable byte for byte and in one number format."""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re

import numpy as np
import pytest
from scipy.stats import mannwhitneyu, trim_mean

from evocamp.config import run_spec, validate_config
from evocamp.model.layout import CampaignFolder
from evocamp.model.metrics import blank_metric_rows, write_rows
from evocamp.reporting import aggregates, runtime_to_target, significance, statistics, tables
from evocamp.reporting.comparison import (
    StatisticsSettings,
    final_metrics_table,
    load_runs,
    table_html,
    table_markdown,
)

#: A BO-like campaign: three algorithms on a minimisation benchmark (Ackley, lower is
#: better) and a maximised one (the plain sphere's objective), five seeds each.
CONFIG = validate_config(
    {
        "campaign": "stats",
        "seeds": 5,
        "algorithms": {
            "good": {"type": "random_search", "batch_size": 4},
            "fair": {"type": "random_search", "batch_size": 4},
            "poor": {"type": "random_search", "batch_size": 4},
        },
        "domains": {
            "ackley5": {"type": "ackley", "solution_dim": 5},
            "arm": {"type": "arm", "solution_dim": 4},
        },
    },
    check_plugins=False,
)
GENERATIONS = 12


def best_so_far(rng, start: float, step: float) -> np.ndarray:
    """A best-so-far curve rising from ``start`` by random improvements."""
    gains = rng.exponential(step, GENERATIONS) * (rng.random(GENERATIONS) < 0.6)
    return start + np.cumsum(gains)


def write_campaign(folder, *, seeds: int = 5) -> list:
    """Runs of :data:`CONFIG` (``seeds`` each): metrics.csv through the package's
    writer, and the finished summary that names the domain's type."""
    rng = np.random.default_rng(7)
    quality = {"good": 1.0, "fair": 0.6, "poor": 0.2}
    paths = []
    for algorithm, domain in itertools.product(CONFIG["algorithms"], CONFIG["domains"]):
        for seed in range(seeds):
            run = folder / algorithm / domain / f"seed{seed}"
            rows = blank_metric_rows(GENERATIONS + 1)
            rows["generation"] = np.arange(GENERATIONS + 1)
            rows["evaluations"] = 4 * np.arange(GENERATIONS + 1)
            rows["wall_seconds"] = 0.5 + rng.random(GENERATIONS + 1)
            curve = best_so_far(rng, -20.0, quality[algorithm])
            rows["best_objective"] = np.concatenate([[np.nan], curve])
            if domain == "arm":
                rows["qd_score"] = 10 * quality[algorithm] * np.arange(GENERATIONS + 1)
                rows["qd_score"] += rng.normal(0, 3, GENERATIONS + 1)
                rows["coverage"] = np.linspace(0, 0.5 * quality[algorithm], GENERATIONS + 1)
            write_rows(run / "metrics.csv", rows)
            spec = run_spec(CONFIG, algorithm=algorithm, domain=domain, seed=seed)
            (run / "finished").mkdir()
            (run / "finished" / f"gen_{GENERATIONS:06d}.json").write_text(
                json.dumps({"run_spec": spec}, sort_keys=True)
            )
            paths.append(run / "metrics.csv")
    return paths


@pytest.fixture(scope="module")
def campaign_metrics(tmp_path_factory) -> list:
    return write_campaign(tmp_path_factory.mktemp("stats"))


@pytest.fixture
def runs(campaign_metrics):
    return load_runs(campaign_metrics)


def read_csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def final(runs, algorithm, domain, field) -> np.ndarray:
    members = sorted(
        (r for r in runs if r.algorithm == algorithm and r.domain == domain), key=lambda r: r.seed
    )
    return np.array([r.values(field)[-1] for r in members])


def direct_a12(x, y, *, lower_is_better=False) -> float:
    """A12 counted over every pair of runs (ties half)."""
    wins = sum((a < b) if lower_is_better else (a > b) for a in x for b in y)
    ties = sum(a == b for a in x for b in y)
    return (wins + 0.5 * ties) / (len(x) * len(y))


def test_tests_csv_matches_a_direct_scipy_computation_on_the_runs_numbers(runs):
    rows = read_csv(significance.tests_csv(significance.significance_tests(runs, alpha=0.05)))
    assert list(rows[0]) == list(significance.TEST_COLUMNS)
    tested = {(r["domain"], r["metric"]) for r in rows}
    assert ("ackley5", "best_value") in tested and ("arm", "qd_score") in tested
    assert ("ackley5", "qd_score") not in tested, "a metric no run of the domain has"
    assert ("arm", "best_value") not in tested, "the arm is not minimised"
    for row in rows:
        lower = row["metric"] in ("best_value", "elapsed_seconds")
        values = final(runs, row["algorithm"], row["domain"], row["metric"])
        reference = final(runs, row["reference"], row["domain"], row["metric"])
        assert int(row["n"]) == len(values) == 5
        best = min if lower else max
        means = {
            a: final(runs, a, row["domain"], row["metric"]).mean() for a in CONFIG["algorithms"]
        }
        assert means[row["reference"]] == best(means.values())
        if row["algorithm"] == row["reference"]:
            assert row["p"] == row["statistic"] == row["a12"] == row["significant"] == ""
            continue
        direct = mannwhitneyu(values, reference, alternative="two-sided")
        assert float(row["statistic"]) == direct.statistic
        assert float(row["p"]) == direct.pvalue
        assert float(row["a12"]) == pytest.approx(
            direct_a12(values, reference, lower_is_better=lower)
        )
    ackley = {
        r["algorithm"]: r for r in rows if r["metric"] == "best_value" and r["domain"] == "ackley5"
    }
    assert ackley["good"]["reference"] == "good"
    assert ackley["poor"]["significant"] == "true" and float(ackley["poor"]["a12"]) == 0.0


def test_holm_on_a_hand_made_example():
    # Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04, made
    # monotone: 0.02, 0.03, 0.06, 0.06.
    corrected, reject = significance.holm([0.01, 0.04, 0.03, 0.005], alpha=0.05)
    assert corrected == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert reject.tolist() == [True, False, False, True]
    assert significance.holm([], alpha=0.05)[0].size == 0


def test_holm_corrects_within_each_domain_and_metric(runs):
    tests = significance.significance_tests(runs, alpha=0.05)
    for (domain, metric), block in itertools.groupby(tests, lambda r: (r["domain"], r["metric"])):
        block = [r for r in block if r["p"] is not None]
        assert len(block) == 2, (domain, metric)
        low, high = sorted(block, key=lambda r: r["p"])
        assert low["p_holm"] == pytest.approx(min(1.0, 2 * low["p"]))
        assert high["p_holm"] == pytest.approx(min(1.0, max(2 * low["p"], high["p"])))
        for row in block:
            assert row["significant"] == (row["p_holm"] <= 0.05)


def test_tables_mark_the_best_and_the_algorithms_tied_with_it(runs):
    tests = significance.significance_tests(runs, alpha=0.05)
    marks = significance.table_marks(tests)
    note = significance.tests_caption(tests, alpha=0.05)
    assert "Mann-Whitney U" in note and "Holm" in note and "alpha = 0.05" in note
    table = final_metrics_table(runs, samples=200, seed=0)
    markdown = table_markdown(table, marks=marks, note=note)
    good_ackley = next(line for line in markdown.splitlines() if "| ackley5 | good |" in line)
    assert good_ackley.count("**") == 4, "bold best objective and best value"
    html = table_html(table, marks=marks, note=note)
    assert html.startswith("<table>\n<caption>Final metrics: mean over seeds") and note in html
    html_rows = [
        line.removeprefix("<tr><td>").removesuffix("</td></tr>").split("</td><td>")
        for line in html.splitlines()
        if line.startswith("<tr><td>")
    ]
    bold = re.compile(r"\*\*(.*?)\*\*")
    assert html_rows == [
        [bold.sub(r"<strong>\1</strong>", cell) for cell in row]
        for row in markdown_rows(markdown)[1:]
    ], "the Markdown table's cells, the best mean in <strong>"
    for row in tests:
        if row["significant"] is False:
            line = next(
                line
                for line in markdown.splitlines()
                if f"| {row['domain']} | {row['algorithm']} |" in line
            )
            assert "\u2020" in line


def test_fewer_than_two_seeds_leave_the_tests_out_with_a_note(tmp_path):
    runs = load_runs(write_campaign(tmp_path, seeds=1))
    tests = significance.significance_tests(runs, alpha=0.05)
    assert tests and all(row["p"] is None and row["significant"] is None for row in tests)
    assert "No significance tests" in significance.tests_caption(tests, alpha=0.05)
    assert ",,,," in significance.tests_csv(tests).splitlines()[1]


def test_captions_say_when_the_seeds_are_too_few_for_any_test_to_reject(tmp_path, runs):
    """2 vs 2 seeds: no p can be below 2 / C(4, 2) = 1/3 (scipy's exact test), nor with
    ties below the normal approximation's bound; both captions say so, with the fewest
    seeds that could reject at alpha = 0.05 (4: 2 / C(8, 4) = 0.029)."""
    tests = significance.significance_tests(
        load_runs(write_campaign(tmp_path, seeds=2)), alpha=0.05
    )
    exact, tied = significance.smallest_p(2, 2)
    assert exact == pytest.approx(2 / math.comb(4, 2))
    assert all(row["p"] >= tied for row in tests if row["p"] is not None)
    sentence = (
        "Too few seeds for any test to reject at alpha = 0.05: the smallest p a two-sided "
        f"Mann-Whitney U test can give is 0.3333 for 2 vs 2 seeds ({tied:.4g} if each "
        "algorithm's runs all tie); 4 seeds per algorithm are the fewest whose p can reach it."
    )
    assert sentence in significance.tests_markdown(tests, alpha=0.05).splitlines()[0]
    assert significance.tests_caption(tests, alpha=0.05).endswith(sentence)
    five = significance.significance_tests(runs, alpha=0.05)
    assert "Too few seeds" not in significance.tests_markdown(five, alpha=0.05)
    assert "Too few seeds" in significance.tests_caption(five, alpha=0.001)


def test_aggregates_match_a_direct_computation(runs):
    settings = StatisticsSettings()
    rng = np.random.default_rng(0)
    aggregate = aggregates.aggregate_scores(
        runs, "best_objective", settings, resamples=500, rng=rng
    )
    finals = {
        (d, a): final(runs, a, d, "best_objective")
        for d in CONFIG["domains"]
        for a in CONFIG["algorithms"]
    }
    normalised = {}
    for domain in CONFIG["domains"]:
        joined = np.concatenate([v for (d, _), v in finals.items() if d == domain])
        for algorithm in CONFIG["algorithms"]:
            values = finals[(domain, algorithm)]
            normalised[(domain, algorithm)] = (values - joined.min()) / np.ptp(joined)
    for algorithm in CONFIG["algorithms"]:
        pooled = np.concatenate([normalised[(d, algorithm)] for d in CONFIG["domains"]])
        iqm, low, high = aggregate.summaries["iqm"][algorithm]
        assert iqm == pytest.approx(trim_mean(pooled, 0.25))
        assert low <= iqm <= high
        assert aggregate.summaries["median"][algorithm][0] == pytest.approx(np.median(pooled))
        profile = aggregate.profiles[algorithm][0]
        tau = aggregate.taus[40]
        assert profile[40] == pytest.approx(
            np.mean([np.mean(normalised[(d, algorithm)] > tau) for d in CONFIG["domains"]])
        )
    probability = aggregate.improvement[("good", "poor")][0]
    assert probability == pytest.approx(
        np.mean([direct_a12(finals[(d, "good")], finals[(d, "poor")]) for d in CONFIG["domains"]])
    )
    assert "min-max" in aggregates.normalisation_statement(aggregate)


def test_reference_values_set_a_domains_normalisation(runs):
    settings = StatisticsSettings(reference={"ackley5": {"best_value": [25.0, 0.0]}})
    scores = aggregates.normalised_scores(runs, "best_objective", settings)
    values = final(runs, "fair", "ackley5", "best_value")
    assert scores.scores[("ackley5", "fair")] == pytest.approx((values - 25.0) / (0.0 - 25.0))
    assert scores.how["ackley5"] == "reference [-25, -0]"
    assert scores.how["arm"] == "min-max over the campaign's runs"


def test_targets_are_log_spaced_for_minimised_values():
    finals = np.array([4.0, 0.5, 2.0])
    targets, spacing = runtime_to_target.domain_targets(
        finals, lower_is_better=True, count=4, spacing="auto"
    )
    assert spacing == "log" and targets == pytest.approx([4.0, 2.0, 1.0, 0.5])
    targets, spacing = runtime_to_target.domain_targets(
        -finals, lower_is_better=False, count=3, spacing="auto"
    )
    assert spacing == "linear" and targets == pytest.approx([-4.0, -2.25, -0.5])
    with_zero = np.array([3.0, 0.0])
    assert (
        runtime_to_target.domain_targets(with_zero, lower_is_better=True, count=4, spacing="log")[1]
        == "linear"
    )


def test_ecdf_and_ert_match_a_direct_count(runs):
    (ackley, arm) = runtime_to_target.runtime_to_target(runs, StatisticsSettings(target_count=11))
    assert ackley.field == "best_value" and arm.field == "best_objective"
    assert len(ackley.targets) == 11 and ackley.spacing == "log"
    for entry, lower in ((ackley, True), (arm, False)):
        for algorithm in CONFIG["algorithms"]:
            members = sorted(
                (r for r in runs if r.algorithm == algorithm and r.domain == entry.domain),
                key=lambda r: r.seed,
            )
            direct = np.full((len(members), len(entry.targets)), np.inf)
            for i, run in enumerate(members):
                values = run.values(entry.field)
                for j, target in enumerate(entry.targets):
                    for g in range(len(values)):
                        if (values[g] <= target) if lower else (values[g] >= target):
                            direct[i, j] = run.rows["evaluations"][g]
                            break
            assert np.array_equal(entry.evaluations[algorithm], direct)
            for budget in (0, 8, 20, 47, 48):
                pairs = sum(hit <= budget for hit in direct.ravel())
                assert runtime_to_target.ecdf(direct, np.array([budget]))[0] == pairs / direct.size
            ert = runtime_to_target.expected_running_time(direct, np.full(len(members), 48.0))
            for j in range(len(entry.targets)):
                hits = direct[:, j][np.isfinite(direct[:, j])]
                spent = hits.sum() + 48.0 * (len(members) - len(hits))
                assert ert[j] == (spent / len(hits) if len(hits) else np.inf)
    hardest = ackley.evaluations["good"][:, -1]
    assert np.isfinite(hardest).sum() >= 1, "the best final value is a target some run reaches"


def test_expected_running_time_on_a_hand_made_example():
    runtimes = np.array([[10.0, np.inf], [30.0, 40.0], [np.inf, np.inf]])
    ert = runtime_to_target.expected_running_time(runtimes, totals=np.array([50.0, 40.0, 60.0]))
    assert ert.tolist() == [(10 + 30 + 60) / 2, (50 + 40 + 60) / 1]
    assert (
        runtime_to_target.expected_running_time(runtimes[2:], np.array([60.0])).tolist()
        == [np.inf] * 2
    )


def test_tables_are_byte_stable_across_reruns(campaign_metrics):
    metrics = campaign_metrics
    settings = StatisticsSettings(target_count=21)
    first, second = (
        statistics.campaign_statistics(load_runs(metrics), samples=300, seed=0, settings=settings)
        for _ in range(2)
    )
    # The tables the workflow expects of `evocamp compare` (evocamp.model.layout).
    assert sorted(first.tables) == sorted(path.name for path in CampaignFolder(".").table_files())
    assert first.tables == second.tables
    assert "probability_of_improvement,good,fair" in first.tables["aggregate.csv"]
    assert first.tables["tests.csv"].startswith("domain,metric,algorithm,reference,n,n_reference,")


def markdown_rows(text: str) -> list[list[str]]:
    """The cells of every row of the tables of a Markdown text (headers too; rules not)."""
    rows = [line.strip("|").split(" | ") for line in text.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row] for row in rows]


def test_markdown_tables_show_the_csv_numbers_with_four_significant_digits(campaign_metrics):
    runs = load_runs(campaign_metrics)
    results = statistics.campaign_statistics(
        runs, samples=300, seed=0, settings=StatisticsSettings(target_count=21)
    )
    tests_md = markdown_rows(results.tables["tests.md"])
    for row, cells in zip(read_csv(results.tables["tests.csv"]), tests_md[1:], strict=True):
        assert cells[:5] == [row[c] for c in ("domain", "metric", "algorithm", "reference")] + [
            f"{row['n']} vs {row['n_reference']}"
        ]
        shown = [f"{float(row[c]):.4g}" if row[c] else "-" for c in ("statistic", "p", "p_holm")]
        assert cells[5:8] == shown
    poor = next(c for c in tests_md if c[:3] == ["ackley5", "best_value", "poor"])
    assert poor[6:] == ["0.007937", "0.01587", "0", "yes"], "p of 5 vs 5 runs all apart"
    iqm = {
        (r["metric"], r["algorithm"]): r
        for r in read_csv(results.tables["aggregate.csv"])
        if r["statistic"] == "iqm"
    }
    summaries = [c for c in markdown_rows(results.tables["aggregate.md"]) if len(c) == 5]
    expected = []
    for aggregate in results.aggregates:
        for algorithm in aggregate.algorithms:
            row = iqm[(aggregate.normalised.metric, algorithm)]
            value, low, high = (float(row[c]) for c in ("value", "ci_low", "ci_high"))
            expected.append([algorithm, row["runs"], f"{value:.4g} [{low:.4g}, {high:.4g}]"])
    assert [c[:3] for c in summaries if c[0] != "algorithm"] == expected
    final = markdown_rows(results.tables["final_metrics.md"])
    good = next(c for c in final if c[:2] == ["ackley5", "good"])
    table = final_metrics_table(runs, samples=300, seed=0)
    row = next(r for r in table if (r["domain"], r["algorithm"]) == ("ackley5", "good"))
    mean, low, high = row["best_value"]
    assert good[final[0].index("best value (minimised)")] == (
        f"**{mean:.4g}** [{low:.4g}, {high:.4g}]"
    )


def test_table_writers_on_a_hand_made_table():
    rows = [
        ["a_b", 3, 0.1 + 0.2, None, True],
        ["c", np.int64(4), np.float64(12345.678), 1e-7, False],
    ]
    header = ["name", "n", "x", "y", "ok"]
    assert tables.csv_text(header, rows) == (
        "name,n,x,y,ok\na_b,3,0.30000000000000004,,true\nc,4,12345.678,1e-07,false\n"
    )
    assert tables.markdown_table(header, rows) == (
        "| name | n | x | y | ok |\n|---|---|---|---|---|\n"
        "| a_b | 3 | 0.3 | - | yes |\n| c | 4 | 1.235e+04 | 1e-07 | no |"
    )
    assert tables.interval((0.5, 0.25, 1.0)) == "0.5 [0.25, 1]"
    assert tables.html_table(header[:2], [r[:2] for r in rows], caption="a < b's").splitlines() == [
        "<table>",
        "<caption>a &lt; b's</caption>",
        "<thead><tr><th>name</th><th>n</th></tr></thead>",
        "<tbody>",
        "<tr><td>a_b</td><td>3</td></tr>",
        "<tr><td>c</td><td>4</td></tr>",
        "</tbody>",
        "</table>",
    ]
    latex = tables.latex_table(["A", "B"], [["x", "y"]], columns="lr", caption="a_b \u2020")
    assert latex.splitlines() == [
        "% Requires \\usepackage{booktabs}.",
        "% Caption: a\\_b \\dag{}",
        "\\begin{tabular}{lr}",
        "\\toprule",
        "A & B \\\\",
        "\\midrule",
        "x & y \\\\",
        "\\bottomrule",
        "\\end{tabular}",
    ]
