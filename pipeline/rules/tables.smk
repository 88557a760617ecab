# From raw shards to the checked-in table: rank -> select -> codegen, plus metrics and plots, and
# the cross-family dispatch list selected from the tables' ranked results and manifests.
# Checked-in files (manifests, generated tables) are written in place by the CLI; the rules'
# outputs are stamps under results/stamps/ (see pipeline/workflow/stamps.py for why). Settings
# fingerprints ride in the command templates (fingerprints.settings_tag), or in a `params:` value where they
# differ per job (a table's metrics) or must be bound in a loop.


localrules:
    rank,
    select,
    metrics,
    codegen,
    measure_all,
    rank_all,
    select_all,


rule rank:
    input:
        lambda wc: targets.shard_inputs(PLAN, table=wc.table, existing=before_update),
    output:
        parquet="results/ranked/{table}.parquet",
        csv=report(
            "results/ranked/{table}.csv",
            caption="../report/ranked.rst",
            category="Ranked configurations",
            labels={"table": "{table}", "file": "ranked"},
        ),
        md="results/ranked/{table}.md",
        failures=report(
            "results/ranked/{table}.failures.csv",
            caption="../report/failures.rst",
            category="Ranked configurations",
            labels={"table": "{table}", "file": "failures"},
        ),
    log:
        "results/logs/rank/{table}.log",
    shell:
        "{CLI} rank --table {wildcards.table} --out {output.parquet} {input} > {log} 2>&1" + SHOW_ERRORS


rule select:
    input:
        "results/ranked/{table}.parquet",
    output:
        "results/stamps/select/{table}.sha256",
    log:
        "results/logs/select/{table}.log",
    shell:
        "( {CLI} select --table {wildcards.table} --ranked {input} --out manifests/{wildcards.table}.yaml"
        " && sha256sum manifests/{wildcards.table}.yaml > {output} ) > {log} 2>&1" + SHOW_ERRORS
        + fingerprints.settings_tag(fingerprints.select_settings(config))


# The metrics JSON, plot CSV and PNG are checked in, so they are written in place (atomically, by
# the CLI) and the stamp records their sha256; a stamp whose files are missing or changed is dropped
# when the Snakefile is parsed (housekeeping.drop_stale_stamps), so the rule runs again. The report shows a copy.
rule metrics:
    input:
        stamp="results/stamps/select/{table}.sha256",
        ranked="results/ranked/{table}.parquet",
        # one shard: its folder names the content key the metrics record (the ranked parquet holds the rest)
        shards=lambda wc: targets.key_shard_inputs(PLAN, tables=[wc.table], existing=before_update),
    output:
        stamp=str(stamps.metrics_stamp("{table}")),
        plot=report(
            str(stamps.report_plot("{table}")),
            caption="../report/plot.rst",
            category="Tuned table vs cuBLAS",
            labels={"table": "{table}"},
        ),
    log:
        "results/logs/metrics/{table}.log",
    params:
        # The table's own settings (Snakemake's params trigger, per job): a shape added to one table re-makes that
        # table's metrics, not every table's, as one tag in the command (the code trigger, per rule) did.
        tag=lambda wc: fingerprints.settings_tag(fingerprints.metrics_settings(config, tables=[wc.table])),
    shell:
        "( {CLI} metrics --table {wildcards.table} --manifest manifests/{wildcards.table}.yaml"
        " --ranked {input.ranked} --json results/metrics/{wildcards.table}.json"
        " --csv results/plots/{wildcards.table}.csv --png results/plots/{wildcards.table}.png {input.shards}"
        " && sha256sum results/metrics/{wildcards.table}.json results/plots/{wildcards.table}.csv"
        " results/plots/{wildcards.table}.png > {output.stamp}"
        " && cp results/plots/{wildcards.table}.png {output.plot} ) > {log} 2>&1" + SHOW_ERRORS + "{params.tag}"


# A dispatch list: per shape, the table whose selected winner beats its own shard's cuBLAS by the
# most. Only when every table it names is part of this run (else the banner says it is skipped).
for _dispatch in PLAN.dispatches:

    rule:
        name:
            f"select_{_dispatch.name}"
        localrule: True
        input:
            targets.dispatch_inputs(_dispatch),
        output:
            str(stamps.select_stamp(_dispatch.name)),
        log:
            f"results/logs/select/{_dispatch.name}.log",
        params:
            # Bound now: the shell command is formatted when the job runs, after this loop ended.
            name=_dispatch.name,
            ranked=dispatch_ranked_options(_dispatch),
            tag=fingerprints.settings_tag(fingerprints.dispatch_settings(config, name=_dispatch.name)),
        shell:
            "( {CLI} select --dispatch {params.name} {params.ranked} --out manifests/{params.name}.yaml"
            " && sha256sum manifests/{params.name}.yaml > {output} ) > {log} 2>&1" + SHOW_ERRORS + "{params.tag}"

    # The dispatch list's metrics and plot, like a table's: per shape, the table its entry names and
    # that table's time and same-shard cuBLAS (what the runtime gets; the README's headline figure).
    rule:
        name:
            f"metrics_{_dispatch.name}"
        localrule: True
        input:
            stamp=str(stamps.select_stamp(_dispatch.name)),
            ranked=[stamps.ranked_outputs(table)["parquet"] for table in _dispatch.tables],
            shards=targets.key_shard_inputs(PLAN, tables=_dispatch.tables, existing=before_update),  # one per table
        output:
            # checked-in files written in place; the stamp stands for them (as for a table's metrics)
            stamp=str(stamps.metrics_stamp(_dispatch.name)),
            plot=report(
                str(stamps.report_plot(_dispatch.name)),
                caption="../report/dispatch_plot.rst",
                category="Tuned table vs cuBLAS",
                labels={"table": _dispatch.name},
            ),
        log:
            f"results/logs/metrics/{_dispatch.name}.log",
        params:
            # Bound now: the shell command is formatted when the job runs, after this loop ended.
            name=_dispatch.name,
            ranked=dispatch_ranked_options(_dispatch),
            files=" ".join(stamps.metrics_outputs(_dispatch.name).values()),
            json=stamps.metrics_outputs(_dispatch.name)["json"],
            csv=stamps.metrics_outputs(_dispatch.name)["csv"],
            png=stamps.metrics_outputs(_dispatch.name)["png"],
        shell:
            "( {CLI} metrics --dispatch {params.name} {params.ranked} --json {params.json} --csv {params.csv}"
            " --png {params.png} {input.shards} && sha256sum {params.files} > {output.stamp}"
            " && cp {params.png} {output.plot} ) > {log} 2>&1" + SHOW_ERRORS
            + fingerprints.settings_tag(fingerprints.metrics_settings(config, tables=_dispatch.tables))


# A shape selector: the choice for shapes no table holds, fitted on its tables' recordings (not
# from this run's shards: a live run's measurements reach it once recorded with `tunetable record`)
# and on its device's coverage recordings where present (inputs: its coverage CSV and the recordings
# found at parse time, so a newly committed one reruns it; docs/selector_data.md).
# It writes the fit into its data file (selector.<name>.data, package data) and its short manifest
# in place; the stamp records both (codegen then checks the one against the other).
for _selector in PLAN.selectors:

    rule:
        name:
            f"select_{_selector.name}"
        localrule: True
        input:
            targets.selector_inputs(_selector, params=config),
        output:
            str(stamps.select_stamp(_selector.name)),
        log:
            f"results/logs/select/{_selector.name}.log",
        params:
            # Bound now: the shell command is formatted when the job runs, after this loop ended.
            name=_selector.name,
            data=_selector.data,
            tag=fingerprints.settings_tag(fingerprints.selector_settings(config, name=_selector.name)),
        shell:
            "{CLI} select --selector {params.name} --out manifests/{params.name}.yaml > {log} 2>&1"
            " && sha256sum manifests/{params.name}.yaml {params.data} > {output}{params.tag}"


# Writes every table's marker region in place, then re-checks them all; the stamp records the
# check. The generated files are inputs too, so a hand edit inside a region re-runs codegen; so are
# the selectors' data files (a hand edit there fails the sha256 check loudly).
rule codegen:
    input:
        targets.codegen_inputs(PLAN, config),
    output:
        stamps.codegen_stamp(),
    log:
        "results/logs/codegen.log",
    shell:
        "( {CLI} codegen --all && {CLI} codegen --all --check"
        " && echo 'generated tables match their manifests' > {output} ) > {log} 2>&1" + SHOW_ERRORS
        + fingerprints.settings_tag(fingerprints.codegen_settings(config))


rule rank_all:
    input:
        [stamps.ranked_outputs(spec.name)["parquet"] for spec in PLAN.tables],


rule select_all:
    input:
        [stamps.ranked_outputs(spec.name)["parquet"] for spec in PLAN.tables],
        [stamps.select_stamp(spec.name) for spec in (*PLAN.tables, *PLAN.dispatches, *PLAN.selectors)],
        [str(stamps.metrics_stamp(spec.name)) for spec in (*PLAN.tables, *PLAN.dispatches)],
