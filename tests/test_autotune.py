"""@autotune on the CPU: host functions timed with the wall clock (real sleeps, real timings).

Covers the choice, the disk cache and its key (device, source, key values, configuration list),
the environment variables, restoring written arguments, prune/verify/failures, a corrupt cache
file and several processes tuning the same key at once.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tunetable.kernels.autotune import (
    AutotuneCacheWarning,
    AutotuneError,
    Autotuner,
    autotune,
    cache_digest,
    wall_clock_timer,
)

# Sleep lengths in seconds: the middle one is the fastest, and the last two 12 ms apart, far above the
# timer and scheduler noise of a loaded 2-core host (2 ms apart, 0.006 beat 0.004 there once).
DELAYS = [0.016, 0.001, 0.004]
FAST = 0.001


def sleeper(calls: list[float] | None = None) -> Any:
    """A host 'kernel' whose run time is its configuration; records the configurations it ran."""

    def run(n: int, *, config: float) -> float:
        if calls is not None:
            calls.append(config)
        time.sleep(config)
        return config * n

    return run


def tuned(fn: Any, cache_dir: Path, **options: Any) -> Autotuner:
    settings = {"configs": DELAYS, "key": ["n"], "timer": wall_clock_timer, "warmup_ms": 0.0, "rounds": 3,
                "device": "cpu-test", "cache_dir": cache_dir}
    settings.update(options)
    return autotune(**settings)(fn)


def cache_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json"))


def test_chooses_the_fastest_and_tunes_once_per_key(tmp_path: Path) -> None:
    calls: list[float] = []
    run = tuned(sleeper(calls), tmp_path)
    assert run(10) == pytest.approx(FAST * 10)
    tuning_calls = len(calls)
    assert set(calls) == set(DELAYS)
    assert run(10) == pytest.approx(FAST * 10)
    assert calls[tuning_calls:] == [FAST]  # the second call only runs the winner
    trials = run.trials[run.key_of((10,), {})]
    assert [t.status for t in trials] == ["ok", "ok", "ok"]
    assert min(trials, key=lambda t: t.median_ms).index == 1


def test_choice_is_cached_on_disk_for_a_new_process_state(tmp_path: Path) -> None:
    run(tuned(sleeper(), tmp_path), 10)
    calls: list[float] = []
    fresh = tuned(sleeper(calls), tmp_path)
    assert fresh(10) == pytest.approx(FAST * 10)
    assert calls == [FAST]  # no trial ran: the file answered
    assert fresh.cache_hits == 1 and not fresh.trials
    entry = json.loads(cache_files(tmp_path)[0].read_text())
    assert entry["best"] == 1 and entry["device"] == "cpu-test" and entry["key"] == ["10"]
    assert len(entry["trials"]) == 3 and all(len(t["samples_ms"]) == 3 for t in entry["trials"])


def run(fn: Autotuner, n: int) -> Any:
    return fn(n)


def test_each_key_value_has_its_own_entry(tmp_path: Path) -> None:
    calls: list[float] = []
    fn = tuned(sleeper(calls), tmp_path)
    fn(10)
    first = len(calls)
    fn(20)
    assert len(calls) > first + 1  # the new key tuned again
    assert len(cache_files(tmp_path)) == 2


def test_array_arguments_key_by_shape_and_dtype(tmp_path: Path) -> None:
    def scale(x: np.ndarray, *, config: float) -> float:
        time.sleep(config)
        return float(x.sum())

    fn = tuned(scale, tmp_path, key=["x"])
    fn(np.ones(4, dtype=np.float32))
    fn(np.zeros(4, dtype=np.float32))  # same shape and dtype: same entry
    fn(np.ones(8, dtype=np.float32))
    fn(np.ones(4, dtype=np.float64))
    assert len(cache_files(tmp_path)) == 3


def test_digest_changes_with_each_part_of_the_key() -> None:
    base = {"function": "m.f", "device": "H200", "source_hash": "s1", "key": ["4096"], "configs": ["a", "b"]}
    reference = cache_digest(**base)
    assert cache_digest(**dict(base)) == reference
    for field, other in [("function", "m.g"), ("device", "H100"), ("source_hash", "s2"),
                         ("key", ["8192"]), ("configs", ["a", "b", "c"]), ("configs", ["b", "a"])]:
        assert cache_digest(**{**base, field: other}) != reference, field


def test_kernel_source_change_invalidates_the_cache(tmp_path: Path) -> None:
    kernel = tmp_path / "kernel.cu"
    kernel.write_text("__global__ void k() {}\n")
    cache = tmp_path / "cache"
    tuned(sleeper(), cache, sources=[kernel])(10)
    calls: list[float] = []
    same = tuned(sleeper(calls), cache, sources=[kernel])
    same(10)
    assert calls == [FAST] and same.cache_hits == 1
    kernel.write_text("__global__ void k() { /* edited */ }\n")
    edited_calls: list[float] = []
    edited = tuned(sleeper(edited_calls), cache, sources=[kernel])
    edited(10)
    assert set(edited_calls) == set(DELAYS) and edited.cache_hits == 0
    assert len(cache_files(cache)) == 2


def test_configuration_list_and_device_are_part_of_the_key(tmp_path: Path) -> None:
    tuned(sleeper(), tmp_path)(10)
    more: list[float] = []
    tuned(sleeper(more), tmp_path, configs=[*DELAYS, 0.002])(10)
    assert 0.002 in more
    other_device: list[float] = []
    tuned(sleeper(other_device), tmp_path, device="other-gpu")(10)
    assert set(other_device) == set(DELAYS)
    assert len(cache_files(tmp_path)) == 3


def test_corrupt_cache_file_warns_and_is_replaced(tmp_path: Path) -> None:
    tuned(sleeper(), tmp_path)(10)
    path = cache_files(tmp_path)[0]
    path.write_text('{"best": 1, "trunc')
    calls: list[float] = []
    fn = tuned(sleeper(calls), tmp_path)
    with pytest.warns(AutotuneCacheWarning, match="corrupt JSON"):
        assert fn(10) == pytest.approx(FAST * 10)
    assert set(calls) == set(DELAYS)
    assert json.loads(path.read_text())["best"] == 1


def test_foreign_cache_content_warns_and_is_replaced(tmp_path: Path) -> None:
    tuned(sleeper(), tmp_path)(10)
    path = cache_files(tmp_path)[0]
    entry = json.loads(path.read_text())
    path.write_text(json.dumps({**entry, "best": 7}))
    with pytest.warns(AutotuneCacheWarning, match="'best' is 7"):
        tuned(sleeper(), tmp_path)(10)
    path.write_text(json.dumps({**entry, "device": "elsewhere"}))
    with pytest.warns(AutotuneCacheWarning, match="field 'device'"):
        tuned(sleeper(), tmp_path)(10)


def test_env_cache_dir_force_retune_and_print(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "from-env"
    monkeypatch.setenv("TUNETABLE_CACHE_DIR", str(folder))
    tuned(sleeper(), None)(10)
    assert len(cache_files(folder)) == 1
    monkeypatch.setenv("TUNETABLE_FORCE_RETUNE", "1")
    monkeypatch.setenv("TUNETABLE_PRINT_AUTOTUNING", "1")
    calls: list[float] = []
    tuned(sleeper(calls), None)(10)
    assert set(calls) == set(DELAYS)  # the cached entry was ignored
    err = capsys.readouterr().err
    assert "3 configurations" in err and "* [1]" in err


def test_written_arguments_are_restored_between_trials(tmp_path: Path) -> None:
    seen: list[float] = []

    def accumulate(out: np.ndarray, n: int, *, config: float) -> np.ndarray:
        seen.append(float(out[0]))
        time.sleep(config)
        out += config  # writes its output in place
        return out

    fn = tuned(accumulate, tmp_path, restore_value=["out"])
    out = np.full(4, 100.0)
    fn(out, 4)
    assert set(seen) == {100.0}  # every trial run started from the caller's data
    np.testing.assert_allclose(out, 100.0 + FAST)  # then exactly one real run


def test_prune_limits_the_trials_and_may_not_empty_them(tmp_path: Path) -> None:
    calls: list[float] = []
    fn = tuned(sleeper(calls), tmp_path, prune=lambda configs, args: [c for c in configs if c >= 0.004])
    assert fn(10) == pytest.approx(0.004 * 10)
    assert set(calls) == {0.004, 0.016}
    empty = tuned(sleeper(), tmp_path / "empty", prune=lambda configs, args: [])
    with pytest.raises(AutotuneError, match="prune left no configuration"):
        empty(10)


def test_failed_and_wrong_configurations_cannot_win(tmp_path: Path) -> None:
    def flaky(n: int, *, config: float) -> float:
        if config == FAST:
            raise RuntimeError("too many resources requested for launch")
        time.sleep(config)
        return config

    fn = tuned(flaky, tmp_path)
    assert fn(10) == 0.004
    statuses = {t.config: (t.status, t.error) for t in fn.trials[fn.key_of((10,), {})]}
    assert statuses[repr(FAST)][0] == "failed" and "too many resources" in statuses[repr(FAST)][1]

    results: dict[str, float] = {}

    def wrong_when_fast(out: dict[str, float], *, config: float) -> None:
        time.sleep(config)
        out["value"] = -1.0 if config == FAST else 1.0

    checked = tuned(wrong_when_fast, tmp_path / "verify", key=[], verify=lambda args: args["out"]["value"] > 0)
    checked(results)
    assert results["value"] == 1.0
    trial = {t.config: t.status for t in next(iter(checked.trials.values()))}
    assert trial[repr(FAST)] == "verify"

    def broken(n: int, *, config: float) -> None:
        raise RuntimeError("boom")

    with pytest.raises(AutotuneError, match="every configuration failed"):
        tuned(broken, tmp_path / "broken")(10)


def _tune_in_process(cache_dir: str) -> tuple[float, bool]:
    """Worker of the concurrency test: tune the same key as its siblings."""
    fn = tuned(sleeper(), Path(cache_dir))
    value = fn(10)
    return value, bool(fn.trials)


@pytest.mark.slow
def test_concurrent_processes_tune_once_and_agree(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        outcomes = pool.map(_tune_in_process, [str(tmp_path)] * 4)
    assert all(value == pytest.approx(FAST * 10) for value, _ in outcomes)
    assert sum(tuned_here for _, tuned_here in outcomes) == 1  # the others read its entry
    files = cache_files(tmp_path)
    assert len(files) == 1 and json.loads(files[0].read_text())["best"] == 1
    assert not list(tmp_path.glob(".*.tmp"))  # no torn temp files left behind


def test_close_to_rejects_a_configuration_with_wrong_output(tmp_path: Path) -> None:
    from tunetable.kernels.autotune import close_to

    a = np.arange(12, dtype=np.float64).reshape(3, 4)

    def scaled(x: np.ndarray, out: np.ndarray, *, config: float) -> None:
        time.sleep(config)
        out[...] = x * (3.0 if config == FAST else 2.0)  # the fastest configuration is wrong

    fn = tuned(scaled, tmp_path, key=[], restore_value=["out"], verify=close_to(lambda args: {"out": args["x"] * 2.0}))
    out = np.zeros_like(a)
    fn(a, out)
    np.testing.assert_allclose(out, a * 2.0)
    statuses = {t.config: t.status for t in next(iter(fn.trials.values()))}
    assert statuses == {repr(0.016): "ok", repr(FAST): "verify", repr(0.004): "ok"}


class FakeColdL2Timer:
    """ColdL2Timer's three calls, on the host: records the order of timed batches; a launch may raise."""

    def __init__(self, *, per_launch_ms: dict[int, float], broken_at: dict[int, int] | None = None) -> None:
        self.per_launch_ms = per_launch_ms
        self.broken_at = broken_at or {}
        self.timed: list[int] = []

    def warm_up(self, launch, *, sets: int, warmup_ms: float) -> tuple[int, float]:
        launch(0)
        return 1, self.per_launch_ms[launch.index]

    def batch_size(self, per_launch_ms: float, *, min_batch_ms: float) -> int:
        return 4

    def sample(self, launch, *, sets: int, batch: int) -> float:
        if self.timed.count(launch.index) == self.broken_at.get(launch.index, -1):
            raise RuntimeError("launch failed")
        self.timed.append(launch.index)
        return self.per_launch_ms[launch.index]


def _launches(indices):
    made = {}
    for index in indices:
        def launch_on(i: int) -> None:
            return None
        launch_on.index = index
        made[index] = launch_on
    return made


def test_cold_l2_rounds_interleave_the_configurations_in_a_rotating_order() -> None:
    from tunetable.kernels.autotune import interleaved_samples

    timer = FakeColdL2Timer(per_launch_ms={0: 1.0, 1: 2.0, 2: 3.0})
    restores = []
    samples, errors = interleaved_samples(_launches([0, 1, 2]), timer=timer, sets=2, warmup_ms=1.0, rounds=4,
                                          min_batch_ms=0.1, before=lambda: restores.append(1))
    # Round r starts one configuration further on: 0 1 2, 1 2 0, 2 0 1, 0 1 2.
    assert timer.timed == [0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 1, 2]
    assert samples == {0: [1.0] * 4, 1: [2.0] * 4, 2: [3.0] * 4} and errors == {}
    assert len(restores) == 12   # the written arguments restored before every batch


def test_a_configuration_that_fails_while_timed_drops_out_and_the_others_finish() -> None:
    from tunetable.kernels.autotune import interleaved_samples

    timer = FakeColdL2Timer(per_launch_ms={0: 1.0, 1: 2.0}, broken_at={1: 1})   # config 1's second batch fails
    samples, errors = interleaved_samples(_launches([0, 1]), timer=timer, sets=2, warmup_ms=1.0, rounds=3,
                                          min_batch_ms=0.1)
    assert samples == {0: [1.0, 1.0, 1.0]} and errors == {1: "RuntimeError: launch failed"}
