# tunetable: params.yaml -> grid -> compile -> bench -> rank -> select -> codegen (+ metrics, plots).
# Thin on purpose: rules live in pipeline/rules/*.smk and call the `tunetable` CLI; the
# parse-time plan (backend, content keys, target lists) comes from pipeline/workflow/ (tunetable.workflow).
# Run: `snakemake --cores 2` (profiles/default is picked up: one GPU job at a time).

import sys

from snakemake.utils import validate

from tunetable import rawstore
from tunetable.dvc_cache import cache_reproduced_outs
from tunetable.errors import TuneTableError
from tunetable.params import SCHEMA_PATH
from tunetable.workflow import batches, fingerprints, housekeeping, messages, run_plan, stamps, targets
from tunetable.workflow.rule_shell import CLI, GPU_CLAIM, RAWSTORE, SHOW_ERRORS, dispatch_ranked_options, shape_options

try:
    PARAMS = run_plan.check_params_file("params.yaml")  # one clear line for a malformed or invalid params.yaml
except TuneTableError as exc:
    sys.exit(f"error: {exc}")

# Not `configfile:` (Snakemake would parse params.yaml again, with YTE on yaml.FullLoader): the
# project's YAML loader read it above; --config values still win, as they do over a configfile.
run_plan.merge_config(config, PARAMS, overrides=workflow.config_settings.overwrite_config)

validate(config, str(SCHEMA_PATH))

# The other devices' tables (`gemm_mma.h100`: docs/devices.md), declared after the schema check (their
# names hold a dot, which params.yaml's may not): those with a recording or a manifest, and on a GPU host
# every table of the device it is. Without other devices' recordings, config is params.yaml's as it is.
try:
    run_plan.add_device_tables(config)
except TuneTableError as exc:
    sys.exit(f"error: {exc}")

try:
    PLAN = run_plan.make_plan(config)
    # Shards a replayed run cannot serve (not in the recording, no GPU here): one line before any work,
    # here (a dry run warns and shows the plan) and again in onstart, which stops a real run; with
    # TUNETABLE_ALLOW_MISSING=1 the run goes without them. Only the main process checks (jobs re-parse).
    NEEDS_GPU = run_plan.unrecorded_shards(PLAN, config) if workflow.is_main_process else []
    if NEEDS_GPU and run_plan.allow_missing():
        PLAN, NEEDS_GPU = run_plan.leave_out(PLAN, NEEDS_GPU), []
        print(messages.left_out_line(PLAN), file=sys.stderr)
    if NEEDS_GPU:
        print(messages.needs_gpu_line(NEEDS_GPU, PLAN), file=sys.stderr)
except TuneTableError as exc:
    sys.exit(f"error: {exc}")

# After a killed run (SIGKILL included): its stale Snakemake locks go (when no other run holds this
# copy), incomplete outputs re-run (profiles/default: rerun-incomplete), and a metrics stamp whose
# checked-in files are missing or changed is dropped so that they are made again. Only the main
# snakemake process does this (a cluster job re-parses this file on its node).
if workflow.is_main_process:
    for _lock in housekeeping.release_stale_locks():
        print(f"tunetable: removed {_lock}, left by a run that was killed (no other run holds this copy)",
              file=sys.stderr)
    housekeeping.drop_stale_stamps(PLAN)

wildcard_constraints:
    **targets.wildcard_constraints(PLAN),


report: "pipeline/report/workflow.rst"


include: "pipeline/rules/measure.smk"
include: "pipeline/rules/tables.smk"


# No shard list here (rank needs every shard already, and each listing costs Snakemake a producer
# search per missing shard: tens of thousands after a kernel change); the park stamp, as measure_all.
rule all:
    default_target: True
    input:
        targets.park_inputs(PLAN),
        targets.replay_targets(PLAN),
        rules.rank_all.input,
        rules.select_all.input,
        stamps.codegen_stamp(),


onstart:
    print(messages.banner(PLAN), file=sys.stderr)
    # A live run that would measure here without a GPU stops before compiling (a cluster profile's
    # jobs run elsewhere: workflow.local_exec is known only now, not at parse time).
    STOP_FOR = NEEDS_GPU or (run_plan.live_without_gpu(PLAN) if workflow.local_exec else [])
    if STOP_FOR:
        sys.exit(messages.needs_gpu_line(STOP_FOR, PLAN))


onsuccess:
    print(messages.banner(PLAN), file=sys.stderr)
    print(messages.closing_summary(PLAN, config), file=sys.stderr)
    if DVC_LINE := messages.dvc_cache_line(cache_reproduced_outs()):
        print(DVC_LINE, file=sys.stderr)
