"""Figures, tables, the HTML report and live monitoring, on real campaign results."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
from html import unescape as html_unescape
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, executed, merged, run_snakemake, snakemake_command, write_config

FIGURE_FILES = ("figures/heatmap", "figures/curves", "figures/timing")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """A finished two-seed campaign (MAP-Elites beside OpenAI-ES, whose passive archive
    puts it in the same figures, on one domain), run by a copy of the workflow in
    ``code/`` (whose plotting code a test edits)."""
    workdir = tmp_path_factory.mktemp("figures")
    (workdir / "code").mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("Snakefile", "workflow", "src", "profiles", "config", "envs"):
        source, copy = REPO / name, workdir / "code" / name
        shutil.copytree(source, copy, ignore=skip) if source.is_dir() else shutil.copy(source, copy)
    config = merged(
        __import__("conftest").SMALL_CAMPAIGN, {"generations": 3, "seeds": 2, "campaign": "fig"}
    )
    config["algorithms"] = {name: config["algorithms"][name] for name in ("me", "oes")}
    write_config(workdir, config)
    run(workdir)
    return workdir


def run(campaign: Path, *args: str) -> str:
    """Snakemake on the campaign with its workflow copy; its output."""
    completed = run_snakemake(campaign, *args, snakefile=campaign / "code" / "Snakefile")
    return completed.stdout + completed.stderr


def figure_bytes(workdir: Path) -> dict[str, bytes]:
    files = sorted((workdir / "results").rglob("*.pdf")) + sorted(
        (workdir / "results").rglob("*.png")
    )
    files += sorted((workdir / "results" / "fig" / "tables").iterdir())
    return {str(path.relative_to(workdir)): path.read_bytes() for path in files}


def test_campaign_figures_and_tables_exist(campaign):
    campaign_folder = campaign / "results" / "fig"
    for name in ("curves", "heatmaps"):
        for suffix in ("pdf", "png"):
            assert (campaign_folder / "figures" / f"{name}.{suffix}").stat().st_size > 5000
    for run in ("me/sphere/seed0", "oes/sphere/seed1"):
        for name in FIGURE_FILES:
            assert (campaign_folder / run / f"{name}.pdf").exists()
    csv = (campaign_folder / "tables" / "final_metrics.csv").read_text().splitlines()
    assert csv[0].startswith(
        "domain,algorithm,seeds,evaluations,failed,qd_score_mean,qd_score_ci_low"
    )
    assert {line.split(",")[4] for line in csv[1:]} == {"0"}  # no evaluation failed
    assert [line.split(",")[:3] for line in csv[1:]] == [
        ["sphere", "me", "2"],
        ["sphere", "oes", "2"],
    ]
    low, mean, high = (
        float(x) for x in (csv[1].split(",")[6], csv[1].split(",")[5], csv[1].split(",")[7])
    )
    assert low <= mean <= high
    markdown = (campaign_folder / "tables" / "final_metrics.md").read_text()
    assert "| sphere | me | 2 |" in markdown
    latex = (campaign_folder / "tables" / "final_metrics.tex").read_text()
    assert "\\toprule" in latex and "\\bottomrule" in latex and "sphere & oes" in latex
    assert "Mann-Whitney U" in markdown and "alpha = 0.05" in markdown and "**" in markdown
    assert "% Caption: Bold: the best mean" in latex and "\\textbf{" in latex


def test_campaign_statistics_from_the_runs_own_numbers(campaign):
    """tests.csv holds scipy's Mann-Whitney U of the runs' final values (read back from
    their metrics.csv); the aggregate, ECDF and per-seed figures and tables exist."""
    from scipy.stats import mannwhitneyu

    from evocamp.model.metrics import read_metrics_csv

    folder = campaign / "results" / "fig"
    for name in ("seeds", "aggregate", "ecdf"):
        for suffix in ("pdf", "png"):
            assert (folder / "figures" / f"{name}.{suffix}").stat().st_size > 5000
    finals = {
        algorithm: np.array(
            [
                read_metrics_csv(folder / algorithm / "sphere" / f"seed{seed}" / "metrics.csv")[-1]
                for seed in (0, 1)
            ]
        )
        for algorithm in ("me", "oes")
    }
    rows = list(csv.DictReader((folder / "tables" / "tests.csv").open()))
    assert {row["metric"] for row in rows} == {
        "qd_score",
        "norm_qd_score",
        "coverage",
        "cqd_score",
        "best_objective",
        "elapsed_seconds",
    }
    for row in rows:
        if row["metric"] == "elapsed_seconds" or row["algorithm"] == row["reference"]:
            continue
        values, reference = (finals[row[key]][row["metric"]] for key in ("algorithm", "reference"))
        direct = mannwhitneyu(values, reference, alternative="two-sided")
        assert (float(row["statistic"]), float(row["p"])) == (direct.statistic, direct.pvalue)
        assert float(row["p_holm"]) == direct.pvalue, "one comparison: Holm changes nothing"
        assert float(row["a12"]) == direct.statistic / 4
        assert row["n"] == row["n_reference"] == "2" and row["significant"] == "false"
    aggregate = list(csv.DictReader((folder / "tables" / "aggregate.csv").open()))
    assert {(r["metric"], r["statistic"]) for r in aggregate} >= {
        ("qd_score", "iqm"),
        ("best_objective", "probability_of_improvement"),
    }
    ert = list(csv.DictReader((folder / "tables" / "ert.csv").open()))
    assert len(ert) == 2 * 51 and {r["metric"] for r in ert} == {"best_objective"}
    hardest = [r for r in ert if r["target_index"] == "50"]
    assert sum(int(r["successes"]) for r in hardest) >= 1


def test_rebuilding_figures_is_byte_identical_and_evaluates_nothing(campaign):
    before = figure_bytes(campaign)
    assert len(before) >= 20
    for path in before:
        (campaign / path).unlink()
    rebuilt = run_snakemake(campaign, "figures", snakefile=campaign / "code" / "Snakefile")
    for rule in ("evaluate", "tell", "initialise", "finalise"):
        assert executed(rebuilt, rule) == []
    assert figure_bytes(campaign) == before


def test_changing_plotting_code_reruns_only_figure_rules(campaign):
    """Figure rules take their code as input: editing plotting.py reruns them only."""
    assert "Nothing to be done" in run(campaign)
    plotting = campaign / "code" / "src" / "evocamp" / "reporting" / "plotting.py"
    plotting.write_text(
        plotting.read_text().replace('"lines.linewidth": 1.2', '"lines.linewidth": 1.5')
    )
    text = run(campaign)
    assert "rule plot_run:" in text and "rule compare:" in text
    for rule in ("evaluate", "tell", "initialise", "finalise", "keep_checkpoint"):
        assert f"rule {rule}:" not in text


HEADLESS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"],
    ):
        subprocess.run(command, check=True, env=environment, capture_output=True, timeout=900)
    return shutil.which("chromium")


#: Run in the rendered report (the page as a reader sees it, 1280 pixels wide): the
#: first page's headings in order, where its final-metrics table, curves and
#: configuration are, and which of its figures show an image.
FIRST_SCREEN_PROBE = """<script>
setTimeout(function () {
  const box = (element) => element && element.getBoundingClientRect();
  const figures = Array.from(document.querySelectorAll("img.evocamp-figure"));
  const probe = document.createElement("pre");
  probe.id = "probe";
  probe.textContent = JSON.stringify({
    width: window.innerWidth,
    headings: Array.from(document.querySelectorAll(".prose h1, .prose h2"), (h) => h.textContent),
    table: box(document.querySelector("#final-metrics table")),
    curves: box(document.querySelector('img[alt="metric curves"]')),
    configuration: box(document.getElementById("configuration")),
    folded: !(document.querySelector("#configuration details") || {open: true}).open,
    shown: figures.filter((image) => image.naturalWidth > 0).map((image) => image.alt),
    figures: figures.length,
  });
  document.body.appendChild(probe);
}, 3000);
</script>"""


def test_html_report_opens_on_the_answer_and_contains_every_figure(campaign, tmp_path):
    """Snakemake's report opens on the campaign's answer: its first screen (1280 x 800)
    shows the final-metrics table and the metric curves; every campaign and run figure
    follows on the same page, the configuration last, folded."""
    report = campaign / "report.html"
    completed = run_snakemake(
        campaign, "--report", str(report), snakefile=campaign / "code" / "Snakefile"
    )
    assert "Report created" in completed.stdout + completed.stderr
    html = report.read_text()
    assert html.count("data:image/png") == 2 * 2 * 3 + 5, "every figure once: no copies"
    for caption in (
        "95% percentile-bootstrap confidence band",
        "effective utilisation",
        "master_seed",
        "two-sided Mann-Whitney U test",
        "significant at alpha = 0.05",
        "stratified bootstrap interval",
        "min-max over all runs of the campaign",
        "Runtime to target",
        "every seed as a labelled point",
        "Too few seeds for any test to reject at alpha = 0.05",
    ):
        assert caption in html
    screenshot = tmp_path / "report.png"
    browser = [chromium(), *HEADLESS, "--virtual-time-budget=10000", "--window-size=1280,800"]
    subprocess.run(
        [
            *browser,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--hide-scrollbars",
            f"--screenshot={screenshot}",
            report.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    probed = tmp_path / "probed.html"
    page, end, rest = html.rpartition("</body>")  # the last: scripts of the page hold others
    probed.write_text(page + FIRST_SCREEN_PROBE + end + rest)
    dom = subprocess.run(
        [*browser, f"--user-data-dir={tmp_path / 'profile2'}", "--dump-dom", probed.as_uri()],
        check=True,
        capture_output=True,
        text=True,
        timeout=180,
    ).stdout
    page = json.loads(html_unescape(dom.split('<pre id="probe">', 1)[1].split("</pre>", 1)[0]))
    assert page["headings"] == [
        "Campaign fig",
        "Final metrics",
        "Metric curves",
        "More campaign figures",
        "Per-run figures",
        "Tables",
        "Configuration",
    ]
    first_screen = 800  # the screenshot's height (the page is laid out from its top)
    assert page["width"] == 1280
    assert page["table"]["bottom"] < first_screen, "the whole final-metrics table"
    assert page["curves"]["top"] < first_screen - 200, "the curves' first panels"
    assert page["configuration"]["top"] > page["curves"]["bottom"] and page["folded"]
    assert page["figures"] == 2 * 2 * 3 + 5 and len(page["shown"]) == page["figures"]
    assert "me on sphere, seed 1: timing" in page["shown"]
    from matplotlib.image import imread

    pixels = imread(screenshot)
    assert pixels.shape[:2] == (800, 1280)
    assert pixels.std() > 0.02, "the screenshot is not blank"


def status(*args: str, cwd: Path | None = None) -> str:
    completed = subprocess.run(
        [sys.executable, "-m", "evocamp", "status", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_status_while_running_and_when_finished(tmp_path):
    config = merged(__import__("conftest").SMALL_CAMPAIGN, {"generations": 12, "campaign": "st"})
    config["algorithms"] = {"me": config["algorithms"]["me"]}
    write_config(tmp_path, config)
    process = subprocess.Popen(
        snakemake_command(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    folder = tmp_path / "results" / "st"
    seen_running = ""
    deadline = time.time() + 300
    while process.poll() is None and time.time() < deadline:
        text = status(folder) if folder.exists() else ""
        if "running" in text and "/12" in text and " 0/12" not in text:
            seen_running = text
            break
        time.sleep(0.3)
    assert process.wait(timeout=600) == 0
    assert seen_running, "status never showed the run in progress"
    assert "me/sphere/seed0" in seen_running and "QD score of me/sphere/seed0" in seen_running
    final = status(folder)
    assert "12/12" in final and "finished" in final
    assert "generations 0 .. 12" in final
    assert "*" in final.split("QD score of me/sphere/seed0", 1)[1]

    # Without a folder: the campaign of --configfile, or of config/config.yaml.
    assert status("--configfile", "config.yaml", cwd=tmp_path) == final
    (tmp_path / "config").mkdir()
    (tmp_path / "config.yaml").rename(tmp_path / "config" / "config.yaml")
    assert status(cwd=tmp_path) == final
    # A results folder: every campaign in it.
    every = status("results", "--no-plots", cwd=tmp_path)
    assert every.startswith(f"== campaign st ({Path('results') / 'st'})")
    assert "me/sphere/seed0" in every and "12/12" in every
    empty = tmp_path / "empty"
    empty.mkdir()
    assert status(empty).strip() == f"no runs under {empty} yet"
