"""``benchmark()``: replay each distinct sample in isolation, timed by the profiler's own collectors.

The original and each candidate run on exact clones of the sample's inputs, are validated against
the original's output, then timed inside one recorded pass; the replayed kernels are compared with
what the recorded calls launched. Nothing raises mid-run: a failure is a row with ``ok=False`` and
its error (``docs/design.md``, "Replay").
"""

from __future__ import annotations

import math
import numbers
import statistics
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from .. import schema
from ..config import CACHE_STATES, OP_TRACERS
from ..profiler import ModuleFunctionKernelProfiler
from ..results import ProfileResult
from ..results.views import roofline_samples
from ..results.views.frames import with_strings
from ..results.views.reasons import EMPTY_RESULT
from ..schema import BENCHMARK_COLUMNS, ROOFLINE_COLUMNS
from ..tracing import native
from ..tracing.samples import call_key
from .candidates import ORIGINAL, CandidatesArg, normalize_candidates, original_function
from .inputs import MakeTensor, ReplayRefused, clone_exact, compare_outputs, runnable
from .yardstick import RecordedSample, recorded_samples, same_kernels_per_call

Progress = Callable[[int, int, str], None]


@dataclass
class _Row:
    function_name: str
    sample: int
    implementation: str
    calls: int
    recorded_us_per_call: float
    us_per_call: float = math.nan
    speedup: float = math.nan
    kernels_match: bool | None = None
    max_abs_error: float = math.nan
    ok: bool = False
    error: str | None = None
    replay_iqr_us: float = math.nan

    def timed(self, per_call_us: list[float]) -> None:
        """``us_per_call`` and ``replay_iqr_us`` from the kernel time of each timed call."""
        self.us_per_call = statistics.median(per_call_us)
        low, high = np.percentile(per_call_us, [25.0, 75.0])
        self.replay_iqr_us = float(high - low)


WIDE_SPREAD = 0.25  # benchmark() warns where replay_iqr_us exceeds this fraction of us_per_call
_LISTED = 5  # rows the spread warning names


@dataclass
class _Plan:
    """Everything fixed for one benchmark() run."""

    profiler: ModuleFunctionKernelProfiler
    device: str
    recorded: dict[tuple[str, int], RecordedSample]
    candidates: dict[str, dict[str, Callable[..., Any]]]
    repeats: int
    warmup: int
    flush: torch.Tensor | None  # the buffer a cold-cache replay overwrites before each timed call
    make_tensor: MakeTensor | None
    generator: torch.Generator
    sample_keys: dict[str, dict[int, Any]] = field(default_factory=dict)


class _Calls(nn.Module):
    """``count`` calls of one implementation on one set of inputs, as one module forward."""

    def __init__(self, implementation: Callable[..., Any], inputs: tuple[Any, ...], count: int) -> None:
        super().__init__()
        # in a tuple: a candidate that is an nn.Module stays out of the hierarchy, its kernels on this module
        self._implementation = (implementation,)
        self._inputs = inputs
        self.count = count

    def forward(self) -> None:
        (implementation,), (args, kwargs) = self._implementation, self._inputs
        for _ in range(self.count):
            implementation(*args, **kwargs)


_CPU_LAST_LEVEL_CACHE = "/sys/devices/system/cpu/cpu0/cache/index3/size"
_CPU_CACHE_FALLBACK = 32 << 20


def _cpu_last_level_cache() -> int:
    """The CPU's last-level cache in bytes from sysfs (``32768K``), or 0 where it cannot be read."""
    try:
        with open(_CPU_LAST_LEVEL_CACHE) as text:
            value = text.read().strip().upper()
        shift = {"K": 10, "M": 20}.get(value[-1:], 0)
        return int(value[:-1] if shift else value) << shift
    except (OSError, ValueError):
        return 0


def cache_bytes(device: str) -> int:
    """The last-level cache a ``cache="cold"`` replay overwrites twice over before each timed call.

    CUDA's L2 (1 MiB where not reported), else the CPU's from sysfs (32 MiB where unreadable).
    """
    if device.startswith("cuda"):
        properties = torch.cuda.get_device_properties(torch.device(device))
        return int(getattr(properties, "L2_cache_size", 0)) or 1 << 20
    return _cpu_last_level_cache() or _CPU_CACHE_FALLBACK


class _Flush(nn.Module):
    """Overwrites a buffer twice the last-level cache: the next timed call starts with a cold cache."""

    def __init__(self, buffer: torch.Tensor) -> None:
        super().__init__()
        self._buffer = (buffer,)  # in a tuple: not a registered buffer, shared by every flush

    def forward(self) -> None:
        self._buffer[0].zero_()


class _Replay(nn.Module):
    """The recorded pass of a replay: ``warmup`` calls, then each timed call as module ``timed.i``.

    With ``flush``, module ``flush.i`` overwrites it before ``timed.i``. Why the warm-up is inside
    the pass: ``docs/design.md``, "Replay".
    """

    def __init__(
        self,
        implementation: Callable[..., Any],
        inputs: tuple[Any, ...],
        warmup: int,
        repeats: int,
        flush: torch.Tensor | None = None,
    ):
        super().__init__()
        self.warmup = _Calls(implementation, inputs, warmup)
        self.timed = nn.ModuleList(_Calls(implementation, inputs, 1) for _ in range(repeats))
        self.flush = nn.ModuleList(_Flush(flush) for _ in range(repeats)) if flush is not None else None

    def forward(self) -> None:
        self.warmup()
        for i, call in enumerate(self.timed):
            if self.flush is not None:
                self.flush[i]()
            call()


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


# -- validation -------------------------------------------------------------------------------------
def _positive(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return value


def _selected(result: ProfileResult, functions: Iterable[str] | None) -> list[str]:
    available = list(result.function_data)
    if functions is None:
        return available
    if isinstance(functions, (str, bytes)):
        raise TypeError(f"functions must be a list of names such as [{functions!r}], not a single string")
    if not isinstance(functions, Iterable):
        got = f"{type(functions).__name__} {functions!r}"
        raise TypeError(f"functions must be a list of names such as ['linear'] or None; got {got}")
    names = list(dict.fromkeys(functions))
    bad = [name for name in names if not isinstance(name, str)]
    if bad:
        raise TypeError(f"functions must contain function names (strings); got {bad!r}")
    unknown = [name for name in names if name not in result.function_data]
    if unknown:
        raise ValueError(
            f"no samples of {unknown} in this result (it has samples of {available}); profile with those "
            "functions in function_names, or pick from the list"
        )
    return names


def _seed(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"seed must be an integer (it seeds the random inputs); got {type(value).__name__} {value!r}"
        )
    return int(value)


def _callable_or_none(name: str, value: Any, expected: str) -> None:
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be {expected}, or None; got {type(value).__name__}")


def _check_candidates(candidates: dict[str, dict[str, Callable[..., Any]]], selected: list[str]) -> None:
    outside = [name for name in candidates if name not in selected]
    if outside:
        raise ValueError(
            f"candidates for {outside}, which this benchmark does not replay (it replays {selected}); "
            "add them to functions or drop those candidates"
        )


def replay_device(result: ProfileResult) -> str:
    """Where ``result`` was recorded, so where it replays: ``"cuda"`` (RuntimeError without CUDA here) or ``"cpu"``."""
    device = result.metadata.get(schema.META_DEVICE) or ("cpu" if result.source == "cpu" else "cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            "this result was recorded on CUDA and torch.cuda.is_available() is False here; benchmark it on a "
            "machine with a GPU, or profile the model with device='cpu' and benchmark that result"
        )
    return device


def _replay_profiler(result: ProfileResult, device: str) -> ModuleFunctionKernelProfiler:
    tracer = result.metadata.get(schema.META_TRACER)
    if tracer not in OP_TRACERS or (tracer == "native" and not native.available()):
        tracer = None  # the default one; CPU kernel names are op names, the same from both tracers
    return ModuleFunctionKernelProfiler(set(), device=device, op_tracer=tracer)


# -- one sample -------------------------------------------------------------------------------------
def _time(
    plan: _Plan, implementation: Callable[..., Any], inputs: tuple[Any, ...]
) -> tuple[list[float], list[Counter[str]]]:
    """The kernel time of each of the ``repeats`` timed calls, and each call's kernel names."""
    replay = _Replay(implementation, clone_exact(inputs), plan.warmup, plan.repeats, plan.flush)
    with warnings.catch_warnings():  # a replay is timed from its activity: its profiling_df is empty by design
        warnings.filterwarnings("ignore", f"^{EMPTY_RESULT}", RuntimeWarning)
        replayed = plan.profiler.profile_result(replay, warmup_iterations=0)
    names = {f"timed.{i}": i for i in range(plan.repeats)}
    per_call_us = [0.0] * plan.repeats
    kernels: list[Counter[str]] = [Counter() for _ in range(plan.repeats)]
    activity = replayed.activity.select(["module_name", "kernel", "kernel_us"]).to_pydict()
    for module, kernel, kernel_us in zip(activity["module_name"], activity["kernel"], activity["kernel_us"]):
        call = names.get(module)
        if call is not None:  # the warm-up's kernels are left out
            per_call_us[call] += kernel_us
            kernels[call][kernel] += 1
    return per_call_us, kernels


def _run(implementation: Callable[..., Any], inputs: tuple[Any, ...]) -> Any:
    args, kwargs = clone_exact(inputs)
    with torch.no_grad():
        return implementation(*args, **kwargs)


def _original_row(plan: _Plan, row: _Row, original: Callable[..., Any], inputs: tuple[Any, ...]) -> bool:
    """Time the original; returns whether its timed calls launched anything."""
    try:
        per_call_us, kernels = _time(plan, original, inputs)
    except Exception as error:  # noqa: BLE001 - reported in the row, the run goes on
        row.error = f"timing the original raised {_one_line(error)}"
        return False
    row.timed(per_call_us)
    recorded = plan.recorded.get((row.function_name, row.sample))
    if recorded is not None:
        row.kernels_match = all(same_kernels_per_call(recorded, call, 1) for call in kernels)
    row.max_abs_error, row.ok, row.speedup = 0.0, True, 1.0
    return any(kernels)


def _candidate_row(
    plan: _Plan,
    row: _Row,
    candidate: Callable[..., Any],
    inputs: tuple[Any, ...],
    expected: Any,
    original: Counter[str],
) -> None:
    try:
        output = _run(candidate, inputs)
    except Exception as error:  # noqa: BLE001 - reported in the row, the run goes on
        row.error = f"the candidate raised {_one_line(error)}"
        return
    row.max_abs_error, mismatch = compare_outputs(output, expected)
    try:
        per_call_us, kernels = _time(plan, candidate, inputs)
    except Exception as error:  # noqa: BLE001
        row.error = f"timing the candidate raised {_one_line(error)}"
        return
    row.timed(per_call_us)
    if mismatch is not None:
        row.error = f"output differs from the original: {mismatch}"
    elif plan.device == "cpu" and original and not any(kernels):
        row.us_per_call, row.replay_iqr_us, row.error = (
            math.nan,
            math.nan,
            (
                "its timed calls dispatched no aten op, and the CPU activity source times aten ops only (compiled "
                "CPU kernels are invisible to it); benchmark this candidate on CUDA"
            ),
        )
    else:
        row.ok = True


def _sample_rows(plan: _Plan, name: str, index: int, count: int, sample: Any) -> list[_Row]:
    recorded = plan.recorded.get((name, index))
    implementations = [ORIGINAL, *plan.candidates.get(name, {})]
    rows = [
        _Row(name, index, implementation, int(count), recorded.us_per_call if recorded is not None else math.nan)
        for implementation in implementations
    ]
    try:
        original = original_function(name)
        inputs = runnable(sample, plan.make_tensor, plan.generator)
        plan.sample_keys.setdefault(name, {})[index] = call_key(original, inputs[0], inputs[1])
        expected = _run(original, inputs)
    except (LookupError, ReplayRefused) as error:
        return _failed(rows, f"not replayed: {error}")
    except Exception as error:  # noqa: BLE001 - the original itself failed on these inputs
        return _failed(rows, f"the original raised {_one_line(error)}")
    launched = _original_row(plan, rows[0], original, inputs)
    for row in rows[1:]:
        _candidate_row(plan, row, plan.candidates[name][row.implementation], inputs, expected, launched)
        if rows[0].ok and row.us_per_call > 0:
            row.speedup = rows[0].us_per_call / row.us_per_call
    return rows


def _failed(rows: list[_Row], reason: str) -> list[_Row]:
    for row in rows:
        row.error = reason
    return rows


# -- the table --------------------------------------------------------------------------------------
def _frame(rows: list[_Row]) -> pd.DataFrame:
    frame = pd.DataFrame([asdict(row) for row in rows], columns=BENCHMARK_COLUMNS)
    for column in ("sample", "calls"):
        frame[column] = frame[column].astype(np.int64)
    for column in ("recorded_us_per_call", "us_per_call", "speedup", "max_abs_error", "replay_iqr_us"):
        frame[column] = frame[column].astype(float)
    frame["kernels_match"] = frame["kernels_match"].astype("boolean")
    frame["ok"] = frame["ok"].astype(bool)
    return with_strings(frame, ("function_name", "implementation", "error"))


def _with_roofline(table: pd.DataFrame, result: ProfileResult) -> pd.DataFrame:
    """``table`` with ``ROOFLINE_COLUMNS`` of one replayed call at each row's ``us_per_call``."""
    from ..results import work

    found = work.sample_work({name: result.function_data[name] for name in table["function_name"].unique()})
    per_call = table[["function_name", "sample"]].assign(calls=1, kernel_us=table["us_per_call"])
    rates = roofline_samples(per_call, found, result.metadata)
    return pd.concat([table, rates[list(ROOFLINE_COLUMNS)]], axis=1)


def _short_time(us: float) -> str:
    return f"{us:.3g} µs" if us < 1000 else f"{us / 1000:.3g} ms"


def _warn_wide_spread(table: pd.DataFrame) -> None:
    """One warning per benchmark() when the timed calls of some rows spread widely, the widest named first."""
    timed = table[(table["us_per_call"] > 0) & table["replay_iqr_us"].notna()]
    relative = (timed["replay_iqr_us"] / timed["us_per_call"]).sort_values(ascending=False, kind="stable")
    wide = relative[relative > WIDE_SPREAD]
    if wide.empty:
        return
    named = [
        f"{row.function_name} sample {row.sample} {row.implementation} "
        f"(IQR {share:.0%} of {_short_time(row.us_per_call)})"
        for share, row in zip(wide, timed.loc[wide.index].itertuples())
    ]
    more = f" and {len(named) - _LISTED} more" if len(named) > _LISTED else ""
    warnings.warn(
        f"benchmark(): the timed calls of {len(wide)} of {len(table)} rows spread widely (IQR > {WIDE_SPREAD:.0%} "
        f"of the median): {', '.join(named[:_LISTED])}{more}; their us_per_call and speedup are unreliable (a busy "
        "machine, or calls too short to time steadily): rerun on an idle machine or with more repeats",
        RuntimeWarning,
        stacklevel=3,
    )


def weighted_totals(table: pd.DataFrame) -> pd.DataFrame:
    """Per function and implementation, the kernel time the model would see: Σ calls × us_per_call.

    Over the samples whose original replayed; a sample where the candidate is not ``ok`` counts at
    the original's time, as ``activate(..., only=table, min_speedup=None)`` would run it.

    Parameters
    ----------
    table:
        A table returned by :func:`benchmark`.

    Returns
    -------
    pandas.DataFrame
        ``function_name, implementation, samples, calls, fallbacks, weighted_us, speedup``:
        ``fallbacks`` samples ran the original; ``speedup`` is the original's ``weighted_us`` over this one's.
    """
    records = []
    for name, rows in table.groupby("function_name", sort=False):
        original = rows[(rows["implementation"] == ORIGINAL) & rows["ok"]].set_index("sample")
        base = (original["calls"] * original["us_per_call"]).sum()
        for implementation, own in rows.groupby("implementation", sort=False):
            own = own.set_index("sample").reindex(original.index)
            usable = own["ok"].fillna(False).astype(bool)
            times = own["us_per_call"].where(usable, original["us_per_call"])
            weighted = float((original["calls"] * times).sum())
            records.append(
                {
                    "function_name": name,
                    "implementation": implementation,
                    "samples": len(original),
                    "calls": int(original["calls"].sum()),
                    "fallbacks": int((~usable).sum()),
                    "weighted_us": weighted,
                    "speedup": float(base / weighted) if weighted > 0 else math.nan,
                }
            )
    columns = ["function_name", "implementation", "samples", "calls", "fallbacks", "weighted_us", "speedup"]
    return pd.DataFrame(records, columns=columns)


def _weighted_attr(table: pd.DataFrame) -> dict[str, dict[str, float]]:
    totals: dict[str, dict[str, float]] = {}
    for record in weighted_totals(table).itertuples():
        totals.setdefault(record.function_name, {})[record.implementation] = record.weighted_us
    return totals


def benchmark(
    result: ProfileResult,
    functions: Iterable[str] | None = None,
    *,
    candidates: CandidatesArg | None = None,
    repeats: int = 50,
    warmup: int = 5,
    cache: str = "warm",
    make_tensor: MakeTensor | None = None,
    seed: int = 0,
    progress: Progress | None = None,
    roofline: bool = False,
) -> pd.DataFrame:
    """Replay every distinct sample of the selected functions in isolation and time its kernels.

    Parameters
    ----------
    result:
        A live or loaded :class:`~aitune_dispatch.ProfileResult` (without tensors: random inputs of
        the recorded shape, dtype, strides and device).
    functions:
        Names from ``result.function_data`` to replay; None for all of them.
    candidates:
        Per function: ``{"linear": fn}``, ``{"linear": [fn, other]}`` (named by ``__qualname__``) or
        ``{"linear": {"mine": fn}}``; each is called like the original.
    repeats:
        Timed calls per (sample, implementation): ``us_per_call`` is the median of their kernel
        times, ``replay_iqr_us`` their interquartile range; above :data:`WIDE_SPREAD` of the median,
        a RuntimeWarning names the widest rows.
    warmup:
        Untimed calls before them.
    cache:
        ``"warm"``: timed calls back to back; ``"cold"``: a buffer twice the last-level cache
        (:func:`cache_bytes`) is overwritten, untimed, before each timed call.
    make_tensor:
        Builds a tensor from each saved TensorMeta (integer / bool inputs of a result saved
        without tensors); default: random normal floating point, integers refused.
    seed:
        Seeds those random tensors.
    progress:
        Called as ``progress(done, total, label)`` after each (function, sample).
    roofline:
        Add ``schema.ROOFLINE_COLUMNS`` for one call at each row's ``us_per_call`` (the sample's
        FLOPs and bytes per call, the rates and the fraction of the GPU's bound it reaches), so a
        candidate's gain reads against what is left (``docs/api.md``, "Worth optimizing").

    Returns
    -------
    pandas.DataFrame
        One row per (function, sample, implementation), columns :data:`BENCHMARK_COLUMNS` (then the
        roofline's where asked);
        ``attrs["weighted"]`` holds :func:`weighted_totals`' ``weighted_us`` per function and
        implementation, ``attrs["sample_keys"]`` lets :func:`activate` route by sample.
    """
    if not isinstance(result, ProfileResult):
        raise TypeError(
            f"benchmark needs a ProfileResult (profiler.last_result or load(path)); got {type(result).__name__}"
        )
    selected = _selected(result, functions)
    named = normalize_candidates(candidates)
    _check_candidates(named, selected)
    _callable_or_none("progress", progress, "a callable such as lambda done, total, label: ...")
    _callable_or_none("make_tensor", make_tensor, "a callable that takes a TensorMeta and returns a tensor")
    generator = torch.Generator().manual_seed(_seed(seed))
    device = replay_device(result)
    if cache not in CACHE_STATES:
        raise ValueError(f"cache must be one of {CACHE_STATES}; got {cache!r}")
    flush = None
    if cache == "cold":
        flush = torch.empty(2 * cache_bytes(device), dtype=torch.uint8, device=device)
    plan = _Plan(
        profiler=_replay_profiler(result, device),
        device=device,
        recorded=recorded_samples(result),
        candidates=named,
        repeats=_positive("repeats", repeats, 1),
        warmup=_positive("warmup", warmup, 0),
        flush=flush,
        make_tensor=make_tensor,
        generator=generator,
    )
    work = [(name, index, entry) for name in selected for index, entry in enumerate(result.function_data[name])]
    rows: list[_Row] = []
    for done, (name, index, (count, sample)) in enumerate(work, start=1):
        rows += _sample_rows(plan, name, index, count, sample)
        if progress is not None:
            progress(done, len(work), f"{name} sample {index}")
    table = _frame(rows)
    if roofline:
        table = _with_roofline(table, result)
    _warn_wide_spread(table)
    table.attrs["weighted"] = _weighted_attr(table)
    table.attrs["sample_keys"] = plan.sample_keys
    table.attrs["device"], table.attrs["repeats"], table.attrs["cache"] = device, plan.repeats, cache
    return table


def benchmarked_samples(
    table: pd.DataFrame, function_name: str, implementation: str
) -> tuple[pd.DataFrame, Mapping[int, Any]]:
    """One implementation's rows of one function in a :func:`benchmark` table, and ``sample -> call key``.

    A ValueError where the table has no such rows or lost its ``attrs`` (a CSV copy).
    """
    keys: Mapping[str, Mapping[int, Any]] | None = table.attrs.get("sample_keys")
    if keys is None:
        raise ValueError(
            "only= needs the DataFrame returned by benchmark(): this one has no attrs['sample_keys'] (a copy "
            "read back from CSV loses them); run benchmark() again and pass its result"
        )
    rows = table[(table["function_name"] == function_name) & (table["implementation"] == implementation)]
    if rows.empty:
        present = sorted(set(table.loc[table["function_name"] == function_name, "implementation"]))
        raise ValueError(
            f"only= has no rows for implementation {implementation!r} of {function_name!r} (it has {present}); "
            f"benchmark that candidate first, or name it as in the benchmark: {{{function_name!r}: {{'name': fn}}}}"
        )
    return rows, keys.get(function_name, {})
