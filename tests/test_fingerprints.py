"""The settings fingerprints the rules carry (pipeline/workflow/fingerprints.py): what re-runs what."""

from __future__ import annotations

import copy

from pipeline_repo import REPO

from tunetable.workflow.fingerprints import fingerprint, metrics_settings
from tunetable.yamlio import load_yaml_file

PARAMS = load_yaml_file(REPO / "params.yaml")


def test_a_shape_added_to_one_table_changes_that_tables_metrics_settings_only() -> None:
    changed = copy.deepcopy(PARAMS)
    changed["tables"]["gemm_mma"]["shapes"]["M"].insert(3, 77)
    before = {name: fingerprint(metrics_settings(PARAMS, tables=[name]))
              for name in ("gemm_mma", "gemm_mma.h100", "gemm_wgmma", "gemm_wgmma_swap.h100")}
    after = {name: fingerprint(metrics_settings(changed, tables=[name])) for name in before}
    # A device table's metrics follow its base table's shapes; the other tables' do not move.
    assert [name for name in before if before[name] != after[name]] == ["gemm_mma", "gemm_mma.h100"]
    # A dispatch list's metrics follow every table it lists.
    listed = ["gemm_mma", "gemm_wgmma", "gemm_wgmma_swap"]
    assert fingerprint(metrics_settings(PARAMS, tables=listed)) != fingerprint(metrics_settings(changed, tables=listed))


def test_every_tables_metrics_settings_follow_the_devices_ceilings() -> None:
    changed = copy.deepcopy(PARAMS)
    changed["devices"]["h100"]["ceilings"]["tflops"] += 1.0
    assert all(fingerprint(metrics_settings(PARAMS, tables=[name])) != fingerprint(metrics_settings(changed,
                                                                                                   tables=[name]))
               for name in ("gemm_mma", "gemm_wgmma.h100"))
