"""Agreement of aitune_dispatch with the reference method, exact op links, kernel times and fidelity.

The checks are pure functions over DataFrames / Counters, importable by the GPU tests
(``from benchmarks.compare_reference import agreement, op_links, kernel_time_ratios, fidelity``):

* :func:`agreement` — wherever the baseline attributes a kernel, the multiset of
  ``(module_name, function_name, kernel)`` rows is the same in ours.
* :func:`op_links` — every kernel torch.profiler links to an op is linked by us to that op or to
  one of the ops enclosing it (its dispatcher-level ancestor: we see ops at the Python dispatch
  level, torch.profiler reports the innermost one). Matching is a max-flow per kernel name, so
  it needs no ordering between the two passes; the observed ``torch op -> our op`` pairs are the
  mapping table (see :data:`EXPECTED_ANCESTORS` for the ones we expect on CUDA).
* :func:`kernel_time_ratios` — per function, our kernel time over the baseline's, on the kernels
  the baseline attributes.
* :func:`fidelity` — the kernel-name multiset of our recorded pass equals an uninstrumented capture.

Kernel names are compared demangled (Kineto demangles; raw CUPTI names may be mangled).
``python -m benchmarks.compare_reference --device cuda --out DIR`` runs the zoo; ``--cpu-smoke``
runs the self-checks and the small zoo on the CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from aitune_dispatch.config import DEVICES

# torch op (innermost, as torch.profiler reports it) -> the op our dispatch mode sees, as expected on CUDA;
# documentation only: op_links() derives the pairs from the event tree (any enclosing op is accepted) and reports
# what it observed
EXPECTED_ANCESTORS: dict[str, str] = {
    "aten::cudnn_convolution": "aten::convolution",
    "aten::_efficient_attention_forward": "aten::_scaled_dot_product_efficient_attention (fp32 SDPA on an H200)",
    "aten::_flash_attention_forward": "aten::_scaled_dot_product_flash_attention (fp16/bf16 SDPA)",
    "aten::addmm / aten::_efficient_attention_forward / aten::_masked_softmax inside the MHA fast path": (
        "aten::_native_multi_head_attention"
    ),
    "aten::cudnn_batch_norm": "aten::cudnn_batch_norm (same op: its callers are CompositeImplicit)",
    "aten::fill_": "(the op that allocated and filled: e.g. aten::zeros, aten::zero_)",
    "aten::copy_": "aten::_to_copy / aten::contiguous callers (aten::clone, aten::_to_copy)",
    "aten::addmm": "aten::addmm (same op: aten::linear is CompositeImplicit and decomposes first)",
    "aten::mm": "aten::mm (same op: aten::matmul decomposes first)",
}
# ops that differ only because a Python dispatch mode is active: aten::reshape calls aten::view instead of
# aten::_reshape_alias when at::isTensorSubclassLike() sees a mode. Both are metadata-only views that launch no
# kernel, so this matters only for the CPU source, whose "kernels" are ops (cpu::<op>).
OP_ALIASES: dict[str, str] = {"aten::_reshape_alias": "aten::view"}
_CPU_PREFIX = "cpu::"
TIME_TOLERANCE = 0.05
Key = tuple[str, str, str]


# -- names ----------------------------------------------------------------------------------------------
def _demangler() -> Callable[[str], str]:
    """torch's c10::demangle (``__cxa_demangle``, as Kineto uses), or identity."""
    try:
        import torch

        return torch._C._demangle
    except (ImportError, AttributeError):  # pragma: no cover - very old torch
        return lambda name: name


_DEMANGLE = _demangler()
_demangled: dict[str, str] = {}


def kernel_name(name: Any) -> str:
    """The demangled kernel name (CUPTI may report ``_Z...``; Kineto demangles); CPU op names aliased."""
    text = str(name)
    found = _demangled.get(text)
    if found is None:
        if text.startswith(_CPU_PREFIX):
            found = _CPU_PREFIX + op_alias(text[len(_CPU_PREFIX) :])
        else:
            found = _DEMANGLE(text) if text.startswith("_Z") else text
        _demangled[text] = found
    return found


def op_alias(op: str) -> str:
    """The op as our dispatch mode sees it, for ops in :data:`OP_ALIASES`."""
    return OP_ALIASES.get(op, op)


def _label(value: Any) -> str:
    """A module or function label; a missing one (None, NaN) becomes ``<none>``."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "<none>"
    return str(value)


def key_counts(frame: pd.DataFrame) -> Counter[Key]:
    """Multiset of ``(module_name, function_name, kernel)`` rows, kernel names demangled."""
    return Counter(
        (_label(m), _label(f), kernel_name(k))
        for m, f, k in zip(frame["module_name"], frame["function_name"], frame["kernel"])
    )


# -- agreement ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Agreement:
    """Row multisets compared on the baseline's domain (the keys it attributes)."""

    baseline_rows: int
    ours_rows: int
    matched: int
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    ours_only: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every baseline key has the same count in ours."""
        return not self.mismatches

    @property
    def fraction(self) -> float:
        """Matched rows over baseline rows (1.0 when the baseline attributes nothing)."""
        return self.matched / self.baseline_rows if self.baseline_rows else 1.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with ``ok`` and ``fraction``."""
        return {**asdict(self), "ok": self.ok, "fraction": self.fraction}


def _key_dict(key: Key, **counts: int) -> dict[str, Any]:
    return {"module_name": key[0], "function_name": key[1], "kernel": key[2], **counts}


def agreement(ours: pd.DataFrame, baseline: pd.DataFrame, limit: int = 50) -> Agreement:
    """Compare ``(module_name, function_name, kernel)`` multisets wherever the baseline attributes a kernel."""
    ours_counts, base_counts = key_counts(ours), key_counts(baseline)
    mismatches = [
        _key_dict(key, baseline=count, ours=ours_counts.get(key, 0))
        for key, count in sorted(base_counts.items())
        if ours_counts.get(key, 0) != count
    ]
    ours_only = [_key_dict(key, ours=count) for key, count in sorted(ours_counts.items()) if key not in base_counts]
    matched = sum(min(count, ours_counts.get(key, 0)) for key, count in base_counts.items())
    return Agreement(
        baseline_rows=sum(base_counts.values()),
        ours_rows=sum(ours_counts.values()),
        matched=matched,
        mismatches=mismatches[:limit],
        ours_only=ours_only[:limit],
    )


# -- exact op links -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpLinks:
    """torch.profiler's kernel -> op links checked against ours (same op or an enclosing op)."""

    linked: int
    matched: int
    same_op: int
    mapping: dict[str, dict[str, int]]
    unmatched: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every linked kernel found one of our rows with an acceptable op."""
        return self.matched == self.linked

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with ``ok``."""
        return {**asdict(self), "ok": self.ok}


def _max_flow(supply: Mapping[Any, int], demand: Mapping[str, int], edges: Mapping[Any, Iterable[str]]) -> dict:
    """Max flow supply-type -> demand-type over the allowed edges; returns ``{(s, d): flow}``."""
    flow: dict[tuple[Any, str], int] = defaultdict(int)
    left_s, left_d = dict(supply), dict(demand)
    while True:
        path = _augmenting_path(left_s, left_d, edges, flow)
        if path is None:
            return {k: v for k, v in flow.items() if v}
        amount = min([left_s[path[0][0]], left_d[path[-1][1]]] + [flow[(s, d)] for s, d in path[1::2]])
        for index, (s, d) in enumerate(path):
            flow[(s, d)] += amount if index % 2 == 0 else -amount
        left_s[path[0][0]] -= amount
        left_d[path[-1][1]] -= amount


def _augmenting_path(
    left_s: Mapping[Any, int], left_d: Mapping[str, int], edges: Mapping[Any, Iterable[str]], flow: Mapping
) -> list[tuple[Any, str]] | None:
    """BFS from supply with stock to demand with room; path alternates forward and backward edges."""
    starts = [s for s, n in left_s.items() if n > 0]
    parent: dict[Any, tuple[Any, str] | None] = {("s", s): None for s in starts}
    queue = [("s", s) for s in starts]
    while queue:
        side, node = queue.pop(0)
        if side == "s":
            for d in edges.get(node, ()):
                if ("d", d) not in parent and d in left_d:
                    parent[("d", d)] = (node, d)
                    if left_d[d] > 0:
                        return _unwind(parent, d)
                    queue.append(("d", d))
        else:
            for (s, d), amount in flow.items():
                if d == node and amount > 0 and ("s", s) not in parent:
                    parent[("s", s)] = (s, d)
                    queue.append(("s", s))
    return None


def _unwind(parent: Mapping[Any, tuple[Any, str] | None], end: str) -> list[tuple[Any, str]]:
    """The edges of the BFS path ending at demand node ``end``, from the start."""
    path, node = [], ("d", end)
    while parent[node] is not None:
        s, d = parent[node]
        path.append((s, d))
        node = ("s", s) if node[0] == "d" else ("d", d)
    return path[::-1]


def op_links(ours_activity: pd.DataFrame, links: pd.DataFrame, limit: int = 50) -> OpLinks:
    """Check that each torch.profiler kernel->op link has one of our rows (same kernel) with that op or an ancestor.

    ``ours_activity``: our rows with ``kernel`` and ``op`` (``ProfileResult.to_pandas()``);
    ``links``: the baseline's ``links`` (``kernel``, ``op``, ``ancestors`` innermost first).
    """
    ours_ops: dict[str, Counter[str]] = defaultdict(Counter)
    for kernel, op in zip(ours_activity["kernel"], ours_activity["op"]):
        if isinstance(op, str):
            ours_ops[kernel_name(kernel)][op] += 1
    wanted: dict[str, Counter[tuple[str, ...]]] = defaultdict(Counter)
    for kernel, op, ancestors in zip(links["kernel"], links["op"], links["ancestors"]):
        wanted[kernel_name(kernel)][tuple(op_alias(o) for o in (op, *ancestors))] += 1
    mapping: dict[str, Counter[str]] = defaultdict(Counter)
    matched = same = 0
    unmatched = []
    for kernel, chains in sorted(wanted.items()):
        flows = _max_flow(chains, ours_ops.get(kernel, Counter()), {chain: chain for chain in chains})
        for (chain, ours_op), amount in flows.items():
            mapping[chain[0]][ours_op] += amount
            same += amount if ours_op == chain[0] else 0
            matched += amount
        for chain, count in chains.items():
            short = count - sum(a for (c, _), a in flows.items() if c == chain)
            if short:
                unmatched.append({"kernel": kernel, "op": chain[0], "ancestors": list(chain[1:]), "missing": short})
    return OpLinks(
        linked=int(sum(sum(c.values()) for c in wanted.values())),
        matched=matched,
        same_op=same,
        mapping={op: dict(found) for op, found in sorted(mapping.items())},
        unmatched=unmatched[:limit],
    )


def ancestor_pairs(report: OpLinks) -> dict[str, dict[str, int]]:
    """The links where our op is an ancestor of torch.profiler's (the observed mapping table)."""
    pairs = {op: {o: n for o, n in found.items() if o != op} for op, found in report.mapping.items()}
    return {op: found for op, found in pairs.items() if found}


# -- kernel durations -----------------------------------------------------------------------------------
def kernel_time_ratios(ours: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """Per function: baseline kernel us, ours on the baseline's keys, ours overall, and ours / baseline."""
    columns = ["function_name", "baseline_us", "ours_us", "ours_all_us", "ratio", "baseline_rows"]
    if baseline.empty:
        return pd.DataFrame(columns=columns)
    base = baseline.assign(key=_keys(baseline))
    mine = ours.assign(key=_keys(ours))
    domain = set(base["key"])
    in_domain = mine[mine["key"].isin(domain)]
    table = pd.DataFrame(
        {
            "baseline_us": base.groupby("function_name")["kernel_us"].sum(),
            "ours_us": in_domain.groupby("function_name")["kernel_us"].sum(),
            "ours_all_us": mine.groupby("function_name")["kernel_us"].sum(),
            "baseline_rows": base.groupby("function_name")["kernel_us"].size(),
        }
    )
    table = table[table["baseline_us"].notna()].fillna({"ours_us": 0.0, "ours_all_us": 0.0})
    table["ratio"] = table["ours_us"] / table["baseline_us"]
    table = table.rename_axis("function_name").reset_index()
    return table.sort_values("baseline_us", ascending=False)[columns].reset_index(drop=True)


def _keys(frame: pd.DataFrame) -> list[Key]:
    return [
        (_label(m), _label(f), kernel_name(k))
        for m, f, k in zip(frame["module_name"], frame["function_name"], frame["kernel"])
    ]


def times_within(ratios: pd.DataFrame, tolerance: float = TIME_TOLERANCE) -> bool:
    """True when every function's ratio is within ``tolerance`` of 1."""
    return bool(((ratios["ratio"] - 1.0).abs() <= tolerance).all())


# -- fidelity -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fidelity:
    """Kernel-name multiset of our recorded pass against an uninstrumented capture."""

    ours_total: int
    bare_total: int
    missing: dict[str, int]
    extra: dict[str, int]

    @property
    def equal(self) -> bool:
        """True when the multisets are equal."""
        return not self.missing and not self.extra

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, with ``equal``."""
        return {**asdict(self), "equal": self.equal}


def fidelity(ours_names: Iterable[str], bare_names: Mapping[str, int] | Iterable[str], limit: int = 50) -> Fidelity:
    """Compare kernel-name multisets (demangled): ``missing`` ran bare only, ``extra`` ran profiled only."""
    ours = Counter(kernel_name(n) for n in ours_names)
    bare: Counter[str] = Counter()
    items = bare_names.items() if isinstance(bare_names, Mapping) else ((n, 1) for n in bare_names)
    for name, count in items:
        bare[kernel_name(name)] += count
    missing = dict(sorted((bare - ours).items())[:limit])
    extra = dict(sorted((ours - bare).items())[:limit])
    return Fidelity(sum(ours.values()), sum(bare.values()), missing, extra)


def bare_cupti_names(function: Callable[..., Any], data: Sequence[Any]) -> Counter[str]:
    """Kernel/memcpy/memset names of one pass under a bare cupti-python capture (no tracing, no torch.profiler)."""
    import torch
    from cupti import cupti

    from aitune_dispatch.collection.decoded import memcpy_name, memset_name

    kinds = cupti.ActivityKind
    objects: list[Any] = []
    cupti.activity_register_callbacks(lambda: (8 * 1024 * 1024, 0), objects.extend)
    enabled = [kinds.CONCURRENT_KERNEL, kinds.MEMCPY, kinds.MEMSET]
    torch.cuda.synchronize()
    for kind in enabled:
        cupti.activity_enable(kind)
    try:
        with torch.no_grad():
            for args, kwargs in data:
                function(*args, **kwargs)
        torch.cuda.synchronize()
    finally:
        cupti.activity_flush_all(1)
        for kind in enabled:
            cupti.activity_disable(kind)
    kernel, memcpy, memset = (int(k) for k in enabled)
    names: Counter[str] = Counter()
    for a in objects:
        kind = int(a.kind)
        if kind == kernel:
            names[a.name] += 1
        elif kind == memcpy:
            names[memcpy_name(a.copy_kind, a.src_kind, a.dst_kind)] += 1
        elif kind == memset:
            names[memset_name(a.memory_kind)] += 1
    return names


# -- the two correlation paths -----------------------------------------------------------------------------
ROW_KEY = ["module_name", "function_name", "op", "kernel", "attribution"]


def _rows(frame: pd.DataFrame) -> Counter[tuple[str, ...]]:
    """The multiset of an activity frame's (module, function, op, kernel, attribution) rows."""
    return Counter(tuple(_label(value) for value in row) for row in frame[ROW_KEY].itertuples(index=False))


def correlation_paths(launch: pd.DataFrame, push: pd.DataFrame, limit: int = 20) -> dict[str, Any]:
    """Whether two activity frames (``correlation="launch"`` and ``"push"``) hold the same multiset of
    (module, function, op, kernel, attribution) rows; the differing rows, up to ``limit``."""

    left, right = _rows(launch), _rows(push)
    only_launch, only_push = left - right, right - left
    return {
        "equal": not only_launch and not only_push,
        "launch_rows": int(len(launch)),
        "push_rows": int(len(push)),
        "only_launch": [dict(zip(ROW_KEY, key), count=n) for key, n in list(only_launch.items())[:limit]],
        "only_push": [dict(zip(ROW_KEY, key), count=n) for key, n in list(only_push.items())[:limit]],
    }


def gateless_names() -> frozenset[str]:
    """The public functionals no TorchFunctionMode sees (no ``has_torch_function`` gate): what the
    function-object hooks record and the mode cannot."""
    from aitune_dispatch.tracing.functional import functional_registry, hook_registry

    return frozenset(hook_registry().values()) - frozenset(functional_registry().values())


def interception_paths(objects: pd.DataFrame, mode: pd.DataFrame, limit: int = 20) -> dict[str, Any]:
    """Whether two activity frames (``interception="objects"`` and ``"mode"``) hold the same multiset of
    (module, function, op, kernel, attribution) rows; where not, whether every difference is explained:
    a kernel the hooks attribute to a gate-less functional (:func:`gateless_names`) that the mode gives
    to the enclosing call or to none, the same kernels under the same module and op on both sides."""

    def without_function(counter: Counter[tuple[str, ...]]) -> Counter[tuple[str, ...]]:
        where = ROW_KEY.index("function_name")
        return Counter({key[:where] + key[where + 1 :]: n for key, n in counter.items()}) + Counter()

    left, right = _rows(objects), _rows(mode)
    only_objects, only_mode = left - right, right - left
    gateless = gateless_names()
    where = ROW_KEY.index("function_name")
    explained = all(key[where] in gateless for key in only_objects) and without_function(
        only_objects
    ) == without_function(only_mode)
    return {
        "equal": not only_objects and not only_mode,
        "explained": explained,
        "gateless_rows": sorted({key[where] for key in only_objects if key[where] in gateless}),
        "objects_rows": int(len(objects)),
        "mode_rows": int(len(mode)),
        "only_objects": [dict(zip(ROW_KEY, key), count=n) for key, n in list(only_objects.items())[:limit]],
        "only_mode": [dict(zip(ROW_KEY, key), count=n) for key, n in list(only_mode.items())[:limit]],
    }


@dataclass
class Ours:
    """Our results on one model, taken before any torch.profiler runs in the process (Kineto then keeps
    CUPTI's callback subscription, and ours falls back to pushed ids)."""

    work: Any
    function: Any
    samples: Any
    result: Any
    correlation: str
    paths: dict[str, Any] | None
    interceptions: dict[str, Any] | None = None


def profile_ours(name: str, device: str, size: str = "bench", repeat: int = 1, warmup: int = 1) -> Ours | dict:
    """Profile one zoo model with our defaults (twice: start-up, then the compared run), with the other
    interception (the TorchFunctionMode where the default hooks the function objects) and, on CUDA, with
    ``correlation="push"``; the skipped-model report where its package is missing."""
    from aitune_dispatch import ModuleFunctionKernelProfiler, schema

    from .zoo import ModelUnavailable, build

    try:
        work = build(name, device, repeat, size=size)
    except ModelUnavailable as error:
        return {"model": name, "status": "skipped", "reason": str(error)}
    model = work.model
    # a pipeline (llama_generate) is its function called once with the model as the hierarchy
    function, samples = (work.function, None) if work.function is not None else (model, work.samples)
    ours = ModuleFunctionKernelProfiler(device=device)
    ours.profile(function, samples, module=model, warmup_iterations=warmup)  # start-up; the second is compared
    result = ours.profile_result(function, samples, module=model, warmup_iterations=warmup)
    default = result.metadata.get(schema.META_INTERCEPTION, "?")
    interceptions = None
    if default == "objects":
        mode = ModuleFunctionKernelProfiler(device=device, interception="mode")
        by_mode = mode.profile_result(function, samples, module=model, warmup_iterations=warmup)
        interceptions = interception_paths(result.to_pandas(), by_mode.to_pandas())
    paths = None
    if device == "cuda":
        push = ModuleFunctionKernelProfiler(device=device, correlation="push")
        pushed = push.profile_result(function, samples, module=model, warmup_iterations=warmup)
        paths = correlation_paths(result.to_pandas(), pushed.to_pandas())
        paths["default"] = result.metadata.get(schema.META_CORRELATION, "?")
    return Ours(
        work,
        function,
        samples,
        result,
        result.metadata.get(schema.META_CORRELATION, "none"),
        paths,
        {"default": default, **(interceptions or {})},
    )


# -- one model ------------------------------------------------------------------------------------------
def compare_model(
    name: str, device: str, size: str = "bench", repeat: int = 1, warmup: int = 1, ours: Ours | dict | None = None
) -> dict[str, Any]:
    """Run ours (unless ``ours`` was profiled already: :func:`profile_ours`), the baseline and the bare captures
    on one zoo model; every check as a JSON-ready dict."""
    from .reference_baseline import ReferenceBaseline, bare_kernel_names

    started = time.perf_counter()
    if ours is None:
        ours = profile_ours(name, device, size, repeat, warmup)
    if isinstance(ours, dict):
        return ours
    function, samples, result, model = ours.function, ours.samples, ours.result, ours.work.model
    ours_df, activity = result.profiling_df(), result.to_pandas()
    baseline = ReferenceBaseline(device=device, collect_links=True)
    base_df, _ = baseline.profile(function, samples, module=model, warmup_iterations=warmup)
    report = _checks(ours_df, activity, base_df, baseline.links, device)
    report["fidelity_torch_profiler"] = fidelity(
        activity["kernel"], bare_kernel_names(function, samples, device)
    ).to_dict()
    if device == "cuda":
        one_pass = samples if samples is not None else [((), {})]
        report["fidelity_cupti"] = _bare_cupti_fidelity(function, one_pass, activity)
    report.update(
        model=name,
        status="ok",
        samples=1 if samples is None else len(samples),
        ours_kernels=int(len(activity)),
        baseline_kernels=baseline.kernels_seen,
        coverage=result.coverage,
        warnings=list(result.warnings),
        seconds=time.perf_counter() - started,
        correlation=ours.correlation,
        correlation_paths=ours.paths,
        interception_paths=ours.interceptions,
    )
    return report


def _checks(
    ours_df: pd.DataFrame, activity: pd.DataFrame, base_df: pd.DataFrame, links: pd.DataFrame | None, device: str
) -> dict[str, Any]:
    """Agreement, op links and kernel-time ratios as a dict."""
    ratios = kernel_time_ratios(ours_df, base_df)
    links_report = op_links(
        activity, links if links is not None else pd.DataFrame(columns=["kernel", "op", "ancestors"])
    )
    return {
        "agreement": agreement(ours_df, base_df).to_dict(),
        "op_links": {**links_report.to_dict(), "ancestor_pairs": ancestor_pairs(links_report)},
        "kernel_time": {
            "per_function": ratios.to_dict(orient="records"),
            "total_ratio": _div(ratios["ours_us"].sum(), ratios["baseline_us"].sum()),
            "within_5pct": times_within(ratios) if device == "cuda" else None,
            # functions carrying >= 1% of the kernel time: the tiny ones are dominated by run-to-run jitter
            "within_5pct_major": times_within(_major(ratios)) if device == "cuda" else None,
        },
    }


def _div(a: float, b: float) -> float | None:
    return float(a / b) if b else None


def _major(ratios: pd.DataFrame, share: float = 0.01) -> pd.DataFrame:
    """The functions whose baseline time is at least ``share`` of the total."""
    return ratios[ratios["baseline_us"] >= share * ratios["baseline_us"].sum()]


def _bare_cupti_fidelity(model: Any, samples: Sequence[Any], activity: pd.DataFrame) -> dict[str, Any]:
    """Fidelity against a bare cupti-python capture, or the reason it could not run."""
    try:
        return fidelity(activity["kernel"], bare_cupti_names(model, samples)).to_dict()
    except Exception as error:  # noqa: BLE001 - reported in the JSON, never fatal
        return {"error": f"{type(error).__name__}: {error}"}


# -- report ---------------------------------------------------------------------------------------------
def _mark(value: Any) -> str:
    return "n/a" if value is None else ("yes" if value else "**NO**")


def markdown(reports: Sequence[Mapping[str, Any]]) -> str:
    """One table row per model: agreement, op links, kernel-time ratio range, fidelity."""
    lines = [
        "| model | baseline rows | ours rows | agreement | op links (same op) | time ratio ours/baseline | "
        "fidelity vs torch.profiler | fidelity vs bare CUPTI | launch callback rows = pushed-id rows "
        "| function-object rows = mode rows |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        if r.get("status") != "ok":
            lines.append(f"| {r['model']} | {r.get('status')}: {r.get('reason', '')} |||||||||")
            continue
        a, o, t = r["agreement"], r["op_links"], r["kernel_time"]
        ratios = [row["ratio"] for row in t["per_function"]]
        span = (
            f"{min(ratios):.3f}–{max(ratios):.3f}, total {t['total_ratio'] or math.nan:.3f} "
            f"(all ≤5%: {_mark(t['within_5pct'])}, ≥1%-share ≤5%: {_mark(t['within_5pct_major'])})"
            if ratios
            else "n/a"
        )
        cupti = r.get("fidelity_cupti", {})
        lines.append(
            f"| {r['model']} | {a['baseline_rows']} | {a['ours_rows']} | {a['matched']}/{a['baseline_rows']} "
            f"{_mark(a['ok'])} | {o['matched']}/{o['linked']} ({o['same_op']}) {_mark(o['ok'])} | {span} | "
            f"{_fidelity_cell(r['fidelity_torch_profiler'])} | {_fidelity_cell(cupti) if cupti else 'n/a'} | "
            f"{_paths_cell(r.get('correlation_paths'), r.get('correlation'))} | "
            f"{_interception_cell(r.get('interception_paths'))} |"
        )
    return "\n".join(lines) + "\n\n" + _mapping_markdown(reports)


def _paths_cell(paths: Mapping[str, Any] | None, correlation: str | None) -> str:
    if not paths:
        return "n/a"
    return f"{paths['launch_rows']} vs {paths['push_rows']} {_mark(paths['equal'])} (ours ran with {correlation})"


def _interception_cell(paths: Mapping[str, Any] | None) -> str:
    if not paths or "equal" not in paths:
        return f"n/a (ours ran with {(paths or {}).get('default', '?')})"
    cell = f"{paths['objects_rows']} vs {paths['mode_rows']} {_mark(paths['equal'])}"
    if not paths["equal"]:
        gateless = ", ".join(paths["gateless_rows"]) or "none"
        cell += f"; {'explained' if paths['explained'] else '**NOT EXPLAINED**'}: gate-less {gateless}"
    return cell


def _fidelity_cell(report: Mapping[str, Any]) -> str:
    if "error" in report:
        return f"error: {report['error'][:60]}"
    return f"{report['ours_total']} vs {report['bare_total']} {_mark(report['equal'])}"


def _mapping_markdown(reports: Sequence[Mapping[str, Any]]) -> str:
    """The observed torch op -> our op pairs (where they differ), over all models."""
    pairs: Counter[tuple[str, str]] = Counter()
    for r in reports:
        for op, found in r.get("op_links", {}).get("ancestor_pairs", {}).items():
            pairs.update({(op, mine): n for mine, n in found.items()})
    if not pairs:
        return "Every linked kernel had the same op in both (no ancestor mapping needed).\n"
    rows = [f"| `{op}` | `{mine}` | {n} |" for (op, mine), n in sorted(pairs.items())]
    return "| torch.profiler op | our op (ancestor) | kernels |\n|---|---|---|\n" + "\n".join(rows) + "\n"


# -- self-checks and CLI --------------------------------------------------------------------------------
def self_check() -> None:
    """Assert the pure checks on synthetic frames (the CPU smoke mode; no GPU, no model)."""
    cols = ["module_name", "function_name", "op", "kernel", "kernel_us"]
    base = pd.DataFrame(
        [
            ["a", "linear", "aten::addmm", "gemm", 10.0],
            ["a", "linear", "aten::addmm", "gemm", 10.0],
            ["b", "conv2d", "aten::cudnn_convolution", "_Z4convv", 20.0],
        ],
        columns=cols,
    )
    ours = pd.DataFrame(
        [
            ["a", "linear", "aten::addmm", "gemm", 10.5],
            ["a", "linear", "aten::addmm", "gemm", 10.0],
            ["b", "conv2d", "aten::convolution", "conv()", 19.0],
            ["c", "relu", "aten::relu", "relu_k", 1.0],
        ],
        columns=cols,
    )
    report = agreement(ours, base)
    assert report.ok and report.matched == 3 and report.ours_only[0]["kernel"] == "relu_k", report  # _Z4convv = conv()
    assert not agreement(ours.iloc[1:], base).ok
    links = base.assign(ancestors=[(), (), ("aten::_convolution", "aten::convolution")])
    linked = op_links(ours, links)
    assert (
        linked.ok
        and linked.same_op == 2
        and ancestor_pairs(linked) == {"aten::cudnn_convolution": {"aten::convolution": 1}}
    ), linked
    assert not op_links(ours.assign(op="aten::mm"), links).ok
    ratios = kernel_time_ratios(ours, base).set_index("function_name")["ratio"]
    assert abs(ratios["linear"] - 20.5 / 20.0) < 1e-12 and abs(ratios["conv2d"] - 0.95) < 1e-12  # 20.5/20, 19/20
    assert fidelity(["gemm", "_Z4convv"], {"gemm": 1, "conv()": 1}).equal
    assert fidelity(["gemm"], ["gemm", "gemm"]).missing == {"gemm": 1}
    flows = _max_flow({("x", "y"): 1, ("x",): 1}, {"x": 1, "y": 1}, {("x", "y"): ("x", "y"), ("x",): ("x",)})
    assert sum(flows.values()) == 2, flows  # greedy x->x first would strand ("x",); the flow reroutes


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: compare on the zoo and write compare.json and compare.md under ``--out``."""
    args = _parser().parse_args(argv)
    if args.cpu_smoke:
        from .reference_baseline import self_check as baseline_self_check

        self_check()
        baseline_self_check()
        print("self-checks passed (agreement, op links, kernel times, fidelity, max-flow, CUDA attribution rules)")
        args.device, args.size = "cpu", "small"
        args.models = args.models or ["mlp", "sdpa_blocks", "mha_blocks", "gpt2", "resnet50", "vit_b_16"]
    from .zoo import ZOO

    names = args.models or list(ZOO)
    # every model's own runs first: the baseline's and the fidelity checks' torch.profiler keeps CUPTI's
    # callback subscription once it has run, and ours would then fall back to pushed ids
    ours = {name: _safe(profile_ours, name, args) for name in names}
    reports = [
        ours[name] if isinstance(ours[name], dict) else _safe(compare_model, name, args, ours[name]) for name in names
    ]
    text = markdown(reports)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.json").write_text(json.dumps({"device": args.device, "models": reports}, indent=1, default=str))
        (out / "compare.md").write_text(text)
    return 1 if (args.strict or args.cpu_smoke) and not all(_passed(r, args.device) for r in reports) else 0


def _safe(step: Callable[..., Any], name: str, args: argparse.Namespace, *more: Any) -> Any:
    """``step(name, ...)`` (:func:`profile_ours` or :func:`compare_model`), with a failure reported as
    ``status: error`` instead of ending the run."""
    try:
        return step(name, args.device, args.size, args.repeat, args.warmup, *more)
    except Exception as error:  # noqa: BLE001 - one model's failure must not hide the others
        return {
            "model": name,
            "status": "error",
            "reason": f"{type(error).__name__}: {error}",
            "traceback": traceback.format_exc(),
        }


def _passed(report: Mapping[str, Any], device: str) -> bool:
    """Agreement, op links and fidelity all hold (kernel times too on CUDA); skipped models pass."""
    if report.get("status") != "ok":
        return report.get("status") == "skipped"
    checks = [report["agreement"]["ok"], report["op_links"]["ok"], report["fidelity_torch_profiler"]["equal"]]
    interceptions = report.get("interception_paths") or {}
    if "equal" in interceptions:  # the default hooked the function objects: the mode's rows must agree
        checks.append(interceptions["equal"] or interceptions["explained"])
    if device == "cuda":
        checks += [report["kernel_time"]["within_5pct"], report.get("fidelity_cupti", {}).get("equal", False)]
        paths = report.get("correlation_paths") or {}
        checks += [paths.get("equal", False), report.get("correlation") == "launch"]
    return all(checks)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare_reference", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", choices=DEVICES)
    parser.add_argument("--models", nargs="*", help="zoo models (default: all)")
    parser.add_argument("--size", default="bench", choices=["bench", "small"])
    parser.add_argument("--repeat", type=int, default=1, help="repeat the samples (more kernels per function)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", help="folder for compare.json and compare.md")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a check fails")
    parser.add_argument("--cpu-smoke", action="store_true", help="self-checks, then the small zoo on the CPU (strict)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
