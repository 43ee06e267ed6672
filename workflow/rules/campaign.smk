# The generation loop of every run: initialise, evaluate shards, tell, keep.


localrules:
    initialise,
    keep_checkpoint,
    finalise,
    runs,


rule initialise:
    output:
        RUN.checkpoint(0),
    log:
        RUN.logs / "initialise.log",
    conda:
        CONDA_ENV
    params:
        spec=spec_json,
    shell:
        "python -m evocamp init --spec {params.spec:q} --output {output} 2> {log}"


if config["mode"] == "shards":

    # The tell of a generation runs where Snakemake runs (evaluations are the jobs).
    localrules:
        tell,

    rule evaluate:
        input:
            state=previous_state,
        output:
            # Not temp(): a tell rebuilding a state replays its window's shards
            # (evocamp.loop.state_cache); `keep` and `finalise` remove them.
            RUN.shard("{gen}", "{shard}"),
        log:
            RUN.generation_logs("{gen}") / "evaluate_{shard}.log",
        group:
            SHARD_GROUP
        conda:
            CONDA_ENV
        threads: shard_threads
        resources:
            mem_mb=shard_mem_mb,
            runtime=shard_runtime,
            gpu=shard_gpus,
        params:
            shards=SHARDS,
        shell:
            "python -m evocamp evaluate --state {input.state} --shard {wildcards.shard} "
            "--shards {params.shards} --output {output} 2> {log}"

    rule tell:
        input:
            state=previous_state,
            shards=shard_files,
        output:
            # Light between kept generations (evocamp.loop.state_cache); not temp() for the
            # same reason as the shards.
            RUN.work_state("{gen}"),
        log:
            RUN.generation_logs("{gen}") / "tell.log",
        conda:
            CONDA_ENV
        shell:
            "python -m evocamp tell --state {input.state} --shard-files {input.shards} "
            "--output {output} 2> {log}"

else:

    rule segment:
        input:
            state=segment_start,
        output:
            temp(str(RUN.work_state("{gen}"))),
        log:
            RUN.generation_logs("{gen}") / "segment.log",
        conda:
            CONDA_ENV
        threads: dask_threads
        resources:
            gpu=dask_gpus,
        params:
            shards=SHARDS,
            workers=config["dask"]["workers"],
            scheduler_file=config["dask"]["scheduler_file"] or "",
            completions=completion_log_option,
        shell:
            "python -m evocamp segment --state {input.state} --until {wildcards.gen} "
            "--shards {params.shards} --workers {params.workers} "
            "--scheduler-file={params.scheduler_file:q} {params.completions} "
            "--output {output} 2> {log}"


checkpoint keep_checkpoint:
    input:
        RUN.work_state("{gen}"),
    output:
        RUN.metrics_window("{gen}"),
    log:
        RUN.keep_log("{gen}"),
    conda:
        CONDA_ENV
    params:
        checkpoint=str(RUN.checkpoint("{gen}")),
        logs=str(RUN.logs),
    shell:
        "python -m evocamp keep --state {input} --checkpoint {params.checkpoint} "
        "--metrics-window {output} --logs {params.logs} 2> {log}"


if REEVALUATE:

    # The final re-evaluation of a run's elites: `shards` jobs, combined where
    # Snakemake runs (it only reads them and the archive).
    localrules:
        reevaluate,

    rule reevaluate_shard:
        input:
            final_state,
        output:
            temp(str(RUN.reevaluation_shard(GENERATIONS, "{shard}"))),
        log:
            RUN.logs / "reevaluate_{shard}.log",
        conda:
            CONDA_ENV
        threads: 1
        resources:
            mem_mb=shard_mem_mb,
            runtime=60,
        params:
            repeats=REEVALUATE,
            shards=SHARDS,
        shell:
            "python -m evocamp reevaluate-shard --state {input} --shard {wildcards.shard} "
            "--shards {params.shards} --output {output} --repeats {params.repeats} 2> {log}"

    rule reevaluate:
        input:
            state=final_state,
            shards=reevaluation_shard_files,
        output:
            RUN.reevaluation(GENERATIONS),
        log:
            RUN.logs / "reevaluate.log",
        conda:
            CONDA_ENV
        params:
            repeats=REEVALUATE,
        shell:
            "python -m evocamp reevaluate --state {input.state} --shard-files {input.shards} "
            "--output {output} --repeats {params.repeats} 2> {log}"


rule finalise:
    input:
        state=final_state,
        reevaluation=reevaluation_file,
    output:
        archive=RUN.archive,
        metrics=RUN.metrics,
        # Named after the last generation: a raised `generations` makes it missing,
        # which is what makes Snakemake plan the new generations (a changed input
        # behind a pending checkpoint alone does not).
        finished=RUN.summary(GENERATIONS),
    log:
        RUN.logs / "finalise.log",
    conda:
        CONDA_ENV
    params:
        checkpoint=final_checkpoint,
        metrics_windows=str(RUN.metrics_windows),
        work=str(RUN.work),
        logs=str(RUN.logs),
        reevaluation=reevaluation_path,
    shell:
        "python -m evocamp finalise --state {input.state} --checkpoint {params.checkpoint} "
        "--metrics-windows {params.metrics_windows} --metrics {output.metrics} "
        "--archive {output.archive} --summary {output.finished} "
        "--work {params.work} --logs {params.logs} "
        "--reevaluation={params.reevaluation:q} 2> {log}"


rule runs:
    input:
        run_targets,
