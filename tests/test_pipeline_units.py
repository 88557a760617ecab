"""Pure parts of the pipeline layer: GPU claims, generated-region parsing, lookup, audit diffs."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from tunetable import audit, gpu_claim, manifest, metrics, trace
from tunetable.errors import TuneTableError
from tunetable.params import load_params, table_spec
from tunetable.yamlio import load_yaml_file

REPO = Path(__file__).resolve().parents[1]


def test_gpu_claims_are_exclusive_until_released(tmp_path: Path) -> None:
    first = gpu_claim.try_claim(gpu_ids=["0", "1"], folder=tmp_path)
    second = gpu_claim.try_claim(gpu_ids=["0", "1"], folder=tmp_path)
    assert first is not None and second is not None
    assert (first[0], second[0]) == ("0", "1")
    assert gpu_claim.try_claim(gpu_ids=["0", "1"], folder=tmp_path) is None
    first[1].close()
    again = gpu_claim.try_claim(gpu_ids=["0", "1"], folder=tmp_path)
    assert again is not None and again[0] == "0"
    second[1].close()
    again[1].close()


def test_claim_without_gpus_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TuneTableError, match="no GPU visible to claim"):
        gpu_claim.claim(gpu_ids=[], folder=tmp_path)


def test_generated_entries_match_the_manifest() -> None:
    spec = table_spec(load_params(REPO / "params.yaml"), "gemm_mma")
    text = (REPO / spec.codegen.target).read_text()
    entries = trace.generated_entries(text, begin_marker=spec.codegen.begin_marker,
                                      end_marker=spec.codegen.end_marker, path=spec.codegen.target)
    manifest = load_yaml_file(REPO / spec.codegen.manifest)["params"]
    assert [e.index for e in entries] == list(range(len(manifest)))
    lines = text.splitlines()
    for entry, values in zip(entries, manifest):
        assert "# Automatically generated from [" in lines[entry.first_line - 1]
        assert f"# index: [{entry.index}]" in entry.text
        assert f'config_id="{values["CONFIG_ID"]}"' in entry.text
        assert lines[entry.last_line - 1].endswith("),")   # the snippet's last line and the trailing comma


def test_entry_at_line_finds_the_enclosing_entry() -> None:
    params = load_params(REPO / "params.yaml")
    spec = table_spec(params, "gemm_mma")
    lines = (REPO / spec.codegen.target).read_text().splitlines()
    index_line = next(i for i, text in enumerate(lines, 1) if "# index: [1]" in text)
    found = trace.entry_at_line(root=REPO, specs=[spec], file=spec.codegen.target, line=index_line + 3)
    assert found == ("gemm_mma", 1)


@pytest.mark.parametrize(("text", "expected"), [
    ("kernels/tuning_configs.py:57", ("kernels/tuning_configs.py", 57)),
    ("gemm_mma", None),
    ("a:b", None),
])
def test_parse_location(text: str, expected: tuple[str, int] | None) -> None:
    assert trace.parse_location(text) == expected


def _entry(index: int, m: int, m_end: int, config: str, n: int = 4096, k: int = 4096) -> manifest.ManifestEntry:
    values = {"M": m, "M_END": m_end, "N": n, "K": k, "CONFIG_ID": config}
    return manifest.ManifestEntry(index=index, m=m, m_end=m_end, n=n, k=k, config_id=config, values=values)


def test_lookup_is_first_match_on_half_open_ranges() -> None:
    entries = [_entry(0, 1, 64, "a"), _entry(1, 64, 2**31 - 1, "b"), _entry(2, 1, 2**31 - 1, "c", n=8192)]
    assert manifest.lookup(entries, m=63, n=4096, k=4096).config_id == "a"
    assert manifest.lookup(entries, m=64, n=4096, k=4096).config_id == "b"
    assert manifest.lookup(entries, m=5, n=8192, k=4096).config_id == "c"
    assert manifest.lookup(entries, m=5, n=1024, k=4096) is None


def test_geomean() -> None:
    assert metrics.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert metrics.geomean([]) is None


def test_params_changes_are_dotted_and_sorted() -> None:
    before = {"select": {"tie_tolerance": 0.01}, "bench": {"rounds": 10, "warmup_ms": 25}}
    after = {"select": {"tie_tolerance": 0.02}, "bench": {"rounds": 10}, "compile": {"workers": 2}}
    assert audit.params_changes(before=before, after=after) == [
        audit.ParamChange("bench.warmup_ms", 25, None),
        audit.ParamChange("compile.workers", None, 2),
        audit.ParamChange("select.tie_tolerance", 0.01, 0.02),
    ]


def test_entry_changes_align_like_a_diff() -> None:
    before = [_entry(0, 1, 64, "a"), _entry(1, 64, 512, "b"), _entry(2, 512, 2**31 - 1, "c")]
    after = [_entry(0, 1, 64, "a"), _entry(1, 64, 2**31 - 1, "b")]
    changes = audit.entry_changes(before=before, after=after)
    assert [(c.change, c.index, c.values["M_END"]) for c in changes] == [
        ("removed", 1, 512), ("removed", 2, 2**31 - 1), ("added", 1, 2**31 - 1)]


def test_manifest_without_params_is_a_clear_error() -> None:
    with pytest.raises(TuneTableError, match="manifests/x.yaml: expected 'params' to be a sequence"):
        manifest.ranges_from_text("defaults: {}\n", path="manifests/x.yaml")
    with pytest.raises(TuneTableError, match=r"manifests/x.yaml: params\[0\]: entry lacks M_END, CONFIG_ID"):
        manifest.ranges_from_text("params:\n  - {M: 1, N: 8, K: 8}\n", path="manifests/x.yaml")


def test_dispatch_metrics_take_each_shape_from_the_table_its_entry_names() -> None:
    import polars as pl

    def ranked(rows: list[tuple[int, str, float, float]]) -> pl.DataFrame:
        return pl.DataFrame([{"M": m, "N": 8, "K": 8, "config_id": c, "median_ms": ms, "cublas_ms": cublas}
                             for m, c, ms, cublas in rows])

    # Table a is faster than its own cuBLAS at M=1 (speedup 2), table b at M=64 (speedup 4/3).
    tables = {"a": ranked([(1, "a1", 1.0, 2.0), (64, "a1", 3.0, 2.0), (64, "a2", 2.5, 2.0)]),
              "b": ranked([(1, "b1", 4.0, 3.0), (64, "b1", 3.0, 4.0)])}
    entries = [manifest.ManifestEntry(index=0, m=1, m_end=64, n=8, k=8, config_id="a1", values={"TABLE": "a"}),
               manifest.ManifestEntry(index=1, m=64, m_end=2**31 - 1, n=8, k=8, config_id="b1", values={"TABLE": "b"})]
    results = metrics.dispatch_shape_results(entries=entries, ranked=tables, shapes=[(1, 8, 8), (64, 8, 8), (2, 9, 9)])
    assert [(r.table, r.config_id, r.tuned_ms, r.cublas_ms, r.best_ms) for r in results] == [
        ("a", "a1", 1.0, 2.0, 1.0), ("b", "b1", 3.0, 4.0, 3.0), (None, None, None, None, None)]
    summary = metrics.dispatch_metrics(name="d", results=results, entries=2, content_keys={"a": "ka", "b": "kb"},
                                       provenance={"device": "NVIDIA H200"})
    assert summary["geomean_speedup_vs_cublas"] == pytest.approx((2.0 * 4.0 / 3.0) ** 0.5, abs=1e-6)
    assert (summary["shapes"], summary["shapes_covered"], summary["shapes_faster_than_cublas"]) == (3, 2, 2)
    assert summary["shapes_by_table"] == {"a": 1, "b": 1} and summary["content_keys"] == {"a": "ka", "b": "kb"}
    rows = metrics.plot_rows(results)
    csv = metrics.csv_text(rows, columns=metrics.DISPATCH_PLOT_COLUMNS).splitlines()
    assert csv[0].split(",")[4] == "table" and csv[1].split(",")[4] == "a"
    assert csv[1].split(",")[-2:] == ["2.0", "1.0"]  # speedup_vs_cublas = cuBLAS / tuned, slowdown_vs_best


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a PNG, from its IHDR chunk."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_plot_of_thousands_of_shapes_keeps_a_fixed_size() -> None:
    def result(index: int) -> metrics.ShapeResult:
        return metrics.ShapeResult(m=1 + index % 64, n=4096 + 64 * (index // 64), k=4096, entry_index=0,
                                   config_id="c0", tuned_ms=1.0, cublas_ms=1.0 + (index % 7) / 10, best_ms=1.0)

    few = png_size(metrics.plot_png(table="t", results=[result(i) for i in range(55)]))
    many = png_size(metrics.plot_png(table="t", results=[result(i) for i in range(5500)]))
    # A row of two 6 x 2.9 in panels per (N, K) at 100 dpi, a 1 in band on top: 55 shapes are one (N, K).
    assert few == (1200, 390)
    # 5,500 shapes over 86 (N, K): 7 rows of their own and one row pooling the other 79, never more.
    assert many == (1200, 8 * 290 + 100)


def test_the_closing_summary_names_shards_tables_and_changes() -> None:
    from tunetable import run_summary

    assert run_summary.shards_line(served={"a": 55, "b": 3}, restored=0, backend="replay") == (
        "shards: 58 replayed from the recordings (a 55, b 3)")
    assert run_summary.shards_line(served={"a": 2}, restored=5, backend="cuda") == (
        "shards: 2 measured on the GPU (a 2), 5 restored from results/parked")
    assert run_summary.shards_line(served={}, restored=0, backend="replay") == (
        "shards: all on disk already (none replayed or measured)")
    line = run_summary.table_line({"table": "t", "entries": 3, "shapes": 5, "shapes_covered": 4,
                                   "geomean_tflops": 12.345, "geomean_speedup_vs_cublas": 0.98765,
                                   "shapes_faster_than_cublas": 2, "failures": 1})
    assert line == ("t: 3 entries, 4/5 shapes, 12.3 TFLOP/s geomean, speedup_vs_cublas 0.988x, 2 shapes faster "
                    "than cuBLAS, 1 failed configurations")
    assert run_summary.changed_line([]).startswith("changed against git: nothing")
    assert run_summary.changed_line(["manifests/t.yaml"]) == (
        "changed against git: manifests/t.yaml (review: git diff, tunetable audit)")
    assert run_summary.changed_line(None) is None


def test_an_audit_reads_each_shard_once_and_each_configuration_in_it_once(monkeypatch) -> None:
    """ShardReads: the same bytes (and journal) are verified and unpickled once, a configuration picked out once;
    other bytes, another journal or another configuration are read again."""
    payloads, views = [], []

    def payload(data, *, path, journal):
        payloads.append((data, journal))
        return {"data": data}

    def view(*, payload, path, key, config_id):
        views.append((payload["data"], config_id))
        return types.SimpleNamespace(config_ms=len(views) * 1.0, cublas_ms=0.5)

    monkeypatch.setattr(audit.lineage, "shard_payload", payload)
    monkeypatch.setattr(audit.lineage, "view_of", view)
    reads = audit.ShardReads()
    path = Path("results/raw/t/k/M1_N2_K3.pkl")
    first = reads.time(data=b"shard", journal=b"j", path=path, key="k", config="c1")
    assert reads.time(data=b"shard", journal=b"j", path=path, key="k", config="c1") == first == (1.0, 0.5)
    assert reads.time(data=b"shard", journal=b"j", path=path, key="k", config="c2") == (2.0, 0.5)
    assert payloads == [(b"shard", b"j")] and views == [(b"shard", "c1"), (b"shard", "c2")]
    reads.time(data=b"other", journal=b"j", path=path, key="k", config="c1")
    reads.time(data=b"shard", journal=None, path=path, key="k", config="c1")
    assert payloads[1:] == [(b"other", b"j"), (b"shard", None)] and len(views) == 4
