# tunetable: params.yaml -> grid -> compile -> bench -> rank -> select -> codegen (+ metrics, plots).
# Thin on purpose: rules live in pipeline/rules/*.smk and call the `tunetable` CLI; the
# parse-time plan (backend, content keys, target lists) comes from pipeline/smk_helpers.py.
# Run: `snakemake --cores 2` (profiles/default is picked up: one GPU job at a time).

import sys

from snakemake.utils import validate

from tunetable import smk_helpers as tt
from tunetable.errors import TuneTableError

try:
    tt.check_params_file("params.yaml")  # one clear line for a malformed or invalid params.yaml
except TuneTableError as exc:
    sys.exit(f"error: {exc}")


configfile: "params.yaml"


validate(config, str(tt.SCHEMA_PATH))

try:
    PLAN = tt.make_plan(config)
except TuneTableError as exc:
    sys.exit(f"error: {exc}")

wildcard_constraints:
    **tt.wildcard_constraints(PLAN),


report: "pipeline/report/workflow.rst"


include: "pipeline/rules/measure.smk"
include: "pipeline/rules/tables.smk"


# No shard list here (rank needs every shard already, and each listing costs Snakemake a producer
# search per missing shard: tens of thousands after a kernel change); the park stamp, as measure_all.
rule all:
    default_target: True
    input:
        tt.park_inputs(PLAN),
        rules.rank_all.input,
        rules.select_all.input,
        tt.codegen_stamp(),


onstart:
    print(tt.banner(PLAN), file=sys.stderr)


onsuccess:
    print(tt.banner(PLAN), file=sys.stderr)
    if DVC_LINE := tt.dvc_cache_line(tt.cache_reproduced_outs()):
        print(DVC_LINE, file=sys.stderr)
