# Measurement: grid -> compile (CPU, all cores) -> bench (one job per table x shape, one GPU each).
# Raw shards live under results/raw/<table>/<content key>/: the key hashes the bench settings,
# grid, kernel source, toolchain, backend and device, so a changed input gets new paths and an
# old result is never mistaken for a new one (and reverting a change finds the old ones again).


rule grid:
    output:
        "results/grid/{table}.json",
    params:
        fingerprint=lambda wc: tt.grid_fingerprint(config, wc.table),
    log:
        "results/logs/grid/{table}.log",
    shell:
        "{tt.CLI} grid --table {wildcards.table} --out {output} > {log} 2>&1"


rule compile:
    input:
        "results/grid/{table}.json",
    output:
        "results/compile/{table}.json",
    params:
        fingerprint=lambda wc: tt.compile_fingerprint(config, wc.table),
    threads: workflow.cores
    resources:
        mem_mb=8000,
    log:
        "results/logs/compile/{table}.log",
    shell:
        "{tt.CLI} compile --table {wildcards.table} --workers {threads} --out {output} > {log} 2>&1"


# Inputs are ancient(): the content key in the output path already covers their content, and a
# re-created compile report (fresh clone, warm cubin cache) must not re-run measured shards.
if PLAN.backend == "cuda":

    # Live: one job per (table, shape) shard, one GPU each (a free one is claimed by the job).
    rule bench:
        input:
            lambda wc: [ancient(path) for path in tt.bench_inputs(PLAN, wc.table)],
        output:
            "results/raw/{table}/{key}/M{M}_N{N}_K{K}.pkl",
        params:
            claim=tt.gpu_claim_prefix(PLAN),
        resources:
            gpu=1,
            runtime=20,
        log:
            "results/logs/bench/{table}/{key}/M{M}_N{N}_K{K}.log",
        shell:
            "{params.claim}{tt.CLI} bench --table {wildcards.table} --shape {wildcards.M},{wildcards.N},{wildcards.K}"
            " --backend cuda --results-root results > {log} 2>&1"

else:
    # Replay: serving a shard costs far less than starting a process, so one job per table
    # serves exactly the shards that are missing (none: no job). Never compiles, uses no GPU.
    for _table, _missing in tt.missing_shards(PLAN).items():

        rule:
            name:
                f"replay_{_table}"
            input:
                [ancient(path) for path in tt.bench_inputs(PLAN, _table)],
            output:
                [shard for shard, _ in _missing],
            params:
                table=_table,
                shapes=tt.shape_options(_missing),
            log:
                f"results/logs/bench/{_table}/{PLAN.keys[_table]}/replay.log",
            shell:
                "{tt.CLI} bench --table {params.table} {params.shapes} --backend replay --results-root results"
                " > {log} 2>&1"


rule measure_all:
    input:
        tt.all_shards(PLAN),
