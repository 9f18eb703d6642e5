"""The CUDA activity source: CUPTI kernel, copy and set records, each linked to its op by the launch
callback (or, with ``correlation="push"``, by external correlation ids pushed per op), on the host clock
(``docs/design.md``, "Correlation: what CUPTI needs", "Coexistence with torch.profiler" and "The clock")."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import time
import warnings
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import torch

from .. import schema
from ..schema import SCOPE_BASE
from . import devices, libcupti
from .base import Activity, torch_profiler_active
from .clock import HostClock, host_clock
from .decoded import API_DRIVER, API_RUNTIME, DecodedRecords

__all__ = [
    "CANARY_ID",
    "PRIME_ID",
    "SCOPE_BASE",
    "CuptiSource",
    "HostClock",
    "RecordSink",
    "cuda_driver_loaded",
    "host_clock",
    "libcupti_correlation_functions",
    "load_cupti",
]
MIN_CALIBRATION_NS = 5_000_000
# beyond both ranges (negative as int64), so it can never collide with them
CANARY_ID = 2**63 + 1
PRIME_ID = 2**63 + 2  # the kernel start() launches once collection is on; its records are dropped
_API_RECORDS_WE_NEED = re.compile(r"^(cuda|cu|cu64)(Launch|Memcpy|Memset|GraphLaunch)")
BUFFER_BYTES = 8 * 1024 * 1024
_VERSION_SUFFIX = re.compile(r"_v\d{4,}$")  # cupti's "cudaLaunchKernel_v7000"; Kineto writes "cudaLaunchKernel"


class RecordSink(Protocol):
    """A decoder backend: owns the CUPTI buffer callbacks and turns buffers into columns."""

    name: str

    def register(self) -> None:
        """Register this backend's buffer callbacks with CUPTI and forget older records."""

    def take(self) -> DecodedRecords:
        """Every record delivered since :meth:`register`, decoded (call after a forced flush)."""

    # optional: ``release()``, called once the collection is flushed and disabled, to undo what
    # ``register`` set in CUPTI; ``warnings``, what the last take() could not decode, in words (the sink warns them)


def load_cupti() -> Any:
    """The ``cupti.cupti`` bindings, or a RuntimeError that says how to get them.

    The installed cupti-python must be of torch's CUDA major (12.6+ or 13.x); that is checked before
    it is imported, since one of the other major would load a second libcupti beside torch's."""
    major = libcupti.torch_cuda_major()
    problem = libcupti.cupti_python_problem(major, libcupti.cupti_python_version())
    if problem is not None:
        raise RuntimeError(f"the CUDA activity source cannot start: {problem}; or pass device='cpu'")
    try:
        from cupti import cupti
    except ImportError as error:  # missing wheel, or a libcupti that cannot load
        raise RuntimeError(
            f"the CUDA activity source needs cupti-python of your torch's CUDA major ({error}); install it with "
            f"{libcupti.install_hint(major)}, or pass device='cpu'"
        ) from error
    return cupti


def cuda_driver_loaded() -> bool:
    """Whether the CUDA driver (``libcuda.so.1``) is mapped in this process, which any libcupti call
    needs: without one libcupti 13.0 and 13.5 answer an error, but 13.2 overflows its stack (SIGSEGV).
    Maps nothing (``RTLD_NOLOAD``); once torch has looked for a GPU the driver is mapped where there is one."""
    try:
        ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOW | os.RTLD_NOLOAD)
    except OSError:
        return False
    return True


def libcupti_correlation_functions() -> tuple[int, int]:
    """``(push, pop)``: ``cuptiActivityPush/PopExternalCorrelationId`` in the libcupti already loaded,
    for the native tracer; RuntimeError where none is loaded or it lacks them. Only resolves them
    (nothing is called): calling them needs a driver (:func:`cuda_driver_loaded`)."""
    soname = libcupti.loaded_libcupti()
    if soname is None:
        raise RuntimeError(
            "no libcupti (libcupti.so.12 or libcupti.so.13) is loaded in this process; start the CUPTI activity "
            "source first"
        )
    # RTLD_NOLOAD: a handle only to the copy already loaded (it stays loaded by its owner)
    library = ctypes.CDLL(soname, mode=os.RTLD_NOW | os.RTLD_NOLOAD)
    try:
        push = ctypes.cast(library.cuptiActivityPushExternalCorrelationId, ctypes.c_void_p).value
        pop = ctypes.cast(library.cuptiActivityPopExternalCorrelationId, ctypes.c_void_p).value
    except AttributeError:
        push = pop = None
    if not push or not pop:
        raise RuntimeError(f"{soname} lacks cuptiActivityPush/PopExternalCorrelationId")
    return push, pop


@functools.lru_cache(maxsize=4)
def _api_callback_ids(enum: Any) -> tuple[tuple[int, ...], frozenset[int]]:
    """All valid callback ids of a runtime/driver enum, and the launch/copy/set subset (once per enum)."""
    every, needed = [], []
    for name, member in enum.__members__.items():
        if name in ("INVALID", "SIZE", "FORCE_INT"):
            continue
        every.append(int(member))
        if _API_RECORDS_WE_NEED.match(name):
            needed.append(int(member))
    return tuple(every), frozenset(needed)


@functools.lru_cache(maxsize=4)
def callback_names(cupti: Any) -> dict[tuple[int, int], str]:
    """``(API_RUNTIME | API_DRIVER, cbid) -> name`` of the callback ids we enable, as Kineto names them
    (the runtime's ``_v7000`` suffix dropped; the driver's ``_v2`` names are real and stay)."""
    names: dict[tuple[int, int], str] = {}
    for api, enum in ((API_RUNTIME, cupti.runtime_api_trace_cbid), (API_DRIVER, cupti.driver_api_trace_cbid)):
        for name, member in enum.__members__.items():
            if _API_RECORDS_WE_NEED.match(name):
                names.setdefault((api, int(member)), _VERSION_SUFFIX.sub("", name))
    return names


def split_scopes(correlation: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Separate op links from scope links (ids at or above SCOPE_BASE)."""
    is_scope = pc.greater_equal(correlation["op_id"], SCOPE_BASE)
    scopes = correlation.filter(is_scope)
    scope_table = pa.table(
        {"correlation_id": scopes["correlation_id"], "context_id": pc.subtract(scopes["op_id"], SCOPE_BASE)},
        schema=schema.SCOPE_CORRELATION,
    )
    return correlation.filter(pc.invert(is_scope)), scope_table


class CuptiSource:
    """Collects kernel, memcpy and memset activity for one recorded pass."""

    name = "cupti"
    # launch one kernel on each GPU in use once collection is on, outside the timed pass: CUPTI's
    # first launch after enabling pays what a collection pays once (docs/design.md, "What a pass pays once")
    primed = True

    def __init__(self, sink: RecordSink, cupti: Any | None = None, correlation: str | None = None) -> None:
        self._cupti = cupti if cupti is not None else load_cupti()
        self._sink = sink
        self._kind = int(self._cupti.ExternalCorrelationKind.CUSTOM2)
        # the kind a native op tracer pushes its op ids with (they must meet ours in the records)
        self.correlation_kind = self._kind
        self.correlation = self._correlation(correlation)
        self._enabled: list[Any] = []
        self._api_selected = False
        self._started = False
        self._stopped = False
        self._dropped = 0
        self._clock_start: tuple[int, int] | None = None
        self._clock_end: tuple[int, int] | None = None
        self._warnings: list[str] = []
        self._canary: torch.Tensor | None = None
        # one canary per other device with a CUDA context (none with one GPU), by device ordinal
        self._device_canaries: dict[int, torch.Tensor] = {}
        if self.correlation == "launch":
            push, pop = self._sink.correlation_push, self._sink.correlation_pop  # type: ignore[attr-defined]
        else:
            push = self._cupti.activity_push_external_correlation_id
            pop = self._cupti.activity_pop_external_correlation_id
        self._push, self._pop = push, pop
        kind = self._kind
        # bound once: these run for every aten op / module forward / functional call of the pass
        self.op_started = lambda op_id, op: push(kind, op_id)
        self.op_finished = lambda op_id: pop(kind)
        self.scope_entered = lambda context_id: push(kind, SCOPE_BASE + context_id)
        self.scope_exited = lambda: pop(kind)

    def _correlation(self, requested: str | None) -> str:
        """``"launch"`` where the sink holds the launch callback and CUPTI's callbacks can be had, else
        ``"push"``; a requested ``"launch"`` that cannot be had is a RuntimeError saying why."""
        if requested == "push":
            return "push"
        if not getattr(self._sink, "launch_callbacks", False):
            if requested == "launch":
                raise RuntimeError(
                    f"correlation='launch' needs the native decoder, which holds the launch callback; this source "
                    f"decodes with {self._sink.name!r}: pass decoder='native', or correlation='push'"
                )
            return "push"
        why = self._sink.launch_callbacks_unavailable()  # type: ignore[attr-defined]
        if why is None:
            return "launch"
        detail = f"CUPTI's launch callbacks cannot be had ({why})"
        if "error 39" in why:
            detail += (
                ": another CUPTI client (torch.profiler's Kineto once it has run in this process, Nsight) "
                "holds the one callback subscription CUPTI allows"
            )
        if requested == "launch":
            raise RuntimeError(f"{detail}; pass correlation='push' to attribute launches through pushed ids")
        warnings.warn(
            f"{detail}, so launches are attributed through op ids pushed to CUPTI (correlation='push'), "
            "which costs more per op",
            RuntimeWarning,
            stacklevel=4,
        )
        return "push"

    def correlation_functions(self) -> tuple[int, int]:
        """The push and pop the native tracer calls per op and scope: the decoder's per-thread id stack
        with launch correlation, libcupti's own (:func:`libcupti_correlation_functions`) with push."""
        if self.correlation == "launch":
            return self._sink.correlation_functions()  # type: ignore[attr-defined]
        if not cuda_driver_loaded():  # the tracer would call them for every op: a crash on libcupti 13.2
            raise RuntimeError(
                "no CUDA driver (libcuda.so.1) is loaded in this process, and libcupti's "
                "cuptiActivityPushExternalCorrelationId cannot run without one: call torch.cuda.init() "
                "on a machine with an NVIDIA driver first, or pass device='cpu'"
            )
        return libcupti_correlation_functions()

    @property
    def sink(self) -> RecordSink:
        """The decoder backend that collects the records."""
        return self._sink

    @property
    def sink_name(self) -> str:
        """Which decoder backend collects the records."""
        return self._sink.name

    def start(self) -> None:
        """Register callbacks, enable the activity kinds and restrict API records."""
        if self._started:
            raise RuntimeError("a CuptiSource collects one pass; create a new one")
        if torch_profiler_active():
            raise RuntimeError(
                "torch.profiler is collecting: CUPTI serves one activity client at a time, so "
                "profile() cannot run inside a torch.profiler.profile() block; run them one after the other"
            )
        self._started = True
        self._canary = torch.zeros(1, device="cuda")  # allocated before collection starts
        others = devices.other_devices_in_use()
        devices.synchronize(others)  # the current device was synchronised by the caller
        self._add_device_canaries(others)
        cupti = self._cupti
        try:
            self._sink.register()
            if self.correlation == "launch":
                self._api_records_off()
            for kind in self._activity_kinds():
                cupti.activity_enable(kind)
                self._enabled.append(kind)
            if self.correlation == "push":
                self._select_api_records(only_needed=True)
            else:  # the launch callback records the launches table itself
                runtime = sorted(_api_callback_ids(cupti.runtime_api_trace_cbid)[1])
                driver = sorted(_api_callback_ids(cupti.driver_api_trace_cbid)[1])
                self._sink.start_launch_callbacks(runtime, driver, True)  # type: ignore[attr-defined]
            self._clock_start = self._clock_pair()
            if self.primed:
                self._launch_tagged(PRIME_ID)
        except BaseException:
            self.stop()
            raise

    def _api_records_off(self) -> None:
        """Disable the API record kinds, which a client that switched API callback ids on after disabling
        them (as this source did before it restored in the right order) leaves producing records."""
        kinds = self._cupti.ActivityKind
        for kind in (kinds.RUNTIME, kinds.DRIVER):
            try:
                self._cupti.activity_disable(kind)
            except Exception:  # noqa: BLE001 - not enabled: nothing to turn off
                pass

    def _activity_kinds(self) -> list[Any]:
        """Kernels, copies and sets; with push correlation also the external-correlation records that link
        them to ops and the API records those need (the launches table comes from them then)."""
        kinds = self._cupti.ActivityKind
        enabled = [kinds.CONCURRENT_KERNEL, kinds.MEMCPY, kinds.MEMSET]
        if self.correlation == "push":
            enabled += [kinds.EXTERNAL_CORRELATION, kinds.RUNTIME, kinds.DRIVER]
        return enabled

    def _clock_pair(self) -> tuple[int, int]:
        """(host perf_counter_ns, CUPTI timestamp) at one instant, from the tightest of a few brackets."""
        best: tuple[int, int, int] | None = None
        for _ in range(5):
            before = time.perf_counter_ns()
            stamp = int(self._cupti.get_timestamp())
            after = time.perf_counter_ns()
            if best is None or after - before < best[0]:
                best = (after - before, (before + after) // 2, stamp)
        assert best is not None
        return best[1], best[2]

    def _select_api_records(self, only_needed: bool) -> None:
        cupti = self._cupti
        for enum, switch in (
            (cupti.runtime_api_trace_cbid, cupti.activity_enable_runtime_api),
            (cupti.driver_api_trace_cbid, cupti.activity_enable_driver_api),
        ):
            every, needed = _api_callback_ids(enum)
            if only_needed:
                for cbid in every:
                    switch(cbid, 1 if cbid in needed else 0)
            else:
                for cbid in every:
                    switch(cbid, 1)
        self._api_selected = only_needed

    def stop(self) -> None:
        """Flush, then undo everything ``start`` did; safe to call twice and after a failed start."""
        if self._stopped or not self._started:
            self._stopped = True
            return
        self._stopped = True
        cupti = self._cupti
        try:
            self._launch_canary()
            self._clock_end = self._calibration_end()
            cupti.activity_flush_all(1)  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
        finally:
            with contextlib.ExitStack() as undo:  # each step runs whatever the others raise, the last one first
                undo.callback(self._release_sink)
                if self.correlation == "launch":  # a no-op where start() failed before turning them on
                    undo.callback(self._sink.stop_launch_callbacks)  # type: ignore[attr-defined]
                undo.callback(self._disable_kinds)
                # every API callback id switched back on before the kinds are disabled: switching one on
                # turns its records on again (seen on the H200), so the disable must come after it
                if self._api_selected:
                    undo.callback(self._select_api_records, only_needed=False)
        if torch_profiler_active():
            raise RuntimeError(
                "torch.profiler was started while profile() was collecting and took the CUPTI "
                "activity callbacks, so this run's kernels are incomplete; run them one after the other"
            )

    def _disable_kinds(self) -> None:
        while self._enabled:
            self._cupti.activity_disable(self._enabled.pop())

    def _release_sink(self) -> None:
        self._dropped = self._read_dropped()
        release = getattr(self._sink, "release", None)
        if release is not None:
            release()

    def _calibration_end(self) -> tuple[int, int] | None:
        """The second clock pair, at least MIN_CALIBRATION_NS after the first (short passes wait)."""
        if self._clock_start is None:
            return None
        wait_ns = MIN_CALIBRATION_NS - (time.perf_counter_ns() - self._clock_start[0])
        if wait_ns > 0:
            time.sleep(wait_ns / 1e9)
        return self._clock_pair()

    def _add_device_canaries(self, others: tuple[int, ...]) -> None:
        """A canary tensor on each of ``others`` that has none (``empty``: allocating launches nothing)."""
        for device in others:
            if device not in self._device_canaries:
                self._device_canaries[device] = torch.empty(1, device=f"cuda:{device}")

    def _launch_canary(self) -> None:
        """One tagged kernel per device in use: if one's record never reaches our sink, CUPTI was taken."""
        if self._canary is None:
            return
        self._add_device_canaries(devices.other_devices_in_use())  # devices first used during the pass
        self._launch_tagged(CANARY_ID)

    def _launch_tagged(self, external_id: int) -> None:
        """``fill_`` on every canary tensor under ``external_id``, then wait for them all."""
        if self._canary is None:
            return
        self._push(self._kind, external_id)
        try:
            self._canary.fill_(1.0)
            for canary in self._device_canaries.values():
                canary.fill_(1.0)
        finally:
            self._pop(self._kind)
        torch.cuda.synchronize()
        devices.synchronize(self._device_canaries)  # every kernel launched so far is complete, on every GPU

    def _read_dropped(self) -> int:
        dropped = ctypes.c_size_t(0)
        try:
            self._cupti.activity_get_num_dropped_records(0, 0, ctypes.addressof(dropped))
        except Exception as error:  # noqa: BLE001 - reported, never fatal
            self._warnings.append(f"could not read CUPTI's dropped-record count: {error}")
            return 0
        if dropped.value:
            message = (
                f"CUPTI dropped {dropped.value} activity records (buffers full); kernels are missing from this run"
            )
            self._warnings.append(message)
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        return int(dropped.value)

    def activity(self, ops: pa.Table | None = None) -> Activity:
        """Decoded kernel, correlation and launch tables of the pass (without the canary); ``ops`` is unused."""
        records = self._sink.take()
        clock = host_clock(self._clock_start, self._clock_end)
        raw = records.kernels_table()
        if self._clock_start is not None and self._clock_end is not None:
            self._warnings += devices.clock_coverage_warnings(raw, self._clock_start[1], self._clock_end[1])
        kernels, correlation = clock.convert(raw), records.correlation_table()
        launches = clock.convert(records.launches_table(callback_names(self._cupti)))
        if self._canary is not None:
            kernels, correlation, launches = self._drop_canary(kernels, correlation, launches)
        correlation, scope_correlation = split_scopes(correlation)
        self._warnings.extend(getattr(self._sink, "warnings", ()))  # the decoder's own words, warned by the sink
        return Activity(
            kernels=kernels,
            correlation=correlation,
            scope_correlation=scope_correlation,
            launches=launches,
            source=f"{self.name}/{self._sink.name}",
            dropped_records=self._dropped,
            warnings=tuple(self._warnings),
            clock_ticks_per_ns=clock.ticks_per_ns,
        )

    def _drop_canary(
        self, kernels: pa.Table, correlation: pa.Table, launches: pa.Table
    ) -> tuple[pa.Table, pa.Table, pa.Table]:
        """The tables without our own launches (the canary's and the prime's); RuntimeError where a
        device's canary never arrived."""
        ids = correlation["op_id"]
        is_canary = pc.equal(ids, pa.scalar(CANARY_ID - 2**64, pa.int64()))
        canary_ids = correlation.filter(is_canary)["correlation_id"]
        is_canary_kernel = pc.is_in(kernels["correlation_id"], value_set=canary_ids.combine_chunks())
        # with launch correlation the canary's link comes from our callback, not from CUPTI's records:
        # only its kernel record shows that the records still reach us
        if len(canary_ids) == 0 or not pc.any(is_canary_kernel).as_py():
            raise RuntimeError(
                "another CUPTI client (torch.profiler, Nsight, ...) took the activity callbacks or "
                "disabled collection during profile(), so this run's kernels are incomplete; "
                "run torch.profiler and profile() one after the other, never nested"
            )
        expected = set(self._device_canaries)
        current = getattr(getattr(self._canary, "device", None), "index", None)
        if isinstance(current, int):
            expected.add(current)
        missing = sorted(expected - set(devices.activity_devices(kernels.filter(is_canary_kernel))))
        if missing:
            names = ", ".join(f"cuda:{device}" for device in missing)
            raise RuntimeError(
                f"the canary kernel launched on {names} at the end of profile() never reached our CUPTI "
                "buffers, so that device's kernels are incomplete; another CUPTI client (torch.profiler, "
                "Nsight, ...) may have taken the callbacks: run them one after the other, never nested"
            )
        is_ours = pc.or_(is_canary, pc.equal(ids, pa.scalar(PRIME_ID - 2**64, pa.int64())))
        ours = correlation.filter(is_ours)["correlation_id"].combine_chunks()
        return (
            kernels.filter(pc.invert(pc.is_in(kernels["correlation_id"], value_set=ours))),
            correlation.filter(pc.invert(is_ours)),
            launches.filter(pc.invert(pc.is_in(launches["correlation_id"], value_set=ours))),
        )
