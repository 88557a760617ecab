"""What the Snakefile and its rules (pipeline/rules/*.smk) need at parse time, one concern per module.

- ``run_plan``: the plan of a run (``make_plan`` -> ``Plan``: tables, backend, content keys, shards
  and which are absent, parked or missing), params.yaml loading, the tables a run leaves out;
- ``batches``: the measuring rules (``ShardBatch``: a table's missing shards, a job each; replay
  and live chunk sizes, a bench rule's resources);
- ``targets``: what the rules ask for (shard inputs flagged ``before_update``, measure_all's,
  codegen's, dispatch and selector inputs, wildcard constraints);
- ``stamps``: where the rules' files live (stamps standing for checked-in files, ranked and
  metrics outputs, manifests);
- ``rule_shell``: the shell fragments the rules run (the CLI, the GPU claim, rawstore, errors);
- ``messages``: the banner, the line before work that needs a GPU, the closing summary;
- ``housekeeping``: after a killed run, stale Snakemake locks and stale metrics stamps;
- ``fingerprints``: the settings each rule depends on, as a shell comment for the code trigger.

Logic lives here, importable and tested; the Snakefile and the rules only call it.
"""
