"""The Snakemake DAG and bad inputs, on copies of the project (dry-runs; no GPU, no recording needed
except where marked)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from pipeline_repo import (
    NO_RECORDING,
    RECORDING,
    REPO,
    job_counts,
    project_files,
    snakemake,
    tunetable,
)
from tunetable.params import primary_recording
from tunetable.yamlio import load_yaml_file

TABLE = "gemm_mma"
LIVE = ("--config", "bench={backend: cuda}")  # a live plan needs no recording and no GPU to dry-run
DETAIL = ("--quiet", "host")  # every job's block and shell line (the default profile hides them)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """The project's files copied into a temporary folder (no git: Snakemake does not need it)."""
    for name in project_files():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    return tmp_path


def one_error_line(output: str) -> str:
    """The single `error:` line of a failed run (and no traceback)."""
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output[-2000:]
    assert "Traceback" not in output, output[-2000:]
    return errors[0]


def declared() -> dict:

    return load_yaml_file(REPO / "params.yaml")["tables"]


def device_manifests(params: dict, section: str) -> list[str]:
    """The other devices' names of a section's entries with a committed manifest (manifests/<name>.<device>.yaml)."""
    devices = list(params.get("devices") or {})[1:]
    return [f"{name}.{device}" for device in devices for name in params.get(section) or {}
            if (REPO / "manifests" / f"{name}.{device}.yaml").is_file()]


def shapes_count(table: str = TABLE) -> int:
    shapes = declared()[table]["shapes"]
    return len(shapes["NK"]) * len(shapes["M"])


def bench_jobs(output: str) -> dict[str, list[str]]:
    """The live bench jobs of a dry run (--quiet host): rule name -> the shards it outputs."""
    return {match.group(1): match.group(2).split(", ")
            for match in re.finditer(r"^rule (bench_\w+):\n(?:    \w+: .*\n)*?    output: ([^\n]+)", output,
                                     flags=re.M)}


def test_live_dag_compiles_once_per_table_and_benches_each_shard_on_one_gpu(copy: Path) -> None:
    from tunetable.workflow.batches import LIVE_CHUNK, LIVE_SPREAD

    done = snakemake("all", "-n", "--cores", "2", *LIVE, *DETAIL, cwd=copy)
    counts = job_counts(done.output)
    tables = declared()
    assert counts["compile"] == len(tables)
    assert counts["rank"] == counts["select"] == counts["metrics"] == len(tables)
    assert counts["codegen"] == 1
    assert counts["select_gemm_dispatch"] == 1  # every table it names is measured
    assert counts["metrics_gemm_dispatch"] == 1  # and its metrics and plot, like a table's
    # Each shard in exactly one bench job, a job's shards of one table, each table over several jobs
    # (one per GPU of a multi-GPU host), no job over LIVE_CHUNK shards; one GPU per job.
    jobs = bench_jobs(done.output)
    assert sum(counts[name] for name in counts if name.startswith("bench_")) == len(jobs)
    for name in tables:
        mine = {job: shards for job, shards in jobs.items() if re.fullmatch(rf"bench_{name}(_part\d+)?", job)}
        shards = [shard for job_shards in mine.values() for shard in job_shards]
        assert len(shards) == len(set(shards)) == shapes_count(name), sorted(mine)
        assert all(re.fullmatch(rf"results/raw/{name}/[0-9a-f]{{16}}/M\d+_N\d+_K\d+\.pkl", s) for s in shards)
        assert min(LIVE_SPREAD, shapes_count(name)) <= len(mine) < shapes_count(name)
        assert max(map(len, mine.values())) <= LIVE_CHUNK
    assert len(re.findall(r"resources: .*\bgpu=1\b", done.output)) >= len(jobs)
    assert "SKIPPING" not in done.output


def test_live_bench_chunk_size_and_resources() -> None:
    from tunetable.workflow import batches

    counts = (1, 7, 8, 15, 16, 55, 160, 161, 20_000)
    assert [batches.live_chunk_size(count, chunk=20, spread=8) for count in counts] == [1, 1, 1, 1, 2, 6, 20, 20, 20]
    from snakemake.resources import Resources

    # a profile's set-resources as Snakemake parses them; its bench runtime is minutes per shard
    profile = {name: Resources.parse(values, allow_expressions=True) for name, values in
               {"bench": ["runtime=30", 'gres="gpu:1"', "mem_mb=32000"], "compile": ["runtime=60"]}.items()}
    resources = Resources.from_mapping(batches.bench_resources(shards=3))
    assert resources["runtime"].value == 3 * batches.LIVE_SHARD_MINUTES and resources["gpu"].value == 1
    batches.apply_bench_profile(resources, profile, shards=3)
    assert resources["runtime"].value == 90 and resources["mem_mb"].value == 32000 and resources["gpu"].value == 1
    assert set(resources.keys()) == {"gpu", "runtime", "gres", "mem_mb"}
    untouched = Resources.from_mapping(batches.bench_resources(shards=2))
    batches.apply_bench_profile(untouched, {"compile": profile["compile"]}, shards=2)
    assert untouched["runtime"].value == 2 * batches.LIVE_SHARD_MINUTES


def test_replay_dag_never_compiles(copy: Path) -> None:
    if not RECORDING.is_file():
        pytest.skip(NO_RECORDING)
    done = snakemake("all", "-n", "-p", "--cores", "2", *DETAIL, cwd=copy)
    counts = job_counts(done.output)
    assert "compile" not in counts and "grid" not in counts and "bench" not in counts
    assert counts[f"replay_{TABLE}"] == 1
    assert len(re.findall(r"--shape \d+,\d+,\d+", done.output)) >= shapes_count()


@pytest.mark.slow
def test_replay_leaves_out_a_table_without_its_recording_loudly(copy: Path) -> None:
    if not RECORDING.is_file():
        pytest.skip(NO_RECORDING)
    wgmma = copy / str(primary_recording(load_yaml_file(REPO / "params.yaml"), "gemm_wgmma"))
    for path in (wgmma, wgmma.with_suffix(".json")):
        path.unlink(missing_ok=True)
    dag = snakemake("all", "-n", "--cores", "2", cwd=copy)
    counts = job_counts(dag.output)
    assert "replay_gemm_wgmma" not in counts and "select_gemm_dispatch" not in counts
    assert counts[f"replay_{TABLE}"] == 1 and counts["codegen"] == 1
    done = snakemake("measure_all", "--cores", "2", cwd=copy)  # a real run prints the banner (a dry run does not)
    assert f"tunetable: SKIPPING table gemm_wgmma: its recording {wgmma.relative_to(copy)} is absent" in done.output
    assert "tunetable: SKIPPING dispatch list gemm_dispatch: table gemm_wgmma is not part of this run" in done.output


def test_replay_covers_every_table_whose_recording_is_present(copy: Path) -> None:
    if not RECORDING.is_file():
        pytest.skip(NO_RECORDING)
    # Point gemm_wgmma at an existing recording: the plan only needs the file (this is a dry run,
    # nothing is replayed), and then both tables and the dispatch list are in the DAG.
    params = copy / "params.yaml"
    # tables.<t>.recording overrides the primary device's derived path (data/recordings/h200_gemm_wgmma.parquet)
    params.write_text(params.read_text().replace("  gemm_wgmma:\n",
                                                 f"  gemm_wgmma:\n    recording: {RECORDING.relative_to(REPO)}\n", 1))
    done = snakemake("all", "-n", "--cores", "2", cwd=copy)
    counts = job_counts(done.output)
    assert counts["replay_gemm_mma"] == counts["replay_gemm_wgmma"] == counts["select_gemm_dispatch"] == 1
    assert "SKIPPING" not in done.output


def test_default_profile_limits_gpu_jobs(copy: Path) -> None:
    dag = snakemake("measure_all", "-n", *LIVE, *DETAIL, cwd=copy)
    assert "Using workflow specific profile profiles/default" in dag.output
    assert re.search(r"resources: .*\bgpu=1\b", dag.output), dag.output[-2000:]


def test_slurm_profile_dry_run(copy: Path) -> None:
    # With the plugin (pip install '.[slurm]') the real executor dry-runs; without it the profile's
    # resources are still applied and checked (the plugin adds ~1 s to every snakemake start).
    plugin = importlib.util.find_spec("snakemake_executor_plugin_slurm") is not None
    executor = () if plugin else ("--executor", "local")
    done = snakemake("all", "-n", "--workflow-profile", "profiles/slurm", *executor, cwd=copy)
    # the profile's set-resources for `bench` reach every bench job (they are named per chunk)
    benches = re.findall(r"rule (bench_\w+):.*?resources: ([^\n]+)", done.output, flags=re.DOTALL)
    assert benches, done.output[-2000:]
    for _name, resources in benches:
        assert "gres=gpu:1" in resources and "slurm_partition=gpu" in resources and "cpus_per_task=4" in resources
    compile_job = re.search(r"rule compile:.*?resources: ([^\n]+)", done.output, flags=re.DOTALL)
    assert compile_job is not None and "cpus_per_task=32" in compile_job.group(1)
    shards = [shard for job_shards in bench_jobs(done.output).values() for shard in job_shards]
    assert len(shards) == len(set(shards)) == sum(shapes_count(name) for name in declared())


def test_malformed_params_fail_with_one_line(copy: Path) -> None:
    params = copy / "params.yaml"
    params.write_text(params.read_text().replace("  gemm_mma:\n", "  gemm_mma:\n   bad: [\n", 1))
    done = snakemake("-n", "--cores", "1", cwd=copy, check=False)
    assert done.returncode != 0
    line = one_error_line(done.output)
    assert line.startswith("error: params.yaml: line ") and "malformed YAML" in line


def test_invalid_params_name_the_key(copy: Path) -> None:
    params = copy / "params.yaml"
    params.write_text(params.read_text().replace("dtype: bf16", "dtype: fp8", 1))
    done = snakemake("-n", "--cores", "1", cwd=copy, check=False)
    assert done.returncode != 0
    assert one_error_line(done.output).startswith("error: params.yaml: tables.gemm_mma.dtype: ")


def test_missing_recording_fails_with_one_line(copy: Path) -> None:
    # A replay in which no table has its recording, on any device (one absent recording only skips that table:
    # without the H200's, the H100's tables still replay theirs; tests/test_devices.py).
    params = load_yaml_file(REPO / "params.yaml")
    for device in params["devices"]:
        for path in (copy / "data" / "recordings").glob(f"{device}_gemm_*"):
            path.unlink()
    assert not [f"{d}_{t}" for d in params["devices"] for t in params["tables"]
                if (copy / "data" / "recordings" / f"{d}_{t}.parquet").exists()]
    done = snakemake("-n", "--cores", "1", "--config", "bench={backend: replay}", cwd=copy, check=False)
    assert done.returncode != 0
    assert one_error_line(done.output) == (
        "error: data/recordings/h200_gemm_mma.parquet: no such recording (make one with `tunetable record` on a GPU)")


@pytest.mark.parametrize("args", [("trace", "nosuch", "0"), ("metrics", "--table", "nosuch")])
def test_unknown_table_fails_with_one_line(copy: Path, args: tuple[str, ...]) -> None:
    done = tunetable(*args, cwd=copy, check=False)
    assert done.returncode == 2
    known = ", ".join(sorted(declared()))
    if args[0] == "trace":  # trace also takes dispatch lists and selectors, so its line names them too
        params = load_yaml_file(REPO / "params.yaml")
        # ... and the other devices' (gemm_mma.h100: `tunetable trace gemm_mma.h100 0` is how one reads them)
        tables = ", ".join(sorted([*declared(), *device_manifests(params, "tables")]))
        lists = ", ".join(sorted([*(params.get("dispatch") or {}), *device_manifests(params, "dispatch")]))
        selectors = ", ".join(sorted([*(params.get("selector") or {}), *device_manifests(params, "selector")]))
        assert "gemm_mma.h100" in tables and "gemm_selector.h100" in selectors   # the H100's, recorded 2026-12-06
        assert one_error_line(done.output) == (f"error: params.yaml: unknown table, dispatch list or selector 'nosuch' "
                                               f"(declared tables: {tables}; dispatch lists: {lists}; "
                                               f"selectors: {selectors})")
    else:
        assert one_error_line(done.output) == f"error: params.yaml: tables: unknown table 'nosuch' (declared: {known})"


def test_trace_line_outside_any_entry(copy: Path) -> None:
    done = tunetable("trace", "kernels/tuning_configs.py:1", cwd=copy, check=False)
    assert done.returncode == 2
    assert one_error_line(done.output) == ("error: kernels/tuning_configs.py: line 1: "
                                           "line is not inside a generated entry")


def test_other_keys_are_parked_and_parked_shards_restored_not_replayed(copy: Path) -> None:
    # results/raw is the DVC out: it must hold this plan's shards only (dvc.lock = what a fresh clone makes).
    if not RECORDING.is_file():
        pytest.skip(NO_RECORDING)
    import json

    key = json.loads((REPO / "results" / "metrics" / f"{TABLE}.json").read_text())["content_key"]
    (copy / "results" / "raw" / TABLE / "0123456789abcdef").mkdir(parents=True)
    (copy / "results" / "raw" / TABLE / "0123456789abcdef" / "M1_N4096_K4096.pkl").write_bytes(b"old key")
    parked = copy / "results" / "parked" / TABLE / key / "M1_N4096_K4096.pkl"
    parked.parent.mkdir(parents=True)
    parked.write_bytes(b"a parked shard of the current key")
    parked.with_name("M1_N4096_K4096.journal.jsonl").write_text("{}\n")  # its journal moves with it (checksum)
    done = snakemake("measure_all", "-n", "-p", "--cores", "2", *DETAIL, cwd=copy)
    counts = job_counts(done.output)
    assert counts["park_raw"] == 1 and counts["restore_parked"] == 1, done.output[-3000:]
    replay = next(line for line in done.output.splitlines() if f"bench --table {TABLE} " in line)
    assert "--shape 1,4096,4096 " not in replay and "--shape 8,4096,4096 " in replay
    assert f"park results/raw/{TABLE}/0123456789abcdef" in done.output
    assert f"restore results/raw/{TABLE}/{key}/M1_N4096_K4096.pkl" in done.output
    # Parking prunes the folders it empties up to results/raw: a job writing into results/raw waits for it
    # (the replay jobs are printed indented, inside their group).
    writers = re.findall(r"^ *rule ((?:replay|restore)\w*):\n((?: +\w+: .*\n)+)", done.output, flags=re.M)
    assert {name.split("_")[0] for name, _block in writers} == {"replay", "restore"}, done.output[-3000:]
    for name, block in writers:
        inputs = re.search(r"^ +input: (.*)$", block, flags=re.M)
        assert inputs and "results/stamps/parked.ok" in inputs.group(1).split(", "), (name, block)


def test_live_dag_never_remeasures_a_shard_on_disk(copy: Path) -> None:
    # A shard on disk is final: no rule may produce it, even with the compile stage forced.
    first = snakemake("measure_all", "-n", *LIVE, *DETAIL, cwd=copy)
    before = [shard for shards in bench_jobs(first.output).values() for shard in shards]
    shard = next(path for path in before if path.startswith(f"results/raw/{TABLE}/"))
    on_disk = copy / shard
    on_disk.parent.mkdir(parents=True)
    on_disk.write_bytes(b"a shard measured earlier (the DAG only looks at its presence)")
    done = snakemake("measure_all", "-n", "--forcerun", "compile", *LIVE, *DETAIL, cwd=copy)
    after = [path for shards in bench_jobs(done.output).values() for path in shards]
    assert sorted(after) == sorted(path for path in before if path != shard)
    outputs = [line for line in done.output.splitlines() if line.startswith("    output: ")]
    assert outputs and not any(shard in line.split(": ", 1)[1].split(", ") for line in outputs)


def test_a_failed_live_bench_job_keeps_the_shards_it_finished_and_the_next_run_measures_only_the_rest(
        copy: Path) -> None:
    # Snakemake deletes a failed job's outputs. A live bench job's failure branch parks the shards it
    # finished (with their journals) first, so there is nothing measured left to delete, and the next
    # plan restores them by a rename. Here the job's own shell command runs after two of its shards were
    # written (real shards replayed from the recording stand in for two measured ones) and fails where a
    # GPU host would fail mid-chunk: here, before measuring, for want of a GPU.
    if not RECORDING.is_file():
        pytest.skip(NO_RECORDING)
    first = snakemake("measure_all", "-n", "-p", *LIVE, *DETAIL, cwd=copy)
    jobs = bench_jobs(first.output)
    name, shards = next((job, paths) for job, paths in jobs.items() if job.startswith(f"bench_{TABLE}_part"))
    block = first.output[first.output.index(f"rule {name}:"):]
    command = re.search(r"^Shell command: (.+)$", block, flags=re.M).group(1)
    finished = shards[:2]
    shapes = [re.fullmatch(r".*/M(\d+)_N(\d+)_K(\d+)\.pkl", path).groups() for path in finished]
    tunetable("bench", "--table", TABLE, "--backend", "replay", *(a for s in shapes for a in ("--shape", ",".join(s))),
              "--results-root", "elsewhere", cwd=copy)
    for path in finished:
        source = next((copy / "elsewhere" / "raw" / TABLE).glob(f"*/{Path(path).name}"))
        for file in (source, source.with_name(source.name.replace(".pkl", ".journal.jsonl"))):
            (copy / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(file, copy / path.replace(".pkl", file.name.removeprefix(source.stem)))
    written = {path: (copy / path).read_bytes() for path in finished}
    log = copy / re.search(r"^    log: (.+)$", block, flags=re.M).group(1)
    log.parent.mkdir(parents=True, exist_ok=True)  # as Snakemake does before a job
    failed = subprocess.run(["bash", "-c", command], cwd=copy, capture_output=True, text=True, timeout=300)
    assert failed.returncode != 0 and "GPU" in failed.stderr, failed.stderr[-2000:]
    for path, data in written.items():
        parked = copy / path.replace("results/raw/", "results/parked/", 1)
        assert not (copy / path).exists() and parked.read_bytes() == data  # nothing left for Snakemake to delete
        assert parked.with_name(parked.name.replace(".pkl", ".journal.jsonl")).is_file()
    again = snakemake("measure_all", "-n", "-p", *LIVE, *DETAIL, cwd=copy)
    restored = re.search(r"^rule restore_parked:\n(?:    \w+: .*\n)*?    output: ([^\n]+)", again.output, flags=re.M)
    assert restored is not None and sorted(restored.group(1).split(", ")) == sorted(finished), again.output[-3000:]
    remeasured = [path for paths in bench_jobs(again.output).values() for path in paths]
    assert sorted(remeasured) == sorted(path for paths in jobs.values() for path in paths if path not in finished)


def test_replay_jobs_cover_each_missing_shard_once_in_bounded_chunks(copy: Path, monkeypatch) -> None:
    from tunetable.workflow import batches, run_plan
    from tunetable.params import load_params

    monkeypatch.chdir(copy)  # the plan reads params.yaml's relative paths, as the Snakefile does
    plan = run_plan.make_plan({**load_params("params.yaml"), "bench": {"backend": "replay"}})
    if not plan.tables:
        pytest.skip(NO_RECORDING)
    jobs = batches.replay_batches(plan, chunk=20)
    served = [shard.path for job in jobs for shard in job.shards]
    assert sorted(served) == sorted(shard.path for shard in run_plan.missing_shards(plan))
    assert len(served) == len(set(served))
    assert all(len(job.shards) <= 20 and {s.table for s in job.shards} == {job.table} for job in jobs)
    names = [job.name for job in jobs]
    assert len(set(names)) == len(names) and f"{TABLE}_part1" in names[0]
    assert [job.name for job in batches.replay_batches(plan)] == [f"replay_{spec.name}" for spec in plan.tables]


@pytest.mark.parametrize("backend", ["cuda", "replay"])
def test_a_measuring_job_keeps_its_name_and_shards_when_other_jobs_finish(copy: Path, monkeypatch, backend) -> None:
    # A cluster job re-parses the Snakefile when it starts, after other jobs may have written their
    # shards: its rule must still exist with the same outputs (windows over every shard, not the missing).
    from tunetable.workflow import batches, run_plan
    from tunetable.params import load_params

    monkeypatch.chdir(copy)  # the plan reads params.yaml's relative paths, as the Snakefile does
    params = {**load_params("params.yaml"), "bench": {"backend": backend}}
    plan = run_plan.make_plan(params)
    if not plan.tables:
        pytest.skip(NO_RECORDING)
    jobs = (batches.live_batches if backend == "cuda" else lambda p: batches.replay_batches(p, chunk=20))
    before = {job.name: job.shards for job in jobs(plan)}
    finished = next(name for name in before if name.endswith("_part1"))
    for shard in before[finished] + before[finished.replace("_part1", "_part3")][:1]:
        for path in (shard.path, shard.journal):  # written by their jobs (a replayed shard has its journal)
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_bytes(b"written by its job")
    after = {job.name: job.shards for job in jobs(run_plan.make_plan(params))}
    part3 = finished.replace("_part1", "_part3")
    assert finished not in after and after[part3] == before[part3][1:]
    assert {name: shards for name, shards in after.items() if name != part3} == {
        name: shards for name, shards in before.items() if name not in (finished, part3)}


def _add_unrecorded_shape(copy: Path) -> None:
    """Params edit: M=77 in gemm_mma (never recorded on the H200: it needs a GPU)."""
    import yaml

    path = copy / "params.yaml"
    data = load_yaml_file(path)
    data["tables"][TABLE]["shapes"]["M"].insert(3, 77)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _gpu_line(output: str) -> str:
    lines = [line for line in output.splitlines() if "need a GPU and none is visible here" in line]
    assert len(lines) == 1, output[-3000:]
    assert "Traceback" not in output
    return lines[0]


@pytest.mark.slow
def test_a_shape_that_needs_a_gpu_is_named_in_one_line_before_any_work(copy: Path, monkeypatch) -> None:
    if not RECORDING.is_file():
        pytest.skip(NO_RECORDING)
    _add_unrecorded_shape(copy)
    shapes = declared()[TABLE]["shapes"]["NK"]
    dry = snakemake("all", "-n", "--cores", "2", cwd=copy)
    line = _gpu_line(dry.output)
    # M=77 is in neither device's recording: its shards of gemm_mma and of the H100's gemm_mma.h100 need a GPU.
    assert (copy / "data/recordings/h100_gemm_mma.parquet").is_file()
    assert line.startswith(f"tunetable: {2 * len(shapes)} shards need a GPU and none is visible here: {TABLE} "
                           "M77_N4096_K4096, ")
    assert f"{TABLE}.h100 M77_N4096_K4096, " in line
    assert "are not in data/recordings/h100_gemm_mma.parquet, data/recordings/h200_gemm_mma.parquet" in line
    assert "a GPU host (`snakemake --cores N` there" in line and "scripts/device_session.sh" in line
    assert "TUNETABLE_ALLOW_MISSING=1 snakemake --cores 2 (or dvc repro)" in line
    assert job_counts(dry.output)[f"replay_{TABLE}"] == 1  # the dry run warns, then shows the plan
    run = snakemake("--cores", "2", cwd=copy, check=False)
    said = [text for text in run.output.splitlines() if "need a GPU" in text]
    assert run.returncode == 1 and said == [line, line]  # before the plan, and where the run stops
    assert "localrule" not in run.output and not (copy / "results" / "raw").exists()  # nothing ran
    monkeypatch.setenv("TUNETABLE_ALLOW_MISSING", "1")
    kept = snakemake("all", "-n", "-p", "--cores", "2", *DETAIL, cwd=copy)
    assert "need a GPU and none is visible" not in kept.output
    assert f"tunetable: LEAVING OUT {2 * len(shapes)} shards ({TABLE} M77_N4096_K4096," in kept.output
    replay = next(line for line in kept.output.splitlines() if f"bench --table {TABLE} " in line)
    assert "--shape 64,4096,4096 " in replay and "--shape 77," not in replay


def test_a_live_run_without_a_gpu_stops_before_compiling(copy: Path) -> None:
    run = snakemake("all", "--cores", "2", *LIVE, cwd=copy, check=False)
    line = _gpu_line(run.output)
    assert run.returncode == 1 and "are to be measured live (backend cuda)" in line
    assert "--workflow-profile profiles/slurm" in line
    assert "localrule" not in run.output and not (copy / "results" / "stamps").exists()  # no compile job ran


def test_bench_cuda_without_a_gpu_says_so_before_anything_else(copy: Path) -> None:
    done = tunetable("bench", "--table", TABLE, "--shape", "1,4096,4096", "--backend", "cuda", cwd=copy, check=False)
    assert done.returncode == 2 and "Traceback" not in done.output
    assert one_error_line(done.output) == (
        "error: --backend: the cuda backend needs a GPU and none is visible here (no /dev/nvidia*, or libcuda does "
        "not load): run on a GPU host, or --backend replay to serve the recording")
