# Figures are rebuilt from results only; they never re-evaluate anything.


localrules:
    plot_run,


rule plot_run:
    input:
        archive=in_run("archive.h5"),
        metrics=in_run("metrics.csv"),
    output:
        multiext(in_run("figures/heatmap"), ".pdf", ".png"),
        multiext(in_run("figures/curves"), ".pdf", ".png"),
    log:
        in_run_logs("plot_run.log"),
    conda:
        CONDA_ENV
    params:
        outdir=in_run("figures"),
    shell:
        "python -m evocamp plot-run --archive {input.archive} --metrics {input.metrics} "
        "--outdir {params.outdir} 2> {log}"
