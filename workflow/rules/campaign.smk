# The generation loop of every run: initialise, evaluate shards, tell, keep.


localrules:
    initialise,
    tell,
    keep_checkpoint,
    finalise,


rule initialise:
    output:
        RUN + "/checkpoints/gen_000000.h5",
    params:
        spec=spec_json,
    log:
        RUN_LOGS + "/initialise.log",
    shell:
        "evocamp init --spec {params.spec:q} --output {output} 2> {log}"


rule evaluate:
    input:
        state=previous_state,
    output:
        temp(RUN + "/work/gen_{gen}/shard_{shard}.h5"),
    params:
        shards=SHARDS,
    log:
        RUN_LOGS + "/gen_{gen}/evaluate_{shard}.log",
    threads: 1
    resources:
        mem_mb=shard_mem_mb,
        runtime=30,
    shell:
        "evocamp evaluate --state {input.state} --shard {wildcards.shard} "
        "--shards {params.shards} --output {output} 2> {log}"


rule tell:
    input:
        state=previous_state,
        shards=shard_files,
    output:
        temp(RUN + "/work/state_{gen}.h5"),
    log:
        RUN_LOGS + "/gen_{gen}/tell.log",
    shell:
        "evocamp tell --state {input.state} --shard-files {input.shards} "
        "--total {config[generations]} --output {output} 2> {log}"


checkpoint keep_checkpoint:
    input:
        RUN + "/work/state_{gen}.h5",
    output:
        RUN + "/metrics/segment_{gen}.csv",
    params:
        checkpoint=RUN + "/checkpoints/gen_{gen}.h5",
    log:
        RUN_LOGS + "/gen_{gen}/keep.log",
    shell:
        "evocamp keep --state {input} --checkpoint {params.checkpoint} "
        "--segment {output} 2> {log}"


rule finalise:
    input:
        final_state,
    output:
        archive=RUN + "/archive.h5",
        metrics=RUN + "/metrics.csv",
    params:
        checkpoint=final_checkpoint,
        segments=RUN + "/metrics",
    log:
        RUN_LOGS + "/finalise.log",
    shell:
        "evocamp finalise --state {input} --checkpoint {params.checkpoint} "
        "--segments {params.segments} --metrics {output.metrics} "
        "--archive {output.archive} 2> {log}"
