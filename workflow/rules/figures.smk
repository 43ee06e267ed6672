# Figures are rebuilt from results only; they never re-evaluate anything.


localrules:
    plot_run,


rule plot_run:
    input:
        archive=RUN + "/archive.h5",
        metrics=RUN + "/metrics.csv",
    output:
        multiext(RUN + "/figures/heatmap", ".pdf", ".png"),
        multiext(RUN + "/figures/curves", ".pdf", ".png"),
    params:
        outdir=RUN + "/figures",
    log:
        RUN_LOGS + "/plot_run.log",
    shell:
        "evocamp plot-run --archive {input.archive} --metrics {input.metrics} "
        "--outdir {params.outdir} 2> {log}"
