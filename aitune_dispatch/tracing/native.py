"""The native tracing backend: the compiled ``_tracer`` does the per-event work of a pass in C++ with
the rows and schemas of ``tracing/python.py``, configured through :class:`NativePass`
(``docs/design.md``, "The native tracing backend")."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from types import ModuleType, TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from .. import encoded, schema
from ..schema import FunctionData
from ..torch_compat import custom_ops_through_dispatcher
from .buffers import other_threads_running, still_running
from .contract import ThreadInfo, TraceTables
from .functional import (
    api_name,
    functional_registry,
    hook_registry,
    hooked_outermost_only,
    rearmed_copy,
    routing_mode_below,
)
from .mode_stack import exit_function_mode
from .samples import sample_pair_key

BUILD_FIX = "build it with `python setup.py build_ext --inplace` where torch is installed (scripts/setup.sh does)"


def load() -> ModuleType:
    """The compiled backend; ImportError (with the fix) where it was not built for this torch."""
    try:
        from . import _tracer
    except ImportError as error:
        raise ImportError(f"the native tracer is not built for this Python/torch ({error}); {BUILD_FIX}") from error
    built_for = getattr(_tracer, "torch_version", None)
    if built_for != torch.__version__:
        raise ImportError(
            f"the native tracer was built for torch {built_for}, this is {torch.__version__}; {BUILD_FIX}"
        )
    return _tracer


def available() -> bool:
    """True where the compiled backend imports."""
    try:
        load()
    except ImportError:
        return False
    return True


def hooks_unsupported() -> str | None:
    """None where functional calls can be seen at the function objects (``interception="objects"``),
    else why not: no compiled tracer, a CPython before 3.12, or one whose function objects are laid out
    otherwise than the tracer was compiled for (``docs/design.md``, "Functional calls at the function object")."""
    try:
        return load().hooks_unsupported()
    except ImportError as error:
        return str(error)


def _mode_bases() -> tuple[type, ...]:
    # Without the compiled backend the class is a plain TorchFunctionMode (``object`` first in the
    # bases would leave no consistent MRO); make_tracer never picks it then.
    try:
        return (load().FunctionModeBase,)
    except ImportError:
        return ()


class NativeFunctionMode(*_mode_bases(), TorchFunctionMode):  # type: ignore[misc]
    """A TorchFunctionMode whose C base answers torch's handler lookup; the method below is what
    torch.compile's tracer reads statically."""

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        return func(*args, **(kwargs or {}))


_SINGLETON_TYPES = (torch.dtype, torch.layout, torch.memory_format)
# a correlation kind that logs pushes and pops instead of sending them to CUPTI (tests without a GPU)
LOG_PUSHES = -2
SCOPE_BASE = schema.SCOPE_BASE  # scope contexts are pushed as SCOPE_BASE + context id


def _none(*_: Any) -> None:
    """A callback for a pass that runs no functional call (``NativePass.stacks_only``)."""


@dataclass(frozen=True)
class NativePass:
    """Everything ``_tracer.start()`` takes, validated here and handed over as keywords.

    ``correlation_kind`` None pushes nothing; otherwise ``correlation_push`` / ``correlation_pop`` are
    the C functions' addresses (``CorrelationTarget.correlation_functions``). ``log_pushes`` logs into
    ``take()["push_log"]`` instead (tests without a GPU); ``singletons`` are keyed by identity;
    ``running_before`` are idents of threads that are not the profiled function's; ``hook_objects``
    records the calls at the function objects of ``functions`` instead of through a mode (no mode is
    pushed; ``all_functions`` must be False); ``record_ops`` False leaves the aten-op callback out
    (the mechanism rows of ``benchmarks/recorded_pass.py``); ``outermost_only`` are hooked objects that
    are not a call of their own inside another recorded call (``functional.hooked_outermost_only``).
    """

    correlation_kind: int | None
    correlation_push: int | None
    correlation_pop: int | None
    log_pushes: bool
    modules: Sequence[tuple[nn.Module, int]]
    functions: dict[Callable[..., Any], str]
    sample_names: frozenset[str] | None
    all_functions: bool
    rearmed_copy: Callable[..., Any]
    api_name: Callable[..., Any]
    push_mode: Callable[..., Any]
    pop_mode: Callable[..., Any]
    routing_mode_below: Callable[[], Any]
    sample_key: Callable[..., Any] | None
    singletons: tuple[type, type, type]
    running_before: Sequence[int]
    hook_objects: bool = False
    record_ops: bool = True
    outermost_only: frozenset[Any] = frozenset()

    def __post_init__(self) -> None:
        kind = self.correlation_kind
        if kind is not None and (isinstance(kind, bool) or not isinstance(kind, int) or kind < 0):
            raise ValueError(f"correlation_kind must be a CUPTI external-correlation kind (>= 0) or None; got {kind!r}")
        if self.hook_objects and self.all_functions:
            raise ValueError("hook_objects=True records torch.nn.functional calls only: pass all_functions=False")
        if self.log_pushes and kind is not None:
            raise ValueError("log_pushes=True logs the ids instead of pushing them: pass correlation_kind=None")
        for name in ("correlation_push", "correlation_pop"):
            address = getattr(self, name)
            if kind is None and address is not None:
                raise ValueError(f"{name} is for a pass that pushes (correlation_kind >= 0): pass None")
            if kind is not None and (isinstance(address, bool) or not isinstance(address, int) or address <= 0):
                raise ValueError(
                    f"correlation_kind={kind} pushes ids, so {name} must be the address of the activity source's "
                    f"C function (CorrelationTarget.correlation_functions); got {address!r}"
                )

    @classmethod
    def for_kind(
        cls,
        kind: int,
        modules: Sequence[tuple[nn.Module, int]],
        correlation_functions: tuple[int, int] | None = None,
        **mode: Any,
    ) -> NativePass:
        """A pass for ``kind``: >= 0 pushes, ``LOG_PUSHES`` logs, ``schema.NO_CORRELATION`` pushes nothing."""
        push, pop = correlation_functions if correlation_functions is not None else (None, None)
        return cls(
            correlation_kind=kind if kind >= 0 else None,
            correlation_push=push,
            correlation_pop=pop,
            log_pushes=kind == LOG_PUSHES,
            modules=modules,
            **mode,
        )

    @classmethod
    def stacks_only(cls, modules: Sequence[tuple[nn.Module, int]]) -> NativePass:
        """The module stacks and columns without a functional call or a push (``benchmarks/pass_breakdown.py``)."""
        return cls(
            correlation_kind=None,
            correlation_push=None,
            correlation_pop=None,
            log_pushes=False,
            modules=modules,
            functions={},
            sample_names=None,
            all_functions=False,
            rearmed_copy=_none,
            api_name=_none,
            push_mode=_none,
            pop_mode=_none,
            routing_mode_below=_none,
            sample_key=None,
            singletons=_SINGLETON_TYPES,
            running_before=(),
        )

    @classmethod
    def hooks_only(cls, sample_names: frozenset[str] | None = None) -> NativePass:
        """The function-object hooks alone: each functional call recorded (with its samples), no module
        stack, no aten op, no push (``benchmarks/recorded_pass.py``'s "function-object hooks alone")."""
        return replace(
            cls.stacks_only(()),
            functions=hook_registry(),
            sample_names=sample_names,
            **_mode_callables(),
            hook_objects=True,
            record_ops=False,
            outermost_only=hooked_outermost_only(),
        )

    def keywords(self) -> dict[str, Any]:
        """The fields as ``start()``'s keyword arguments."""
        return {field.name: getattr(self, field.name) for field in fields(self)}


def _mode_callables() -> dict[str, Callable[..., Any]]:
    """The Python callables a recording pass hands ``start()`` (its function mode and samples call them)."""
    return {
        "rearmed_copy": rearmed_copy,
        "api_name": api_name,
        "push_mode": torch._C._push_on_torch_function_stack,
        "pop_mode": torch._C._pop_torch_function_stack,
        "routing_mode_below": routing_mode_below,
        "sample_key": sample_pair_key,
    }


def _int64(data: bytes) -> pa.Array:
    return pa.array(np.frombuffer(data, dtype=np.int64))


def _table(columns: dict[str, Any], table_schema: pa.Schema, keys: Sequence[str]) -> pa.Table:
    """The int64 byte columns ``keys`` of take()'s dict as a table of ``table_schema``."""
    return pa.Table.from_arrays([_int64(columns[key]) for key in keys], schema=table_schema)


def _names(ids: bytes, names: list[str]) -> pa.Array:
    """Name codes as a dictionary column (no per-row string)."""
    return encoded.from_codes(np.frombuffer(ids, dtype=np.int32), names)


class NativeTracer:
    """Context manager around one recorded pass on the calling thread; single-use."""

    name = "native"

    def __init__(
        self,
        modules: Iterable[tuple[nn.Module, int]],
        function_names: frozenset[str] | None,
        correlation_kind: int,
        all_functions: bool = False,
        running_before: Mapping[int, threading.Thread | None] | None = None,
        correlation_functions: Callable[[], tuple[int, int] | None] | None = None,
        hook_objects: bool = False,
    ) -> None:
        """``running_before``: a snapshot from when ``profile()`` began (None: when the pass begins);
        ``correlation_functions`` is asked as the pass starts, once libcupti is loaded; ``hook_objects``
        sees the functional calls at the function objects (no mode is pushed)."""
        self._native = load()
        self._correlation_functions = correlation_functions
        self._running_before = running_before
        self._modules = list(modules)
        self._function_names = function_names
        self._kind = correlation_kind
        self._all = all_functions
        self._hook_objects = hook_objects
        self._entered = False
        self.function_mode: NativeFunctionMode | None = None  # the mode it pushes, once entered
        self._taken: dict[str, Any] | None = None
        self._restore_custom_ops: Callable[[], None] = _none
        self.module_entered = self._native.enter_module
        self.module_exited = self._native.exit_module

    def modules_added(self, modules: Sequence[tuple[nn.Module, int]]) -> None:
        """Modules discovered during the pass join the hierarchy (``_tracer.add_modules``)."""
        pairs = list(modules)
        self._native.add_modules(pairs)
        self._modules += pairs

    @classmethod
    def ended(cls, modules: Iterable[tuple[nn.Module, int]], taken: dict[str, Any]) -> NativeTracer:
        """A tracer decoding ``taken`` (what ``_tracer.take()`` returned) without a pass
        (``benchmarks/post_memory.py``)."""
        tracer = cls(modules, None, schema.NO_CORRELATION)
        tracer._taken = taken
        return tracer

    def __enter__(self) -> NativeTracer:
        native = self._native
        if self._taken is not None or self._entered:
            raise RuntimeError("a NativeTracer records one pass; create a new one")
        if native.running():
            raise RuntimeError("the native tracer is already recording another pass; profile one thing at a time")
        native.start(**self._pass().keywords())
        self._entered = True
        # the op tracer observes RecordFunction, which torch 2.15's custom-op fast path never runs
        self._restore_custom_ops = custom_ops_through_dispatcher()
        if self._hook_objects:
            return self  # the function objects record their own calls
        self.function_mode = NativeFunctionMode()
        try:
            self.function_mode.__enter__()
        except BaseException:
            self._restore_custom_ops()
            native.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.function_mode is not None:  # also from beneath modes the profiled function left entered
                exit_function_mode(self.function_mode, exc_type, exc, tb)
        finally:
            self._restore_custom_ops()
            self._native.stop()
            self._taken = self._native.take()

    def _pass(self) -> NativePass:
        given = self._correlation_functions
        return NativePass.for_kind(
            self._kind,
            self._modules,
            given() if given is not None and self._kind >= 0 else None,
            # the cached dict itself: start() reuses what it interned for it
            functions=hook_registry() if self._hook_objects else functional_registry(),
            sample_names=self._function_names,
            all_functions=self._all,
            **_mode_callables(),
            singletons=_SINGLETON_TYPES,
            running_before=list(
                other_threads_running() if self._running_before is None else still_running(self._running_before)
            ),
            hook_objects=self._hook_objects,
            outermost_only=hooked_outermost_only() if self._hook_objects else frozenset(),
        )

    def _columns(self) -> dict[str, Any]:
        if self._taken is None:
            raise RuntimeError("the trace is available once the traced pass has ended")
        return self._taken

    def tables(self) -> TraceTables:
        """The pass as Arrow tables, after it has ended."""
        c = self._columns()
        n_ops = len(c["op_name"]) // 4
        n_calls = len(c["call_name"]) // 4
        n_ctx = len(c["ctx_module"]) // 8
        ops = pa.Table.from_arrays(
            [pa.array(np.arange(n_ops, dtype=np.int64)), _names(c["op_name"], c["op_names"])]
            + [_int64(c[k]) for k in ("op_module", "op_call", "op_thread", "op_start", "op_end")],
            schema=schema.OPS,
        )
        calls = pa.Table.from_arrays(
            [pa.array(np.arange(n_calls, dtype=np.int64)), _names(c["call_name"], c["function_names"])]
            + [
                _int64(c[k])
                for k in ("call_parent", "call_module", "call_start", "call_end", "call_thread", "call_sample")
            ],
            schema=schema.CALLS,
        )
        module_calls = pa.Table.from_arrays(
            [_int64(c[k]) for k in ("mcall_module", "mcall_start", "mcall_end", "mcall_thread")],
            schema=schema.MODULE_CALLS,
        )
        contexts = pa.Table.from_arrays(
            [pa.array(np.arange(n_ctx, dtype=np.int64)), _int64(c["ctx_module"]), _int64(c["ctx_call"])],
            schema=schema.CONTEXTS,
        )
        threads = tuple(ThreadInfo(*row) for row in c["threads"])
        return TraceTables(
            ops,
            calls,
            module_calls,
            contexts,
            threads,
            int(c["scopes_pushed"]),
            int(c["ops_pushed"]),
            autograd_nodes=_table(c, schema.AUTOGRAD_NODES, ("node_op", "node_thread", "node_first", "node_end")),
            backward_ops=_table(c, schema.BACKWARD_OPS, ("backward_op", "backward_seq", "backward_thread")),
            user_scopes=pa.Table.from_arrays(
                [pa.array(c["scope_names"], pa.string())]
                + [_int64(c[k]) for k in ("scope_thread", "scope_start", "scope_end")],
                schema=schema.USER_SCOPES,
            ),
        )

    def later_tables(self) -> Callable[[], TraceTables]:
        """:meth:`tables` to call later: a tracer holding this pass's columns and no module."""
        return NativeTracer.ended((), self._columns()).tables

    def push_log(self) -> list[int]:
        """With ``correlation_kind=LOG_PUSHES``: every id pushed during the pass, and -1 for each pop."""
        return np.frombuffer(self._columns()["push_log"], dtype=np.int64).tolist()

    def function_data(self) -> FunctionData:
        """The collected samples, in the reference's ``function_data`` shape."""
        c = self._columns()
        names = c["function_names"]
        return {names[name_id]: rows for name_id, rows in c["samples"].items()}
