"""``@autotune``: Triton/QuACK-style tuning on first call, cached on disk per key.

    @autotune(configs=[cfg_a, cfg_b], key=["m", "n", "k"], restore_value=["out"])
    def matmul(a, b, out, m, n, k, *, config): ...

For the project's GEMMs the function is typically ``tunetable.kernels.gemm_with(config, a, b, out=out,
family=...)``: configurations are lower-case tunables of gemm_mma (the default) or of gemm_wgmma
(``family="gemm_wgmma"``; the family's ``tunables`` dataclass in kernels/families/<name>/family.py names the keys).

On the first call for a new key value every configuration (after ``prune``) runs once, is
checked by ``verify`` (when given), and is timed (by ``timer``, one configuration after the other, else the
bench's own cold-L2 method, tunetable.kernels.runtime.timing, over copies of the call's device arrays, with
the bench's rounds interleaved across the configurations: ``interleaved_samples``); the fastest by median wins and
is remembered in memory and in a JSON file under the cache folder. The file name is a hash of
the function's name, the device, the source hash (the function's own source plus every file
in ``sources``), the key values and the configuration list, so a change to any of them tunes
again, and only that entry. Arguments named in ``restore_value`` are copied before tuning and
copied back before every trial and after tuning, so trials never see each other's writes and
the real call sees the caller's data.

Environment:

| Variable | Effect |
| --- | --- |
| ``TUNETABLE_PRINT_AUTOTUNING=1`` | print each configuration's median and the winner (stderr) |
| ``TUNETABLE_CACHE_DIR`` | cache folder (default ``$XDG_CACHE_HOME/tunetable/autotune``) |
| ``TUNETABLE_FORCE_RETUNE=1`` | ignore cached choices: tune again and overwrite them |

Several processes may tune the same key at once: the first takes a file lock, tunes and writes
the entry atomically; the others wait on the lock, then read its choice. A cache file that cannot
be read is reported with a warning and replaced, never fatal.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tunetable.atomic import atomic_write_text
from tunetable.kernels.autotune_trials import (  # noqa: F401  (re-exported: users import them from here)
    cai_nbytes,
    close_to,
    device_l2_bytes,
    interleaved_samples,
    relative_error,
    restore,
    snapshot,
    to_numpy,
    wall_clock_timer,
)
from tunetable.kernels.jit import canonical_json, kernel_source_hash, sha256_text
from tunetable.kernels.runtime.timing import ColdL2Timer, input_sets

SCHEMA = 1
PRINT_ENV = "TUNETABLE_PRINT_AUTOTUNING"
CACHE_DIR_ENV = "TUNETABLE_CACHE_DIR"
FORCE_ENV = "TUNETABLE_FORCE_RETUNE"

# timer(launch, warmup_ms=, rounds=, reset=) -> every timed sample in milliseconds; reset, when
# not None, must run before every launch outside the timed region (it restores written arguments)
Timer = Callable[..., Sequence[float]]


class AutotuneCacheWarning(UserWarning):
    """An autotune cache file could not be used (corrupt or foreign); it is ignored and rewritten."""


class AutotuneError(RuntimeError):
    """No configuration could be chosen (all pruned, or all failed)."""


@dataclass(frozen=True)
class Trial:
    """One configuration's outcome while tuning: timings, or the reason it cannot be chosen."""

    index: int
    config: str
    status: str  # "ok" | "failed" | "verify"
    median_ms: float | None
    samples_ms: tuple[float, ...] = ()
    error: str | None = None


# --- values, keys and cache files (pure) -------------------------------------------------------

def config_text(config: Any) -> str:
    """A configuration's stable text: canonical JSON of its fields where it has any, else repr."""
    if hasattr(config, "as_dict"):
        return canonical_json(config.as_dict())
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return canonical_json(dataclasses.asdict(config))
    if isinstance(config, Mapping):
        return canonical_json(dict(config))
    return repr(config)


def key_value(value: Any) -> Any:
    """The part of an argument that selects a tuning: scalars as they are, arrays by shape and dtype."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return ["array", [int(dim) for dim in shape], str(dtype)]
    return repr(value)


def cache_digest(*, function: str, device: str, source_hash: str, key: Sequence[Any], configs: Sequence[str]) -> str:
    """Hash naming one cache entry: function, device, source, key values and configuration list."""
    payload = {
        "schema": SCHEMA, "function": function, "device": device, "source": source_hash,
        "key": list(key), "configs": list(configs),
    }
    return sha256_text(canonical_json(payload))[:24]


def default_cache_dir() -> Path:
    """$TUNETABLE_CACHE_DIR, else $XDG_CACHE_HOME/tunetable/autotune (never the working directory)."""
    explicit = os.environ.get(CACHE_DIR_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "tunetable" / "autotune"


def _flag(name: str) -> bool:
    """Whether environment variable ``name`` is set to anything but empty, 0, false or no (any case)."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def read_entry(path: Path, *, expected: Mapping[str, Any]) -> dict[str, Any] | None:
    """A cache entry whose identity fields equal ``expected``; None when absent, warns when unusable."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        warnings.warn(f"autotune cache {path}: unreadable ({exc}); tuning again", AutotuneCacheWarning, stacklevel=2)
        return None
    try:
        entry = json.loads(text)
    except ValueError as exc:
        warnings.warn(f"autotune cache {path}: corrupt JSON ({exc}); ignoring it and tuning again",
                      AutotuneCacheWarning, stacklevel=2)
        return None
    problem = _entry_problem(entry, expected=expected)
    if problem is not None:
        warnings.warn(
            f"autotune cache {path}: {problem}; ignoring it and tuning again", AutotuneCacheWarning, stacklevel=2
        )
        return None
    return entry


def _entry_problem(entry: Any, *, expected: Mapping[str, Any]) -> str | None:
    """Why a parsed cache entry cannot be used, or None."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    for name, value in expected.items():
        if entry.get(name) != value:
            return f"field '{name}' does not match this function (a hash collision or a hand edit)"
    best = entry.get("best")
    configs = expected.get("configs") or []
    if isinstance(best, bool) or not isinstance(best, int) or not 0 <= best < len(configs):
        return f"'best' is {best!r}, not an index into the {len(configs)} configurations"
    return None


def device_key(*, name: str, compute_capability: tuple[int, int]) -> str:
    """The cache's name of a GPU: 'NVIDIA H100 80GB HBM3 (sm_90)'."""
    major, minor = compute_capability
    return f"{name} (sm_{major}{minor})"


def default_device() -> str:
    """The current CUDA device's name and compute capability, or 'cpu' where pycuda is absent."""
    try:
        import pycuda.driver as cuda  # lazy and optional: 'cpu' where pycuda is absent
    except ImportError:
        return "cpu"
    try:
        cuda.init()
        device = cuda.Context.get_device() if cuda.Context.get_current() is not None else cuda.Device(0)
        return device_key(name=device.name(), compute_capability=device.compute_capability())
    except cuda.Error:
        return "cpu"


# --- the decorator -----------------------------------------------------------------------------

class Autotuner:
    """A function that picks one of ``configs`` per key value on first use (see module docstring)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        configs: Sequence[Any],
        key: Sequence[str],
        prune: Callable[[list[Any], Mapping[str, Any]], Sequence[Any]] | None = None,
        restore_value: Sequence[str] = (),
        verify: Callable[[Mapping[str, Any]], bool] | None = None,
        timer: Timer | None = None,
        warmup_ms: float = 25.0,
        rounds: int = 20,
        sources: Sequence[str | Path] = (),
        device: str | Callable[[], str] | None = None,
        cache_dir: str | Path | None = None,
        config_arg: str = "config",
        l2_factor: float = 3.0,
        min_batch_ms: float = 0.3,
    ):
        if not configs:
            raise ValueError("autotune: configs must not be empty")
        self.fn = fn
        self.configs = list(configs)
        self.config_texts = [config_text(config) for config in self.configs]
        self.key = list(key)
        self.prune = prune
        self.restore_value = list(restore_value)
        self.verify = verify
        self.timer = timer
        self.warmup_ms = warmup_ms
        self.rounds = rounds
        self.l2_factor = l2_factor
        self.min_batch_ms = min_batch_ms
        self.sources = [Path(source) for source in sources]
        self.device = device
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.config_arg = config_arg
        self.name = f"{fn.__module__}.{fn.__qualname__}"
        self.signature = inspect.signature(fn)
        self.positions = {name: index for index, name in enumerate(self.signature.parameters)}
        unknown = [name for name in [*self.key, *self.restore_value] if name not in self.positions]
        if unknown:
            raise ValueError(f"autotune({self.name}): {', '.join(unknown)} not among the function's arguments")
        self.best: dict[tuple[Any, ...], Any] = {}  # key values -> chosen configuration
        self.trials: dict[tuple[Any, ...], list[Trial]] = {}  # what each tuning measured (this process)
        self.cache_hits = 0
        self._source_hash: str | None = None
        self._device_text: str | None = None
        functools.update_wrapper(self, fn)

    # -- per call ----------------------------------------------------------------------------

    def _argument(self, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        """The value of argument ``name`` in a call: by keyword, else by position, else its default."""
        if name in kwargs:
            return kwargs[name]
        position = self.positions[name]
        if position < len(args):
            return args[position]
        return self.signature.parameters[name].default

    def key_of(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
        """The tuning key of a call: the named arguments' values (arrays by shape and dtype)."""
        return tuple(json.dumps(key_value(self._argument(name, args, kwargs))) for name in self.key)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = self.key_of(args, kwargs)
        config = self.best.get(key)
        if config is None:
            config = self._choose(key, args, kwargs)
        kwargs[self.config_arg] = config
        return self.fn(*args, **kwargs)

    # -- identity ----------------------------------------------------------------------------

    def source_hash(self) -> str:
        """Hash of the function's own source and of every file in ``sources`` (with its includes)."""
        if self._source_hash is None:
            try:
                own = inspect.getsource(self.fn)
            except (OSError, TypeError):
                own = self.name
            parts = [sha256_text(own)] + [kernel_source_hash(path) for path in self.sources]
            self._source_hash = sha256_text("\n".join(parts))[:16]
        return self._source_hash

    def device_text(self) -> str:
        """The device the choice is valid for."""
        if self._device_text is None:
            device = self.device
            self._device_text = device() if callable(device) else (device or default_device())
        return self._device_text

    def cache_path(self, key: tuple[Any, ...]) -> Path:
        """The cache file of one key value."""
        digest = cache_digest(
            function=self.name, device=self.device_text(), source_hash=self.source_hash(),
            key=list(key), configs=self.config_texts,
        )
        folder = self.cache_dir if self.cache_dir is not None else default_cache_dir()
        return folder / f"{self.fn.__qualname__.replace('<', '').replace('>', '')}-{digest}.json"

    def _identity(self, key: tuple[Any, ...]) -> dict[str, Any]:
        """The identity fields of ``key``'s cache entry: schema, function, device, source hash, key, configs."""
        return {
            "schema": SCHEMA, "function": self.name, "device": self.device_text(),
            "source_hash": self.source_hash(), "key": list(key), "configs": self.config_texts,
        }

    # -- choosing ----------------------------------------------------------------------------

    def _choose(self, key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The configuration of ``key``: from its cache file, else tuned now under a file lock and written."""
        from filelock import FileLock  # lazy: only a tuning needs it, never an import or a cached choice

        path = self.cache_path(key)
        identity = self._identity(key)
        force = _flag(FORCE_ENV)
        entry = None if force else read_entry(path, expected=identity)
        if entry is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(path) + ".lock"):
                # Another process may have finished tuning while this one waited for the lock.
                entry = None if force else read_entry(path, expected=identity)
                if entry is None:
                    entry = self._tune(key, args, kwargs, identity=identity)
                    atomic_write_text(path, json.dumps(entry, indent=1, sort_keys=True) + "\n")
                else:
                    self.cache_hits += 1
        else:
            self.cache_hits += 1
        config = self.configs[entry["best"]]
        self.best[key] = config
        return config

    def _bound(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Every argument of a call by name, defaults applied."""
        bound = self.signature.bind_partial(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)

    def _tune(
        self, key: tuple[Any, ...], args: tuple[Any, ...], kwargs: dict[str, Any], *, identity: dict[str, Any]
    ) -> dict[str, Any]:
        """Run, verify and time every (pruned) configuration; the cache entry of the winner."""
        named = self._bound(args, kwargs)
        candidates = list(range(len(self.configs)))
        if self.prune is not None:
            kept = {config_text(config) for config in self.prune(list(self.configs), named)}
            candidates = [index for index in candidates if self.config_texts[index] in kept]
            if not candidates:
                raise AutotuneError(f"autotune({self.name}): prune left no configuration for key {list(key)}")
        saved = {name: snapshot(named[name]) for name in self.restore_value}
        started = time.perf_counter()
        sets = self._input_sets(args, kwargs) if self.timer is None and len(candidates) > 1 else []
        if len(candidates) == 1:
            trials = [Trial(index=candidates[0], config=self.config_texts[candidates[0]], status="ok", median_ms=None)]
        elif self.timer is not None:
            trials = [self._trial(index, args, kwargs, named, saved) for index in candidates]
        else:
            trials = self._interleaved_trials(candidates, args, kwargs, named, saved, sets)
        for name, value in saved.items():
            restore(named[name], value)
        elapsed = time.perf_counter() - started
        self.trials[key] = trials
        ok = [trial for trial in trials if trial.status == "ok"]
        failed = len(trials) - len(ok)
        if failed:
            print(
                f"autotune({self.name}): {failed}/{len(trials)} configurations failed for key {list(key)}",
                file=sys.stderr,
            )
        if not ok:
            reasons = "; ".join(f"{trial.config}: {trial.status}: {trial.error}" for trial in trials[:3])
            raise AutotuneError(f"autotune({self.name}): every configuration failed for key {list(key)} ({reasons})")
        # Fastest median; equal medians go to the earlier configuration (deterministic).
        winner = min(ok, key=lambda trial: (trial.median_ms if trial.median_ms is not None else 0.0, trial.index))
        if _flag(PRINT_ENV):
            self._print(key, trials, winner, elapsed)
        return {
            **identity,
            "best": winner.index,
            "best_config": winner.config,
            "tuning_s": round(elapsed, 6),
            "trials": [dataclasses.asdict(trial) for trial in trials],
        }

    def _restorer(self, named: Mapping[str, Any], saved: Mapping[str, Any]) -> Callable[[], None]:
        """A function that restores every saved argument to its value from before the trials."""
        def restore_all() -> None:
            for name, value in saved.items():
                restore(named[name], value)
        return restore_all

    def _verified(self, index: int, args: tuple[Any, ...], kwargs: dict[str, Any], named: Mapping[str, Any],
                  restore_all: Callable[[], None]) -> Trial | None:
        """Run one configuration once on restored inputs and verify it: None when it passed, else its failed Trial."""
        text = self.config_texts[index]
        try:
            restore_all()
            self.fn(*args, **{**kwargs, self.config_arg: self.configs[index]})
            if self.verify is not None and not self.verify(named):
                return Trial(index=index, config=text, status="verify", median_ms=None,
                             error="output failed verification")
        except Exception as exc:  # a configuration that cannot run is a failed trial, not a crash
            return Trial(index=index, config=text, status="failed", median_ms=None,
                         error=f"{type(exc).__name__}: {exc}")
        return None

    def _trial(
        self, index: int, args: tuple[Any, ...], kwargs: dict[str, Any], named: Mapping[str, Any],
        saved: Mapping[str, Any]
    ) -> Trial:
        """Run one configuration once (restored inputs), verify it, then time it with the user's ``timer``."""
        restore_all = self._restorer(named, saved)
        failed = self._verified(index, args, kwargs, named, restore_all)
        if failed is not None:
            return failed
        call_kwargs = {**kwargs, self.config_arg: self.configs[index]}

        def launch() -> None:
            self.fn(*args, **call_kwargs)

        try:
            timed = self.timer(launch, warmup_ms=self.warmup_ms, rounds=self.rounds,
                               reset=restore_all if saved else None)
            samples = [float(value) for value in timed]
        except Exception as exc:  # as in _verified
            return Trial(index=index, config=self.config_texts[index], status="failed", median_ms=None,
                         error=f"{type(exc).__name__}: {exc}")
        return Trial(index=index, config=self.config_texts[index], status="ok", median_ms=statistics.median(samples),
                     samples_ms=tuple(samples))

    def _interleaved_trials(
        self, candidates: Sequence[int], args: tuple[Any, ...], kwargs: dict[str, Any], named: Mapping[str, Any],
        saved: Mapping[str, Any], sets: Sequence[tuple[tuple[Any, ...], dict]]
    ) -> list[Trial]:
        """Verify every configuration, then time those that passed with the bench's cold-L2 method, rounds
        interleaved across them (``interleaved_samples``)."""
        import pycuda.driver as cuda  # lazy: only a GPU tuning gets here

        restore_all = self._restorer(named, saved)
        failed = {index: trial for index in candidates
                  if (trial := self._verified(index, args, kwargs, named, restore_all)) is not None}

        def launcher(config: Any) -> Callable[[int], None]:
            def launch_on(i: int) -> None:
                """One launch on input set ``i`` (the call's arrays, or the i-th copy of them)."""
                set_args, set_kwargs = sets[i]
                self.fn(*set_args, **{**set_kwargs, self.config_arg: config})
            return launch_on

        launches = {index: launcher(self.configs[index]) for index in candidates if index not in failed}
        timer = ColdL2Timer(cuda=cuda, stream=None)   # the legacy default stream, where gemm() and torch launch
        samples, errors = interleaved_samples(launches, timer=timer, sets=len(sets), warmup_ms=self.warmup_ms,
                                              rounds=self.rounds, min_batch_ms=self.min_batch_ms,
                                              before=restore_all if saved else None)
        trials = []
        for index in candidates:
            text = self.config_texts[index]
            if index in failed:
                trials.append(failed[index])
            elif index in errors:
                trials.append(Trial(index=index, config=text, status="failed", median_ms=None, error=errors[index]))
            else:
                found = samples[index]
                trials.append(Trial(index=index, config=text, status="ok", median_ms=statistics.median(found),
                                    samples_ms=tuple(found)))
        return trials

    def _input_sets(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[tuple[tuple[Any, ...], dict]]:
        """The call's arguments, then copies of its device arrays, until the sets exceed l2_factor x L2.

        The bench's cold-L2 rule: each timed launch reads a set the L2 no longer holds. Made once per
        tuning (``_tune`` keeps them for its trials); restore_value arguments are restored in the call's
        own set, before each timed batch.
        """
        bound = self.signature.bind_partial(*args, **kwargs)
        arrays = [name for name, value in bound.arguments.items() if hasattr(value, "__cuda_array_interface__")]
        set_bytes = sum(cai_nbytes(bound.arguments[name]) for name in arrays)
        count = input_sets(set_bytes=set_bytes, l2_bytes=device_l2_bytes(), l2_factor=self.l2_factor) if arrays else 1
        sets = [(tuple(args), dict(kwargs))]
        for _ in range(count - 1):
            copy = self.signature.bind_partial(*args, **kwargs)
            for name in arrays:
                copy.arguments[name] = snapshot(bound.arguments[name])
            sets.append((copy.args, copy.kwargs))
        return sets

    def _print(self, key: tuple[Any, ...], trials: Sequence[Trial], winner: Trial, elapsed: float) -> None:
        """Print each trial's median time (the winner starred) to stderr."""
        lines = [f"autotune {self.name} key={list(key)}: {len(trials)} configurations in {elapsed:.3f} s"]
        for trial in trials:
            timing = f"{trial.median_ms:.4f} ms" if trial.median_ms is not None else trial.status
            mark = "*" if trial is winner else " "
            lines.append(f" {mark} [{trial.index}] {timing}  {trial.config}")
        print("\n".join(lines), file=sys.stderr)


def autotune(
    *,
    configs: Sequence[Any],
    key: Sequence[str],
    prune: Callable[[list[Any], Mapping[str, Any]], Sequence[Any]] | None = None,
    restore_value: Sequence[str] = (),
    verify: Callable[[Mapping[str, Any]], bool] | None = None,
    timer: Timer | None = None,
    warmup_ms: float = 25.0,
    rounds: int = 20,
    sources: Sequence[str | Path] = (),
    device: str | Callable[[], str] | None = None,
    cache_dir: str | Path | None = None,
    config_arg: str = "config",
    l2_factor: float = 3.0,
    min_batch_ms: float = 0.3,
) -> Callable[[Callable[..., Any]], Autotuner]:
    """Decorate ``fn(..., config=...)`` so each new key value tunes once and is cached on disk.

    ``prune(configs, named_args)`` keeps the configurations worth trying; ``restore_value`` names
    arguments the function writes; ``verify(named_args)`` returns False for a wrong result;
    ``timer(launch, warmup_ms=, rounds=, reset=)`` returns samples in ms (``wall_clock_timer`` for
    host functions). Without one, GPU functions are timed the bench's way
    (tunetable.kernels.runtime.timing): copies of the call's device arrays, ``l2_factor`` x L2 in
    all, rotated launch by launch, batches of at least ``min_batch_ms`` held by a spin kernel,
    CUDA events around each batch. ``sources`` are kernel files whose edits must invalidate the
    cache; ``device`` overrides the detected device name.
    """

    def decorate(fn: Callable[..., Any]) -> Autotuner:
        """An Autotuner that tunes ``fn`` with these settings."""
        return Autotuner(
            fn, configs=configs, key=key, prune=prune, restore_value=restore_value, verify=verify,
            timer=timer, warmup_ms=warmup_ms, rounds=rounds, sources=sources, device=device,
            cache_dir=cache_dir, config_arg=config_arg, l2_factor=l2_factor, min_batch_ms=min_batch_ms,
        )

    return decorate
