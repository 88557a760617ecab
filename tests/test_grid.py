"""tunetable.grid and ``tunetable grid``: kbench-style expansion, rules, overrides, filters, pruning."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tunetable.config import KernelConfig
from tunetable.errors import TuneTableError
from tunetable.grid import (
    DeviceLimits,
    configs_from_document,
    expand,
    grid_document,
    limit_violations,
    load_table_grid,
    parse_assignment,
    parse_assignments,
    registers_per_block,
)
from tunetable.params import CodegenSpec, TableSpec

CODEGEN = CodegenSpec(manifest="m.yaml", snippet="s", target="t.py", begin_marker="B", end_marker="E", source_label="l")


def spec(grid: dict, *, family: str = "toy") -> TableSpec:
    """A table spec around ``grid`` (shapes and codegen are irrelevant here)."""
    return TableSpec(
        name="toy", family=family, kernel="k.cu", dtype="bf16", arch="sm_90a", nk=((64, 64),), m_values=(1, 8),
        grid=grid, codegen=CODEGEN, search={"strategy": "exhaustive"},
    )


def labels(configs) -> list[str]:
    """Configurations as their readable labels, in order."""
    return [config.label() for config in configs]


def test_cartesian_product_inside_a_group_in_declaration_order() -> None:
    result = expand(spec({"groups": [{"A": [1, 2], "B": [10, 20, 30]}]}))
    assert labels(result.kept) == [
        "A=1/B=10", "A=1/B=20", "A=1/B=30", "A=2/B=10", "A=2/B=20", "A=2/B=30",
    ]
    assert (result.counts.expanded, result.counts.after_rules, result.counts.after_pruning) == (6, 6, 6)


def test_union_across_groups_removes_duplicates_keeping_first_seen_order() -> None:
    grid = {
        "groups": [
            {"name": "first", "A": [1, 2, 1], "B": [10]},
            {"name": "second", "A": [2, 3], "B": [10]},
        ]
    }
    result = expand(spec(grid))
    assert labels(result.kept) == ["A=1/B=10", "A=2/B=10", "A=3/B=10"]
    assert [result.group_of[config.id] for config in result.kept] == ["first", "first", "second"]


def test_scalars_and_nested_lists_flatten_like_kbench() -> None:
    result = expand(spec({"groups": [{"A": 4, "B": [[1, 2], 3]}]}))
    assert labels(result.kept) == ["A=4/B=1", "A=4/B=2", "A=4/B=3"]


def test_derived_values_are_computed_before_rules_and_become_defines() -> None:
    grid = {
        "groups": [{"WARPS_M": [1, 2, 4], "WARPS_N": [4, 8]}],
        "derived": {"THREADS": "WARPS_M * WARPS_N * 32", "WARPS": "THREADS // 32"},
        "rules": ["THREADS <= 256"],
    }
    result = expand(spec(grid))
    assert labels(result.kept) == ["WARPS_M=1/WARPS_N=4", "WARPS_M=1/WARPS_N=8", "WARPS_M=2/WARPS_N=4"]
    assert result.kept[2].defines() == {"WARPS_M": 2, "WARPS_N": 4, "THREADS": 256, "WARPS": 8}


def test_rules_prune_with_the_first_failing_rule_as_reason() -> None:
    grid = {
        "groups": [{"BLOCK_M": [16, 48, 64], "WARPS_M": [2]}],
        "rules": ["BLOCK_M >= 32", "BLOCK_M % (WARPS_M * 16) == 0"],
    }
    result = expand(spec(grid))
    assert labels(result.kept) == ["BLOCK_M=64/WARPS_M=2"]
    reasons = {item.config.label(): (item.stage, item.reason) for item in result.pruned}
    assert reasons == {
        "BLOCK_M=16/WARPS_M=2": ("rule", "rules[0] 'BLOCK_M >= 32' is false"),
        "BLOCK_M=48/WARPS_M=2": ("rule", "rules[1] 'BLOCK_M % (WARPS_M * 16) == 0' is false"),
    }
    assert (result.counts.expanded, result.counts.after_rules) == (3, 1)


def test_bad_rule_is_an_error_naming_file_and_rule_index() -> None:
    grid = {"groups": [{"BLOCK_M": [16]}], "rules": ["BLOCK_M > 1", "foo(BLOCK_M)"]}
    with pytest.raises(TuneTableError) as caught:
        expand(spec(grid), path="params.yaml")
    assert str(caught.value) == "params.yaml: tables.toy.grid.rules[1]: call not allowed in rule 'foo(BLOCK_M)'"


def test_rule_naming_an_unknown_parameter_is_an_error_not_true() -> None:
    # kbench counts a NameError as "true"; here a typo must be loud.
    grid = {"groups": [{"BLOCK_M": [16]}], "rules": ["BLOCK_MM > 1"]}
    with pytest.raises(TuneTableError, match=r"rules\[0\]: unknown name 'BLOCK_MM'"):
        expand(spec(grid), path="params.yaml")


def test_derived_may_not_shadow_a_parameter() -> None:
    grid = {"groups": [{"THREADS": [64]}], "derived": {"THREADS": "64"}}
    with pytest.raises(TuneTableError, match=r"derived\.THREADS: derived value 'THREADS' shadows"):
        expand(spec(grid), path="params.yaml")


def test_param_override_replaces_values_in_every_group_that_has_the_name() -> None:
    grid = {"groups": [{"A": [1], "B": [1, 2]}, {"A": [5], "C": [7]}]}
    result = expand(spec(grid), overrides={"B": [9], "A": [3]})
    assert labels(result.kept) == ["A=3/B=9", "A=3/C=7"]


def test_param_override_of_an_unknown_name_is_an_error() -> None:
    with pytest.raises(TuneTableError, match=r"--param: no group of table 'toy' has parameter 'Z' \(parameters: A\)"):
        expand(spec({"groups": [{"A": [1]}]}), overrides={"Z": [1]})


def test_filters_or_values_of_one_name_and_different_names() -> None:
    grid = {"groups": [{"A": [1, 2, 3], "B": [10, 20]}], "derived": {"S": "A + B"}}
    result = expand(spec(grid), filters={"A": [1, 3], "B": [20]})
    assert labels(result.kept) == ["A=1/B=20", "A=3/B=20"]
    assert result.counts.expanded == 6 and result.counts.after_filters == 2
    assert labels(expand(spec(grid), filters={"S": [22]}).kept) == ["A=2/B=20"]


def test_filter_on_unknown_name_is_an_error() -> None:
    with pytest.raises(TuneTableError, match="--filter: unknown parameter"):
        expand(spec({"groups": [{"A": [1]}]}), filters={"Q": [1]})


def test_device_limits_prune_after_rules_with_reason() -> None:
    grid = {"groups": [{"WARPS": [8, 32, 40]}], "derived": {"THREADS": "WARPS * 32"}, "rules": ["WARPS <= 32"]}
    result = expand(spec(grid), limits=DeviceLimits(max_threads_per_block=1024))
    assert labels(result.kept) == ["WARPS=8", "WARPS=32"]
    assert [(item.stage, item.reason) for item in result.pruned] == [("rule", "rules[0] 'WARPS <= 32' is false")]
    tight = expand(spec(grid), limits=DeviceLimits(max_threads_per_block=512))
    assert [(item.config.label(), item.stage, item.reason) for item in tight.pruned] == [
        ("WARPS=32", "limit", "1024 threads > 512 per block"),
        ("WARPS=40", "rule", "rules[0] 'WARPS <= 32' is false"),
    ]
    assert (tight.counts.after_rules, tight.counts.after_pruning) == (2, 1)


def test_register_allocation_rounds_per_warp_to_256() -> None:
    # 255 regs x 32 lanes = 8160 -> 8192 per warp; 16 warps -> 131072 > 65536.
    assert registers_per_block(registers=255, threads=512) == 131072
    assert registers_per_block(registers=128, threads=256) == 32768
    # 129 regs: 4128 per warp -> 4352 (17 units of 256).
    assert registers_per_block(registers=129, threads=64) == 2 * 4352
    assert limit_violations({"THREADS": 256}, limits=DeviceLimits(), registers=255) == []
    assert limit_violations({"THREADS": 512}, limits=DeviceLimits(), registers=255) == [
        "255 registers x 512 threads = 131072 > 65536 per block"
    ]
    assert limit_violations({}, limits=DeviceLimits(), smem_bytes=232449) == [
        "232449 B shared memory > 232448 B per block"
    ]


def test_gemm_family_rules_and_formula_prune_shared_memory_before_compile() -> None:
    # kernels/families/gemm_mma/family.py sizes the dynamic smem: 4 x (256 + 256) x 64 x 2 B = 262144 B.
    tunables = {"BLOCK_M": [128, 256], "BLOCK_N": [256], "BLOCK_K": [64], "WARPS_M": [2], "WARPS_N": [4],
                "WARPS_K": [1], "STAGES": [4], "SPLIT_K": [1], "GROUP_M": [8]}
    result = expand(spec({"groups": [tunables]}, family="gemm_mma"), limits=DeviceLimits())
    assert labels(result.kept) == [
        "BLOCK_M=128/BLOCK_N=256/BLOCK_K=64/WARPS_M=2/WARPS_N=4/WARPS_K=1/STAGES=4/SPLIT_K=1/GROUP_M=8"]
    # The family's own rule (it mirrors the kernel's static_assert) goes first ...
    assert [item.reason for item in result.pruned] == ["rules[2] 'BLOCK_M * BLOCK_N * WARPS_K <= 128 * THREADS and "
                                                       "BLOCK_M * BLOCK_N * WARPS_K <= 32768' is false"]
    # ... and a device with less shared memory prunes by the family's formula before any compile.
    small = expand(spec({"groups": [{**tunables, "BLOCK_M": [128]}]}, family="gemm_mma"),
                   limits=DeviceLimits(max_shared_bytes_per_block=100_000))
    assert [item.reason for item in small.pruned] == ["196608 B shared memory > 100000 B per block"]
    assert small.kept == ()


def test_a_family_table_names_exactly_the_family_tunables_as_integers() -> None:
    tunables = {"BLOCK_M": [128], "BLOCK_N": [256], "BLOCK_K": [64], "WARPS_M": [2], "WARPS_N": [4],
                "WARPS_K": [1], "STAGES": [4], "SPLIT_K": [1], "GROUP_M": [8]}
    partial = {name: values for name, values in tunables.items() if name != "WARPS_K"}
    with pytest.raises(TuneTableError, match=r"groups\[0\]: family gemm_mma's tunables are .* "
                                             r"\(missing: WARPS_K; unknown: LAYOUT\)"):
        expand(spec({"groups": [{**partial, "LAYOUT": [1]}]}, family="gemm_mma"))
    with pytest.raises(TuneTableError, match=r"groups\[0\]\.STAGES: STAGES must be integers, got 'four'"):
        expand(spec({"groups": [{**tunables, "STAGES": ["four"]}]}, family="gemm_mma"))
    # A table's own rules come after the family's, numbered on from them.
    narrowed = expand(spec({"groups": [{**tunables, "STAGES": [3, 4]}], "rules": ["STAGES == 3"]}, family="gemm_mma"))
    assert [item.reason for item in narrowed.pruned] == ["rules[8] 'STAGES == 3' is false"]


def test_parse_assignment_types_values_like_the_command_line() -> None:
    assert parse_assignment("STAGES=3,4", option="--param") == ("STAGES", [3, 4])
    assert parse_assignment("$FLAG:[true, False]", option="--param") == ("FLAG", [True, False])
    assert parse_assignment("LAYOUT=tn", option="--filter") == ("LAYOUT", ["tn"])
    assert parse_assignments(["A=1", "A=2,1", "B=0x10"], option="--filter") == {"A": [1, 2], "B": [16]}
    for bad in ("STAGES", "=3", "STAGES="):
        with pytest.raises(TuneTableError, match="--param: expected NAME=VALUE"):
            parse_assignment(bad, option="--param")


def test_grid_document_round_trips_and_checks_ids() -> None:
    result = expand(spec({"groups": [{"A": [1, 2]}], "derived": {"T": "A * 32"}}))
    document = json.loads(json.dumps(grid_document(result, kernel_hash="abc")))
    assert [entry["id"] for entry in document["configs"]] == [config.id for config in result.kept]
    assert configs_from_document(document, path="g.json") == list(result.kept)
    document["configs"][1]["params"]["A"] = 3
    with pytest.raises(TuneTableError, match=r"g\.json: configs\[1\]: id"):
        configs_from_document(document, path="g.json")


def test_config_ids_do_not_depend_on_group_or_order() -> None:
    one = expand(spec({"groups": [{"A": [1], "B": [2]}]})).kept[0]
    two = expand(spec({"groups": [{"name": "x", "B": [2], "A": [1]}]})).kept[0]
    assert one.id == two.id == KernelConfig(family="toy", params=(("A", 1), ("B", 2))).id


def test_default_table_expands_and_accounts_for_every_configuration(repo_root: Path) -> None:
    grid = load_table_grid(params_path=repo_root / "params.yaml", table="gemm_mma")
    counts = grid.result.counts
    assert counts.after_pruning == len(grid.result.kept) > 0
    assert counts.expanded == len(grid.result.kept) + len(grid.result.pruned)
    assert len({config.id for config in grid.result.kept}) == len(grid.result.kept)


# --- the command -------------------------------------------------------------------------

TOY_PARAMS = {
    "tables": {
        "toy": {
            "family": "toy",
            "kernel": "kernels/toy.cu",
            "dtype": "bf16",
            "shapes": {"NK": [[64, 64], [128, 64]], "M": [1, 16, 256]},
            "grid": {
                "groups": [{"name": "only", "BLOCK": [32, 64, 96, 128], "ITEMS": [1, 2]}],
                "rules": ["BLOCK % 64 == 0"],
                "derived": {"THREADS": "BLOCK"},
            },
            "codegen": {"manifest": "m.yaml", "snippet": "s", "target": "t.py", "begin_marker": "B", "end_marker": "E",
                        "source_label": "l"},
        }
    },
    "compile": {"limits": {"max_threads_per_block": 64}},
    "bench": {},
    "select": {},
}


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``python -m tunetable`` in ``cwd``."""
    return subprocess.run([sys.executable, "-m", "tunetable", *args], cwd=cwd, capture_output=True, text=True,
                          check=False)


def write_params(folder: Path, params: dict) -> Path:
    """Write a params.yaml into ``folder``."""
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def test_grid_command_writes_json_and_explains_pruning(tmp_path: Path) -> None:
    write_params(tmp_path, TOY_PARAMS)
    done = run_cli("grid", "--table", "toy", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    document = json.loads((tmp_path / "results" / "grid" / "toy.json").read_text())
    assert document["table"] == "toy" and document["family"] == "toy" and document["kernel_hash"] is None
    assert [entry["params"] for entry in document["configs"]] == [{"BLOCK": 64, "ITEMS": 1}, {"BLOCK": 64, "ITEMS": 2}]
    assert document["counts"] == {"expanded": 8, "after_filters": 8, "after_rules": 4, "after_pruning": 2}
    assert sorted({entry["reason"] for entry in document["pruned"]}) == [
        "128 threads > 64 per block", "rules[0] 'BLOCK % 64 == 0' is false",
    ]
    assert "128 threads > 64 per block" in done.stdout


def test_grid_dry_run_lists_configs_and_shapes_and_writes_nothing(tmp_path: Path) -> None:
    write_params(tmp_path, TOY_PARAMS)
    done = run_cli("grid", "--table", "toy", "--param", "BLOCK=64", "--filter", "ITEMS=2", "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "1 configurations to compile, 1 x 6 shapes = 6 benchmark runs" in done.stdout
    assert not (tmp_path / "results").exists()


def test_grid_command_bad_rule_is_one_line_exit_2(tmp_path: Path) -> None:
    params = json.loads(json.dumps(TOY_PARAMS))
    params["tables"]["toy"]["grid"]["rules"] = ["BLOCK % 64 == 0", "BLOCK.real > 1"]
    write_params(tmp_path, params)
    done = run_cli("grid", "--table", "toy", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "error: params.yaml: tables.toy.grid.rules[1]: attribute access not allowed in rule 'BLOCK.real > 1'\n"
    )
    assert "Traceback" not in done.stderr


def test_grid_command_unknown_param_override_exit_2(tmp_path: Path) -> None:
    write_params(tmp_path, TOY_PARAMS)
    done = run_cli("grid", "--table", "toy", "--param", "STAGES=3", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("error: --param: no group of table 'toy' has parameter 'STAGES'")


def test_grid_output_of_a_large_grid_is_bounded_and_all_prints_every_row(tmp_path: Path) -> None:
    # 400 configurations, 200 pruned by the rule and 100 by the thread limit: counts per reason, 20 rows.
    params = json.loads(json.dumps(TOY_PARAMS))
    params["tables"]["toy"]["grid"]["groups"][0].update(BLOCK=list(range(32, 32 * 5, 32)), ITEMS=list(range(100)))
    write_params(tmp_path, params)
    env_columns = {"COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "tunetable", "grid", "--table", "toy"], cwd=tmp_path,
                          capture_output=True, text=True, check=False, env={**os.environ, **env_columns})
    assert done.returncode == 0, done.stderr
    assert "pruned (300) by reason" in done.stdout
    assert re.search(r"200 │ rule\s+│ rules\[0\] 'BLOCK % 64 == 0' is false", done.stdout), done.stdout
    assert re.search(r"100 │ limit │ 128 threads > 64 per block", done.stdout), done.stdout
    assert "pruned configurations (20 of 300)" in done.stdout and "… 280 rows" in done.stdout
    document = json.loads((tmp_path / "results" / "grid" / "toy.json").read_text())
    assert len(document["pruned"]) == 300 and len(document["configs"]) == 100
    every = subprocess.run([sys.executable, "-m", "tunetable", "grid", "--table", "toy", "--all", "--dry-run"],
                           cwd=tmp_path, capture_output=True, text=True, check=False,
                           env={**os.environ, **env_columns})
    assert every.returncode == 0, every.stderr
    assert "pruned configurations (300 of 300)" in every.stdout and "…" not in every.stdout
    ids = {entry["id"] for entry in document["configs"]}
    assert all(config_id in every.stdout for config_id in ids)  # --dry-run --all lists every kept one
