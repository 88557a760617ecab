# Measurement: grid + compile (CPU, all cores) -> bench (GPU), or replay of the recording.
#
# Which tables a run covers is decided at parse time (pipeline/workflow/run_plan.py make_plan): with a
# GPU, every declared table; without one, every table whose recording (tables.<name>.recording)
# is present. A table left out is named loudly in the banner at the start and end of the run.
#
# Raw shards live at results/raw/<table>/<content key>/M.._N.._K...pkl. The key hashes the bench
# settings, the grid, the kernel source, the toolchain, the backend and the device, so a changed
# input gets new paths and an old result is never mistaken for a new one; reverting a change
# finds the old shards again. A shard on disk is therefore final: only MISSING shards get a
# producing rule (decided at parse time). Existing shards are `before_update` inputs of rank,
# metrics and measure_all (Snakemake searches no producer for them), so nothing upstream (a
# re-created compile report on a fresh clone, a forced rule) can ever re-measure them.
# To re-measure a shard on purpose, delete it.
#
# Only the rules that exist while shards are missing (bench, replay) have a `params:` block:
# Snakemake's params trigger imports pandas (~1.2 s on every run, a no-op included). Settings that
# matter are in the content key, i.e. in the paths.

if PLAN.backend == "cuda":

    # The grid file and compile report that the bench CLI reads, for one content key. The stamp is
    # keyed, so a settings change that changes the key recompiles (cubin cache: only new configs).
    rule compile:
        output:
            "results/stamps/compile/{table}/{key}.ok",
        threads: workflow.cores
        resources:
            mem_mb=8000,
        log:
            "results/logs/compile/{table}/{key}.log",
        shell:
            "( {CLI} grid --table {wildcards.table}"
            " && {CLI} compile --table {wildcards.table} --workers {threads} && touch {output} ) > {log} 2>&1"
            + SHOW_ERRORS

    # Live: each job measures the missing shards of one window of a table (at most batches.LIVE_CHUNK
    # shards, at least batches.LIVE_SPREAD windows per table; batches.live_batches) in one process on
    # one GPU; on a multi-GPU host the job claims a free device itself (Snakemake assigns no device
    # ids). Only missing shards are outputs: existing ones are before_update inputs. The journals are not outputs: they hold every measurement
    # as it is taken (resume state), and Snakemake deletes a failed job's outputs. So when the bench
    # command fails, the shards it finished are parked with their journals first (rawstore salvage):
    # Snakemake finds none of them to delete, and the next run restores them by a rename and measures
    # only the others. A profile's `set-resources: bench:` applies to every bench job (runtime per shard).
    for _job in batches.live_batches(PLAN):

        rule:
            name:
                _job.name
            input:
                stamps.compile_stamp(table=_job.table, key=PLAN.keys[_job.table]),
                targets.park_inputs(PLAN),
            output:
                [shard.path for shard in _job.shards],
            resources:
                **batches.bench_resources(shards=len(_job.shards)),
            log:
                _job.log,
            params:
                # Bound now: the shell command is formatted when the job runs, after this loop ended.
                table=_job.table,
                shapes=shape_options(list(_job.shards)),
            shell:
                "( {GPU_CLAIM}{CLI} bench --table {params.table} {params.shapes} --backend cuda"
                " --results-root results || {{ status=$?; {RAWSTORE} salvage {output}; exit $status; }} )"
                " > {log} 2>&1" + SHOW_ERRORS

        batches.apply_bench_profile(workflow.get_rule(_job.name).resources,
                                    workflow.resource_settings.overwrite_resources, shards=len(_job.shards))

else:

    # Replay: serving a shard costs far less than starting a process, so one job per table serves
    # its missing shards, in windows of batches.REPLAY_CHUNK shards (a larger table gets a job per
    # window missing any: Snakemake matches a requested file against every output of its rule; the windows
    # run over all of the table's shards, so a job keeps its name when others finish). Never
    # compiles, uses no GPU.
    for _job in batches.replay_batches(PLAN):

        rule:
            name:
                _job.name
            input:
                targets.replay_inputs(PLAN, table=_job.table),
                targets.park_inputs(PLAN),
            output:
                # The journals too: each holds its shard's checksum, and a shard without one is served again.
                # Shards first: Snakemake finds a requested file by matching it against the outputs in order
                # (a regex compiled for each it passes), and the shards are what rank asks for.
                [*(shard.path for shard in _job.shards), *(shard.journal for shard in _job.shards)],
            log:
                _job.log,
            # On a cluster, profiles/slurm submits several replay jobs as one (group-components);
            # Snakemake ignores groups when it runs jobs itself.
            group:
                "replay_shards"
            params:
                # Bound now: the shell command is formatted when the job runs, after this loop ended.
                table=_job.table,
                shapes=shape_options(list(_job.shards)),
            shell:
                "{CLI} bench --table {params.table} {params.shapes} --backend replay"
                " --results-root results > {log} 2>&1" + SHOW_ERRORS


# results/raw is a DVC out: it must hold this plan's shards only, so that dvc.lock records what the
# committed params and code produce (what a fresh clone reproduces). Shards of other keys are final
# measurements: they move to results/parked/ and come back by a rename when a plan needs them again.
if run_plan.stale_raw(PLAN):

    rule park_raw:
        localrule: True
        output:
            temp(stamps.park_stamp()),
        log:
            "results/logs/park.log",
        params:
            entries=" ".join(run_plan.stale_raw(PLAN)),
        shell:
            "( {RAWSTORE} park {params.entries} && touch {output} ) > {log} 2>&1" + SHOW_ERRORS


# Every rule that writes into results/raw (restore, bench, replay) waits for park_raw: parking prunes the folders
# it empties up to results/raw, which would race a job creating its key folder beside them.
# At most batches.REPLAY_CHUNK shards per rule (Snakemake matches a requested file against every output).
# Renames on the submit host (local): a cluster job re-parses the Snakefile, and the parked set it
# would see changes as these rules run.
for _name, _parked in batches.restore_jobs(PLAN):

    rule:
        name:
            _name
        localrule: True
        input:
            [str(rawstore.parked_path(shard.path)) for shard in _parked],
            targets.park_inputs(PLAN),
        output:
            [shard.path for shard in _parked],
        log:
            f"results/logs/{_name}.log",
        shell:
            "{RAWSTORE} restore {output} > {log} 2>&1" + SHOW_ERRORS


rule measure_all:
    input:
        targets.measure_inputs(PLAN, existing=before_update),
        targets.park_inputs(PLAN),
