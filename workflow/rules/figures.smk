# Figures and tables are rebuilt from results only; they never re-evaluate anything.
# Their code is an input, so a change to the plotting code reruns these rules only.


localrules:
    plot_run,
    compare,
    figures,


rule plot_run:
    input:
        archive=in_run("archive.h5"),
        metrics=in_run("metrics.csv"),
        code=FIGURE_CODE,
    output:
        report(
            in_run("figures/heatmap.png"),
            caption="../report/run_heatmap.rst",
            category="Runs",
            subcategory="{algorithm} on {domain}",
            labels={"figure": "heatmap", "seed": "{seed}"},
        ),
        in_run("figures/heatmap.pdf"),
        report(
            in_run("figures/curves.png"),
            caption="../report/run_curves.rst",
            category="Runs",
            subcategory="{algorithm} on {domain}",
            labels={"figure": "curves", "seed": "{seed}"},
        ),
        in_run("figures/curves.pdf"),
        report(
            in_run("figures/timing.png"),
            caption="../report/run_timing.rst",
            category="Runs",
            subcategory="{algorithm} on {domain}",
            labels={"figure": "timing", "seed": "{seed}"},
        ),
        in_run("figures/timing.pdf"),
    log:
        in_run_logs("plot_run.log"),
    conda:
        CONDA_ENV
    params:
        outdir=in_run("figures"),
        workers=WORKERS,
    shell:
        "python -m evocamp plot-run --archive {input.archive} --metrics {input.metrics} "
        "--outdir {params.outdir} --workers {params.workers} 2> {log}"


rule compare:
    input:
        metrics=all_run_files("metrics.csv"),
        archives=heatmap_archives(),
        code=FIGURE_CODE,
    output:
        curves=report(
            f"{RESULTS}/figures/curves.png",
            caption="../report/campaign_curves.rst",
            category="Campaign",
            labels={"figure": "metric curves"},
        ),
        curves_pdf=f"{RESULTS}/figures/curves.pdf",
        heatmaps=report(
            f"{RESULTS}/figures/heatmaps.png",
            caption="../report/campaign_heatmaps.rst",
            category="Campaign",
            labels={"figure": "final archives"},
        ),
        heatmaps_pdf=f"{RESULTS}/figures/heatmaps.pdf",
        table_csv=report(
            f"{RESULTS}/tables/final_metrics.csv",
            caption="../report/campaign_table.rst",
            category="Campaign",
            labels={"figure": "final metrics table"},
        ),
        table_md=f"{RESULTS}/tables/final_metrics.md",
        table_tex=f"{RESULTS}/tables/final_metrics.tex",
        tests_csv=report(
            f"{RESULTS}/tables/tests.csv",
            caption="../report/campaign_tests.rst",
            category="Campaign",
            labels={"figure": "significance tests"},
        ),
        tests_md=f"{RESULTS}/tables/tests.md",
        seeds=report(
            f"{RESULTS}/figures/seeds.png",
            caption="../report/campaign_seeds.rst",
            category="Campaign",
            labels={"figure": "final values per seed"},
        ),
        seeds_pdf=f"{RESULTS}/figures/seeds.pdf",
        aggregate=report(
            f"{RESULTS}/figures/aggregate.png",
            caption="../report/campaign_aggregate.rst",
            category="Campaign",
            labels={"figure": "aggregates across domains"},
        ),
        aggregate_pdf=f"{RESULTS}/figures/aggregate.pdf",
        aggregate_csv=report(
            f"{RESULTS}/tables/aggregate.csv",
            caption="../report/campaign_aggregate_table.rst",
            category="Campaign",
            labels={"figure": "aggregates table"},
        ),
        aggregate_md=f"{RESULTS}/tables/aggregate.md",
        ecdf=report(
            f"{RESULTS}/figures/ecdf.png",
            caption="../report/campaign_ecdf.rst",
            category="Campaign",
            labels={"figure": "runtime to target"},
        ),
        ecdf_pdf=f"{RESULTS}/figures/ecdf.pdf",
        ert_csv=report(
            f"{RESULTS}/tables/ert.csv",
            caption="../report/campaign_ert.rst",
            category="Campaign",
            labels={"figure": "expected running time table"},
        ),
        ert_md=f"{RESULTS}/tables/ert.md",
    log:
        f"{RESULTS}/logs/compare.log",
    conda:
        CONDA_ENV
    params:
        figures=folder_of_curves,
        tables=folder_of_tables,
        bootstrap=config["figures"]["bootstrap_samples"],
        seed=config["master_seed"],
        statistics=statistics_settings(),
    shell:
        "python -m evocamp compare --metrics {input.metrics} --archives {input.archives} "
        "--figures {params.figures} --tables {params.tables} "
        "--bootstrap {params.bootstrap} --seed {params.seed} "
        "--statistics {params.statistics:q} 2> {log}"


rule figures:
    input:
        figure_targets(),
