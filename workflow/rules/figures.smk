# Figures and tables are rebuilt from results only; they never re-evaluate anything.
# Their code is an input, so a change to the plotting code reruns these rules only.


localrules:
    plot_run,
    compare,
    figures,


rule plot_run:
    input:
        archive=RUN.archive,
        metrics=RUN.metrics,
        code=FIGURE_CODE,
    output:
        **run_figure_outputs(),
    log:
        RUN.logs / "plot_run.log",
    conda:
        CONDA_ENV
    params:
        outdir=str(RUN.figures),
        workers=WORKERS,
    shell:
        "python -m evocamp plot-run --archive {input.archive} --metrics {input.metrics} "
        "--outdir {params.outdir} --workers {params.workers} 2> {log}"


rule compare:
    input:
        metrics=all_run_files("metrics"),
        archives=heatmap_archives(),
        code=FIGURE_CODE,
    output:
        **campaign_outputs(),
    log:
        CAMPAIGN.logs / "compare.log",
    conda:
        CONDA_ENV
    params:
        figures=folder_of_figures,
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
