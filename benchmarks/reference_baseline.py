"""The competitor: a re-implementation of how AITune's ``ModuleFunctionKernelProfiler`` attributes kernels.

Algorithm of the reference (the ``aitune.torch.kernel_forge.module_function_kernel_profiler`` module of the
aitune 0.6.0 package, Apache-2.0), reproduced step for step here so that the side-by-side is honest:

1. Prime Kineto once per process with a discarded GPU session; warm up uninstrumented.
2. Bind a wrapper as ``module.forward`` on every module of the hierarchy; it pushes the module name on a
   context-var stack and opens ``record_function("ait_nn_module:<name>")``.
3. Replace every public function of ``torch.nn.functional`` (Python functions and builtins whose
   ``__module__`` is ``torch.nn.functional``, ``torch`` or ``torch._C._nn``) by a wrapper that, inside a
   module, keys the call's inputs (``inspect.signature(...).bind`` + per-leaf shapes) for ``function_data``
   and opens ``record_function("ait_torch.nn.functional:<name>")``. Nested calls inside ``F`` resolve
   through the patched module globals, so they are labelled too.
4. One pass under ``torch.profiler.profile(activities=[CPU, CUDA])``, after one sacrificial kernel.
5. ``prof.profiler.function_events``: for every event with ``.kernels`` (the CPU op that launched them,
   linked by Kineto's correlation), walk ``cpu_parent`` to the nearest module and functional labels; drop
   the kernels without both, and those whose launching event is not an op (no ``::`` in its key).

Differences, all in the reference's favour or neutral: wrappers are plain closures instead of
``wrapt.FunctionWrapper`` objects; the sample key is a tuple of (path, shape) / (path, value) instead
of ``ExactSampleMetadata`` objects (cheaper); a ``torch.cuda.synchronize()`` closes the recorded pass
so that its time can be measured (Kineto synchronises on stop anyway). The DataFrame has the
reference's columns ``module_name, module, function_name, op, kernel, kernel_us``.

On the CPU (``device="cpu"``, the smoke mode) there are no kernels; each *visible* aten op, i.e. the
outermost op under the functional label that is not a CompositeImplicitAutograd decomposition (the
ops a ``TorchDispatchMode`` sees), becomes one row named ``cpu::<op>``, timed by its CPU event, which
is what ``ModuleFunctionKernelProfiler(device="cpu")`` reports.

torch.profiler API used (checked on torch 2.13 CPU; the same public members exist in 2.11):
``profile.profiler.function_events`` (an ``EventList`` of ``FunctionEvent``), ``FunctionEvent.key``,
``.kernels`` (``Kernel(name, device, duration)`` with duration in us), ``.cpu_parent``,
``.time_range`` and ``.device_type``.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

MODULE_PREFIX = "ait_nn_module:"
FUNCTIONAL_PREFIX = "ait_torch.nn.functional:"
PROFILING_COLUMNS = ["module_name", "module", "function_name", "op", "kernel", "kernel_us"]
LINK_COLUMNS = ["module_name", "function_name", "op", "kernel", "kernel_us", "ancestors", "order"]
CPU_KERNEL_PREFIX = "cpu::"
SACRIFICE_LABEL = "ait_baseline:sacrificial_kernel"  # not an op name (no "::")
_PATCHED_MODULES = {"torch.nn.functional", "torch", "torch._C._nn"}
_clock = time.perf_counter
_primed = False

Samples = Sequence[tuple[Sequence[Any], dict[str, Any]]]


def functions_to_patch(module: Any = F) -> list[tuple[str, Any]]:
    """The reference's choice of functionals: public Python functions and builtins of ``F``."""
    chosen = []
    for name, func in vars(module).items():
        if name.startswith("_") or not (inspect.isfunction(func) or inspect.isbuiltin(func)):
            continue
        if getattr(func, "__module__", None) in _PATCHED_MODULES:
            chosen.append((name, func))
    return chosen


def prime_cuda_profiler() -> None:
    """The reference's once-per-process discarded GPU session (some stacks lose the first one)."""
    global _primed
    if _primed:
        return
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        torch.zeros(1, device="cuda").relu_()
        torch.cuda.synchronize()
    _primed = True


def _hashable(value: Any) -> Any:
    """``value`` if hashable, else its repr (the sample key only needs equality)."""
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _leaves(value: Any, path: tuple[Any, ...], out: list[tuple[Any, ...]]) -> None:
    """Flatten containers into (path, shape) for tensors and (path, value) for the rest."""
    if isinstance(value, torch.Tensor):
        out.append((path, tuple(value.shape)))
    elif isinstance(value, dict):
        for key, item in value.items():
            _leaves(item, (*path, key), out)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _leaves(item, (*path, index), out)
    else:
        out.append((path, _hashable(value)))


def sample_key(inputs: dict[str, Any]) -> tuple[Any, ...]:
    """Exact-shape sample key of bound inputs, as the reference's ``ExactSampleMetadata`` keys them."""
    out: list[tuple[Any, ...]] = []
    _leaves(inputs, (), out)
    return tuple(out)


def nearest_label(event: Any, prefix: str) -> str | None:
    """The nearest ``cpu_parent`` label starting with ``prefix``, without the prefix."""
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        key = getattr(parent, "key", "")
        if key.startswith(prefix):
            return key[len(prefix) :]
        parent = getattr(parent, "cpu_parent", None)
    return None


def is_op(key: str) -> bool:
    """True for operator events (``aten::addmm``), false for our labels and runtime events."""
    return "::" in key and not key.startswith((MODULE_PREFIX, FUNCTIONAL_PREFIX))


def op_ancestors(event: Any) -> tuple[str, ...]:
    """The op names enclosing ``event``, innermost first (labels and runtime events skipped)."""
    names = []
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        if is_op(parent.key):
            names.append(parent.key)
        parent = getattr(parent, "cpu_parent", None)
    return tuple(names)


@functools.cache
def decomposed_before_dispatch(op: str) -> bool:
    """True when ``op`` is CompositeImplicitAutograd, so that a dispatch mode never sees it."""
    namespace, _, name = op.partition("::")
    packet = getattr(getattr(torch.ops, namespace, None), name, None)
    try:
        overloads = packet.overloads() if packet is not None else []
    except (AttributeError, RuntimeError):
        return False
    # profiler events carry no overload name: judge the default overload where there is one, else every
    # overload but TorchScript's ``prim_*`` ones (``aten::to``: all CompositeImplicit, ``aten::transpose.int``: not)
    chosen = ["default"] if "default" in overloads else [o for o in overloads if not o.startswith("prim_")]
    qualified = [op if o == "default" else f"{op}.{o}" for o in chosen]
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    try:
        return bool(qualified) and all(has(q, "CompositeImplicitAutograd") for q in qualified)
    except RuntimeError:
        return False


def visible_cpu_op(event: Any) -> bool:
    """True for the outermost op a ``TorchDispatchMode`` would see (the CPU stand-in for a kernel)."""
    if not is_op(event.key) or decomposed_before_dispatch(event.key):
        return False
    parent = getattr(event, "cpu_parent", None)
    while parent is not None:
        if is_op(parent.key) and not decomposed_before_dispatch(parent.key):
            return False
        parent = getattr(parent, "cpu_parent", None)
    return True


def event_kernels(event: Any, device: str) -> list[tuple[str, float]]:
    """``(kernel name, duration us)`` launched by ``event``: its CUDA kernels, or itself on the CPU."""
    if device == "cuda":
        return [(k.name, float(k.duration)) for k in (getattr(event, "kernels", None) or ())]
    if visible_cpu_op(event):
        return [(CPU_KERNEL_PREFIX + event.key, float(event.time_range.elapsed_us()))]
    return []


def _run_pass(function: Callable[..., Any], data: Samples | None) -> None:
    """One complete pass over ``data`` (or one call without arguments)."""
    if data is None:
        function()
        return
    for args, kwargs in data:
        function(*args, **kwargs)


def _sync(device: str) -> None:
    """Wait for the GPU where there is one."""
    if device == "cuda":
        torch.cuda.synchronize()


class ReferenceBaseline:
    """Attributes kernels the way AITune's ``ModuleFunctionKernelProfiler`` does (see the module doc).

    ``timings`` holds the phases of the last ``profile()`` in seconds; ``links`` (when
    ``collect_links=True``, computed after the timed phases) has every kernel torch.profiler linked
    to an op, attributed or not, with the op's enclosing ops; ``kernels_seen`` counts every device
    kernel/copy/set event of the recorded pass.
    """

    def __init__(
        self, function_names: Iterable[str] | None = None, *, device: str = "cuda", collect_links: bool = False
    ) -> None:
        if device not in ("cuda", "cpu"):
            raise ValueError(f"device must be 'cuda' or 'cpu'; got {device!r}")
        self.function_names = None if function_names is None else set(function_names)
        self.device = device
        self.collect_links = collect_links
        self.timings: dict[str, float] = {}
        self.links: pd.DataFrame | None = None
        self.kernels_seen = 0
        self._stack: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("ait_stack", default=())
        self._counts: dict[str, dict[tuple[Any, ...], int]] = defaultdict(lambda: defaultdict(int))
        self._cache: dict[tuple[str, tuple[Any, ...]], tuple[Any, Any]] = {}

    def profile(
        self,
        function: Callable[..., Any],
        data: Samples | None = None,
        *,
        module: nn.Module | None = None,
        warmup_iterations: int = 3,
    ) -> tuple[pd.DataFrame, dict[str, list[tuple[int, Any]]]]:
        """Warm up, record one labelled pass, and attribute its kernels; ``(profiling_df, function_data)``."""
        module = self._resolve(function, module)
        named = list(module.named_modules())
        marks = {"begin": _clock()}
        if self.device == "cuda":
            prime_cuda_profiler()
        with torch.no_grad():
            for _ in range(warmup_iterations):
                _run_pass(function, data)
        _sync(self.device)
        self._counts.clear()
        self._cache.clear()
        prof = self._record(function, data, named, marks)
        events = prof.profiler.function_events
        marks["parsed"] = _clock()
        rows, function_data = self._match(events, dict(named))
        marks["matched"] = _clock()
        if self.device == "cuda":
            torch.cuda.empty_cache()
        frame = pd.DataFrame(rows) if rows else pd.DataFrame(columns=PROFILING_COLUMNS)
        marks["end"] = _clock()
        self.timings = _phases(marks)
        self.links = links_table(events, self.device) if self.collect_links else None
        return frame, function_data

    # -- instrumentation ---------------------------------------------------------------------------------
    @staticmethod
    def _resolve(function: Callable[..., Any], module: nn.Module | None) -> nn.Module:
        if module is None and isinstance(function, nn.Module):
            return function
        if module is None:
            raise ValueError("module must be provided when function is not an nn.Module.")
        return module

    def _record(self, function: Callable[..., Any], data: Samples | None, named: Any, marks: dict[str, float]) -> Any:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device == "cuda" else [])
        with self._patched_forwards(named), self._patched_functionals():
            marks["instrumented"] = _clock()
            with profile(activities=activities) as prof:
                marks["started"] = _clock()
                with torch.no_grad():
                    if self.device == "cuda":
                        with record_function(SACRIFICE_LABEL):  # kept out of ``links``
                            torch.zeros(1, device="cuda").relu_()  # the reference's sacrificial kernel
                    _run_pass(function, data)
                _sync(self.device)
                marks["passed"] = _clock()
            marks["stopped"] = _clock()
        return prof

    @contextmanager
    def _patched_forwards(self, named: list[tuple[str, nn.Module]]) -> Iterator[None]:
        missing = object()
        saved: list[tuple[nn.Module, Any]] = []
        try:
            for name, module in named:
                saved.append((module, module.__dict__.get("forward", missing)))
                module.forward = self._forward_wrapper(module.forward, name)
            yield
        finally:
            for module, previous in saved:
                if previous is missing:
                    module.__dict__.pop("forward", None)
                else:
                    module.forward = previous

    def _forward_wrapper(self, forward: Callable[..., Any], name: str) -> Callable[..., Any]:
        label, stack = f"{MODULE_PREFIX}{name}", self._stack

        @functools.wraps(forward)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            token = stack.set((*stack.get(), name))
            try:
                with record_function(label):
                    return forward(*args, **kwargs)
            finally:
                stack.reset(token)

        return wrapper

    @contextmanager
    def _patched_functionals(self) -> Iterator[None]:
        originals: dict[str, Any] = {}
        try:
            for name, func in functions_to_patch(F):
                originals[name] = func
                setattr(F, name, self._functional_wrapper(func, name))
            yield
        finally:
            for name, func in originals.items():
                setattr(F, name, func)

    def _functional_wrapper(self, func: Callable[..., Any], name: str) -> Callable[..., Any]:
        label, stack = f"{FUNCTIONAL_PREFIX}{name}", self._stack
        try:
            signature: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):
            signature = None
        collects = self.function_names is None or name in self.function_names

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if collects and stack.get():
                self._observe(name, signature, args, kwargs)
            with record_function(label):
                return func(*args, **kwargs)

        return wrapper

    def _observe(self, name: str, signature: inspect.Signature | None, args: Any, kwargs: Any) -> None:
        inputs = {"args": args, "kwargs": kwargs} if signature is None else signature.bind(*args, **kwargs).arguments
        key = sample_key(dict(inputs))
        self._cache.setdefault((name, key), (args, kwargs))
        self._counts[name][key] += 1

    # -- attribution --------------------------------------------------------------------------------------
    def _match(
        self, events: Sequence[Any], modules: dict[str, nn.Module]
    ) -> tuple[list[dict[str, Any]], dict[str, list[tuple[int, Any]]]]:
        rows: list[dict[str, Any]] = []
        matched: set[str] = set()
        seen = 0
        for event in events:
            kernels = event_kernels(event, self.device)
            if not kernels:
                continue
            seen += len(kernels)
            module_name = nearest_label(event, MODULE_PREFIX)
            function_name = nearest_label(event, FUNCTIONAL_PREFIX)
            if module_name is None or function_name is None or "::" not in event.key:
                continue
            module = modules[module_name]
            if self.function_names is None or function_name in self.function_names:
                matched.add(function_name)
            for kernel, duration in kernels:
                rows.append(
                    {
                        "module_name": module_name,
                        "module": module,
                        "function_name": function_name,
                        "op": event.key,
                        "kernel": kernel,
                        "kernel_us": duration,
                    }
                )
        self.kernels_seen = seen
        function_data = {
            name: [(count, self._cache[(name, key)]) for key, count in self._counts[name].items()] for name in matched
        }
        return rows, function_data


def _phases(marks: dict[str, float]) -> dict[str, float]:
    """Seconds per phase from the time marks of one ``profile()``."""
    timings = {
        "warmup_s": marks["instrumented"] - marks["begin"],
        "start_s": marks["started"] - marks["instrumented"],
        "pass_s": marks["passed"] - marks["started"],
        "stop_s": marks["stopped"] - marks["passed"],
        "parse_s": marks["parsed"] - marks["stopped"],
        "match_s": marks["matched"] - marks["parsed"],
        "df_s": marks["end"] - marks["matched"],
        "total_s": marks["end"] - marks["begin"],
    }
    timings["post_s"] = timings["stop_s"] + timings["parse_s"] + timings["match_s"] + timings["df_s"]
    return timings


def links_table(events: Sequence[Any], device: str) -> pd.DataFrame:
    """Every kernel linked to an op (attributed or not), with labels, the op and its enclosing ops."""
    rows = []
    for order, event in enumerate(events):
        if not is_op(event.key) or nearest_label(event, SACRIFICE_LABEL) is not None:
            continue
        for kernel, duration in event_kernels(event, device):
            rows.append(
                {
                    "module_name": nearest_label(event, MODULE_PREFIX),
                    "function_name": nearest_label(event, FUNCTIONAL_PREFIX),
                    "op": event.key,
                    "kernel": kernel,
                    "kernel_us": duration,
                    "ancestors": op_ancestors(event),
                    "order": order,
                }
            )
    return pd.DataFrame(rows, columns=LINK_COLUMNS)


def device_event_names(prof: Any) -> Counter[str]:
    """Names of every device event (kernel, memcpy, memset) Kineto recorded, linked to an op or not."""
    results = getattr(prof.profiler, "kineto_results", None)
    if results is not None:
        return Counter(e.name() for e in results.events() if e.device_type() == torch.autograd.DeviceType.CUDA)
    return Counter(e.name for e in prof.profiler.function_events if e.device_type == torch.autograd.DeviceType.CUDA)


def bare_kernel_names(function: Callable[..., Any], data: Samples | None, device: str) -> Counter[str]:
    """Kernel names of one uninstrumented pass under plain torch.profiler (CPU: visible ops, ``cpu::`` names)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    if device == "cuda":
        prime_cuda_profiler()
    _sync(device)
    with torch.no_grad(), profile(activities=activities) as prof:
        _run_pass(function, data)
        _sync(device)
    if device == "cuda":
        return device_event_names(prof)
    names: Counter[str] = Counter()
    for event in prof.profiler.function_events:
        names.update(name for name, _ in event_kernels(event, device))
    return names


class _Event:
    """A stand-in for ``FunctionEvent`` (key, cpu_parent, kernels) in the self-check."""

    def __init__(self, key: str, parent: _Event | None = None, kernels: Sequence[tuple[str, float]] = ()) -> None:
        self.key, self.cpu_parent = key, parent
        self.kernels = [type("Kernel", (), {"name": n, "duration": d})() for n, d in kernels]


def self_check() -> None:
    """Assert the CUDA attribution rules on synthetic events (no GPU needed)."""
    root = _Event(MODULE_PREFIX)
    block = _Event(MODULE_PREFIX + "0", root)
    fn = _Event(FUNCTIONAL_PREFIX + "conv2d", block)
    conv = _Event("aten::convolution", fn)
    cudnn = _Event("aten::cudnn_convolution", conv, [("conv_k", 5.0), ("bias_k", 1.0)])
    label_launch = _Event(FUNCTIONAL_PREFIX + "relu", block, [("triton_k", 2.0)])  # launched by a label: dropped
    outside = _Event("aten::add", block, [("add_k", 1.0)])  # no functional parent: dropped
    sacrifice = _Event("aten::relu_", _Event(SACRIFICE_LABEL), [("relu_k", 1.0)])
    events = [root, block, fn, conv, cudnn, label_launch, outside, sacrifice]
    baseline = ReferenceBaseline(device="cuda")
    rows, _ = baseline._match(events, {"": nn.Module(), "0": nn.Module()})
    got = [(r["module_name"], r["function_name"], r["op"], r["kernel"], r["kernel_us"]) for r in rows]
    assert got == [
        ("0", "conv2d", "aten::cudnn_convolution", "conv_k", 5.0),
        ("0", "conv2d", "aten::cudnn_convolution", "bias_k", 1.0),
    ], got
    assert baseline.kernels_seen == 5  # conv_k, bias_k, triton_k, add_k, relu_k: every kernel of the pass
    links = links_table(events, "cuda")
    assert list(links["kernel"]) == ["conv_k", "bias_k", "add_k"], links  # ops only, sacrifice excluded
    assert links["ancestors"][0] == ("aten::convolution",) and pd.isna(links["function_name"][2])
