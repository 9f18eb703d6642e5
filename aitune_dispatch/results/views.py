"""Views of a finished result that the reports show: kernels, modules, unattributed time, headline.

Pure pandas / Arrow over a :class:`ProfileResult` (no torch, no rendering): each function returns
a DataFrame (or a small dataclass) whose columns are documented in its docstring. Every share is
over **all** kernel time of the run (``ProfileResult.total_us``), attributed or not, so the shares
of one view add up to 100 % and agree with every other view. Repeated layers are grouped by
:func:`layer_pattern` (``encoder.layers.3.linear1`` -> ``encoder.layers.*.linear1``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from .. import schema
from ..joining import attributed_mask

if TYPE_CHECKING:
    from .profile_result import ProfileResult

_INDEX = re.compile(r"^\d+$")

# Ops that run a whole module's inference fast path in one fused C++ kernel sequence: no
# torch.nn.functional call encloses them (nn.TransformerEncoderLayer, nn.MultiheadAttention).
FAST_PATH_OPS = frozenset(
    {
        "aten::_transformer_encoder_layer_fwd",
        "aten::_native_multi_head_attention",
        "aten::_nested_tensor_from_mask",
    }
)

KERNEL_COLUMNS = [
    "kernel",  # the full kernel name (CUDA), "Memcpy ..." / "Memset ...", or "cpu::<op>"
    "kind",  # "kernel", "memcpy", "memset" or "cpu_op"
    "op",  # the aten op that launched it; None when no op claimed it
    "function_name",  # the innermost functional call; None outside any
    "module",  # the launching module's group label (module_groups); None outside the hierarchy
    "modules",  # distinct modules of that pattern that launched it
    "calls",  # launches (activity rows)
    "total_us",  # summed duration, microseconds
    "mean_us",  # total_us / calls
    "share",  # total_us / all kernel time (0..1)
]

MODULE_COLUMNS = [
    "pattern",  # the group label (module_groups): a layer pattern, a module name, or "<Type> (root)"
    "module_type",  # the nn.Module class name
    "depth",  # 0 for the root module, 1 for its children, ...
    "parent",  # the parent row's pattern; None for the root
    "instances",  # modules with this pattern
    "forwards",  # forward calls of those modules in the recorded pass
    "total_us",  # kernel time of the modules and their descendants, microseconds
    "self_us",  # kernel time launched directly in the modules (not in a submodule)
    "share",  # total_us / all kernel time (0..1)
    "top_function",  # the functional call with the most kernel time directly in these modules; None if none
    "members",  # list of (module name, total_us), largest first: the instances behind the pattern
]

UNATTRIBUTED_COLUMNS = [
    "reason",  # one of REASONS
    "op",  # the op that launched the kernels; None when no op claimed them
    "module",  # the launching module's group label (module_groups); None outside the hierarchy
    "kernels",  # activity rows
    "total_us",  # summed duration, microseconds
    "share",  # total_us / all kernel time (0..1)
    "why",  # the reason in words
    "hint",  # what to do about it
]

REASONS = {
    "fast_path": "a fused fast-path op: the module ran its inference fast path, which makes no "
    "torch.nn.functional call",
    "raw_op": "a raw torch op outside any functional call (a torch.* function or a tensor method)",
    "no_op": "launched outside any aten op (a Triton kernel, a CUDA graph replay or a raw driver call) "
    "and outside any functional call",
    "outside_modules": "ran outside the profiled module's forward",
}

HINTS = {
    "fast_path": "its kernels are counted on the module (module table); to see them per functional call, "
    "profile with torch.backends.mha.set_fastpath_enabled(False)",
    "raw_op": 'profile with functions="all" (CLI: --functions all) to attribute it to the torch-level call',
    "raw_op_all": 'functions="all" was on: the op was called from C++ or through a path no torch-level call '
    "wraps; its kernels stay on the module",
    "no_op": "its kernels are counted on the module it was launched in",
    "outside_modules": "pass module= the outermost module that runs it (profile(function, module=...))",
}


def layer_pattern(name: str) -> str:
    """A module name with every numeric component replaced by ``*``.

    Parameters
    ----------
    name:
        A qualified module name such as ``encoder.layers.3.linear1``.

    Returns
    -------
    str
        ``encoder.layers.*.linear1``: repeated layers (``nn.ModuleList`` / ``nn.Sequential``
        children) share one pattern.
    """
    return ".".join("*" if _INDEX.match(part) else part for part in name.split(".")) if name else name


def module_label(name: str | None, module_type: str | None) -> str:
    """How a module is shown: its qualified name, or ``<Type> (root)`` for the unnamed root.

    Parameters
    ----------
    name:
        The module's qualified name (``""`` for the root module).
    module_type:
        Its class name.

    Returns
    -------
    str
        ``name`` when it has one, else e.g. ``DemoModel (root)``.
    """
    if name:
        return name
    return f"{module_type or 'module'} (root)"


def local_name(name: str | None, module_type: str | None) -> str:
    """The last component of a module name (``qkv`` for ``blocks.0.qkv``); the root's label for the root."""
    return name.rsplit(".", 1)[-1] if name else module_label(name, module_type)


def _modules_frame(result: ProfileResult) -> pd.DataFrame:
    modules = result.modules.to_pandas()
    modules["module_name"] = modules["module_name"].astype(object).fillna("")
    modules["module_type"] = modules["module_type"].astype(object).fillna("")
    return modules.set_index("module_id", drop=False)


def _pattern_labels(modules: pd.DataFrame) -> pd.Series:
    """``module_id -> group label``: the layer pattern where several modules of one type share it, else the name."""
    names = [module_label(n, t) for n, t in zip(modules["module_name"], modules["module_type"])]
    # the root keeps its label also where several roots share it (the ranks of a merged result)
    own = [layer_pattern(n) or label for n, label in zip(modules["module_name"], names)]
    patterns = pd.Series(own, index=modules.index, dtype=object)
    shared = patterns.groupby([patterns, modules["module_type"]]).transform("size") > 1
    return patterns.where(shared, pd.Series(names, index=modules.index, dtype=object))


def module_groups(result: ProfileResult) -> dict[int, str]:
    """``module_id -> group label`` of every module: repeated layers share their :func:`layer_pattern`.

    Parameters
    ----------
    result:
        A finished (or loaded) result.

    Returns
    -------
    dict[int, str]
        ``blocks.*.qkv`` for ``blocks.0.qkv`` and ``blocks.1.qkv`` (same pattern, same type);
        a module whose pattern no other module of its type shares keeps its own name
        (``stem.0``), the root is ``<Type> (root)``.
    """
    if result.modules.num_rows == 0:
        return {}
    return {int(k): str(v) for k, v in _pattern_labels(_modules_frame(result)).items()}


def _activity_frame(result: ProfileResult) -> pd.DataFrame:
    columns = ["kernel", "kind", "kernel_us", "op", "module_id", "call_id", "function_name", "op_id"]
    frame = result.activity.select(columns).to_pandas()
    for column in ("kernel", "kind", "op", "function_name"):
        frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame


def kernel_table(result: ProfileResult, top: int | None = None) -> pd.DataFrame:
    """Kernel time per (kernel, op, functional call, module pattern), largest first.

    Parameters
    ----------
    result:
        A finished (or loaded) result.
    top:
        Keep only the first ``top`` rows; None keeps all.

    Returns
    -------
    pandas.DataFrame
        Columns ``KERNEL_COLUMNS``: one row per distinct kernel name launched by one op inside one
        functional call of one layer pattern (``blocks.*.qkv`` covers ``blocks.0.qkv`` and
        ``blocks.1.qkv``), attributed or not; ``share`` is over all kernel time.
    """
    frame = _activity_frame(result)
    if frame.empty:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in KERNEL_COLUMNS})
    modules = _modules_frame(result)
    patterns = _pattern_labels(modules)
    frame["module"] = frame["module_id"].map(patterns).astype(object)
    frame["module"] = frame["module"].where(frame["module"].notna(), None)
    keys = ["kernel", "kind", "op", "function_name", "module"]
    frame["module_id"] = frame["module_id"].where(frame["module_id"] >= 0)  # outside the hierarchy: no module
    grouped = frame.groupby(keys, dropna=False, sort=False).agg(
        calls=("kernel_us", "size"), total_us=("kernel_us", "sum"), modules=("module_id", "nunique")
    )
    table = grouped.reset_index()
    for column in keys:
        table[column] = table[column].astype(object).where(table[column].notna(), None)
    table["mean_us"] = table["total_us"] / table["calls"]
    table["share"] = table["total_us"] / result.total_us if result.total_us > 0 else 0.0
    table = table.sort_values(["total_us", "kernel"], ascending=[False, True], kind="stable")
    table = table[KERNEL_COLUMNS].reset_index(drop=True)
    return table if top is None else table.head(int(top))


def _inclusive(self_us: pd.Series, parents: Mapping[int, int]) -> pd.Series:
    depth: dict[int, int] = {}
    for module_id in self_us.index:  # depth by walking up; trees are small next to activity
        chain, node = [], module_id
        while node in parents and node not in depth and len(chain) <= len(parents):
            chain.append(node)
            node = parents[node]
        base = depth.get(node, -1)
        for offset, item in enumerate(reversed(chain)):
            depth[item] = base + offset + 1
    total = self_us.astype(float).copy()
    for module_id in sorted(total.index, key=lambda m: -depth.get(m, 0)):  # children before parents
        parent = parents.get(module_id, schema.NO_MODULE)
        if parent in total.index:
            total[parent] += total[module_id]
    return total


def _top_function(frame: pd.DataFrame) -> dict[int, str]:
    called = frame[frame["call_id"] >= 0]
    if called.empty:
        return {}
    sums = called.groupby(["module_id", "function_name"], sort=False)["kernel_us"].sum().reset_index()
    best = sums.sort_values("kernel_us", ascending=False, kind="stable").drop_duplicates("module_id")
    return dict(zip(best["module_id"], best["function_name"]))


def _per_module(result: ProfileResult) -> pd.DataFrame:
    modules = _modules_frame(result)
    frame = _activity_frame(result)
    inside = frame[frame["module_id"] >= 0]
    self_us = inside.groupby("module_id")["kernel_us"].sum().reindex(modules.index, fill_value=0.0)
    parents = dict(zip(modules["module_id"], modules["parent_module_id"]))
    forwards = result.module_calls["module_id"].to_pandas().value_counts()
    top = _top_function(inside)
    modules["self_us"] = self_us.astype(float)
    modules["total_us"] = _inclusive(self_us, parents)
    modules["forwards"] = forwards.reindex(modules.index, fill_value=0).astype(np.int64)
    modules["top_function"] = [top.get(m) for m in modules.index]
    modules["pattern"] = _pattern_labels(modules)
    parent_pattern = modules["parent_module_id"].map(modules["pattern"])
    modules["parent"] = parent_pattern.astype(object).where(parent_pattern.notna(), None)
    modules["label"] = [module_label(n, t) for n, t in zip(modules["module_name"], modules["module_type"])]
    modules["depth"] = [n.count(".") + 1 if n else 0 for n in modules["module_name"]]
    return modules


def _group_rows(modules: pd.DataFrame, total_us: float) -> list[dict[str, Any]]:
    rows = []
    for (pattern, module_type), group in modules.groupby(["pattern", "module_type"], sort=False):
        group = group.sort_values("total_us", ascending=False, kind="stable")
        named = [n for n in group["top_function"] if isinstance(n, str)]
        rows.append(
            {
                "pattern": pattern,
                "module_type": module_type,
                "depth": int(group["depth"].iloc[0]),
                "parent": group["parent"].iloc[0],
                "instances": len(group),
                "forwards": int(group["forwards"].sum()),
                "total_us": float(group["total_us"].sum()),
                "self_us": float(group["self_us"].sum()),
                "share": float(group["total_us"].sum()) / total_us if total_us > 0 else 0.0,
                "top_function": max(set(named), key=named.count) if named else None,
                "members": list(zip(group["label"], group["total_us"].astype(float))),
            }
        )
    return rows


def _tree_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    children: dict[Any, list[dict[str, Any]]] = {}
    patterns = {row["pattern"] for row in rows}
    for row in rows:
        parent = row["parent"] if row["parent"] in patterns and row["parent"] != row["pattern"] else None
        children.setdefault(parent, []).append(row)
    ordered: list[dict[str, Any]] = []
    stack = sorted(children.get(None, []), key=lambda r: r["total_us"])
    seen: set[int] = set()
    while stack:  # iterative depth-first walk, largest child first
        row = stack.pop()
        if id(row) in seen:
            continue
        seen.add(id(row))
        ordered.append(row)
        stack.extend(sorted(children.get(row["pattern"], []), key=lambda r: r["total_us"]))
    return ordered


def module_table(result: ProfileResult) -> pd.DataFrame:
    """Kernel time per module, repeated layers grouped by :func:`layer_pattern`, in tree order.

    Parameters
    ----------
    result:
        A finished (or loaded) result.

    Returns
    -------
    pandas.DataFrame
        Columns ``MODULE_COLUMNS``, one row per (layer pattern, module type), parents before their
        children and siblings largest first. ``total_us`` includes the submodules' kernels (so rows
        nest rather than add up); ``self_us`` over all rows plus the time outside the hierarchy is
        all kernel time. ``members`` lists the grouped instances.
    """
    if result.modules.num_rows == 0:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in MODULE_COLUMNS})
    rows = _tree_order(_group_rows(_per_module(result), result.total_us))
    table = pd.DataFrame({c: pd.Series([row[c] for row in rows], dtype=object) for c in MODULE_COLUMNS})
    numbers = {"instances": np.int64, "forwards": np.int64, "depth": np.int64}
    return table.astype(numbers | {c: float for c in ("total_us", "self_us", "share")})


def _reason(op: str | None, module_id: int, call_id: int) -> str:
    if module_id < 0:
        return "outside_modules"
    if op is None:
        return "no_op"
    return "fast_path" if op in FAST_PATH_OPS else "raw_op"


def unattributed_table(result: ProfileResult, top: int | None = None) -> pd.DataFrame:
    """The kernel time ``profiling_df()`` leaves out, by reason, op and module, largest first.

    Parameters
    ----------
    result:
        A finished (or loaded) result.
    top:
        Keep only the first ``top`` rows; None keeps all.

    Returns
    -------
    pandas.DataFrame
        Columns ``UNATTRIBUTED_COLUMNS``, one row per (reason, op, module group): the twelve
        layers of an encoder are one row ``layers.*``. ``reason`` is ``fast_path`` (a fused fast-path op such
        as ``aten::_transformer_encoder_layer_fwd``), ``raw_op`` (an op outside any functional
        call), ``no_op`` (a launch outside any aten op) or ``outside_modules``; ``why`` says it in
        words and ``hint`` what to do. Empty when everything was attributed.
    """
    rows = result.activity.filter(pc.invert(attributed_mask(result.activity)))
    if rows.num_rows == 0:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in UNATTRIBUTED_COLUMNS})
    frame = rows.select(["op", "module_id", "call_id", "kernel_us"]).to_pandas()
    frame["op"] = frame["op"].astype(object).where(frame["op"].notna(), None)
    frame["reason"] = [_reason(o, m, c) for o, m, c in zip(frame["op"], frame["module_id"], frame["call_id"])]
    labels = _pattern_labels(_modules_frame(result)) if result.modules.num_rows else pd.Series(dtype=object)
    frame["module"] = frame["module_id"].map(labels).astype(object)
    frame["module"] = frame["module"].where(frame["module"].notna(), None)
    grouped = frame.groupby(["reason", "op", "module"], dropna=False, sort=False)["kernel_us"].agg(["size", "sum"])
    table = grouped.reset_index().rename(columns={"size": "kernels", "sum": "total_us"})
    for column in ("op", "module"):
        table[column] = table[column].astype(object).where(table[column].notna(), None)
    table["share"] = table["total_us"] / result.total_us if result.total_us > 0 else 0.0
    all_mode = result.metadata.get("functions") == "all"
    table["why"] = table["reason"].map(REASONS)
    table["hint"] = [HINTS["raw_op_all" if r == "raw_op" and all_mode else r] for r in table["reason"]]
    table = table.sort_values("total_us", ascending=False, kind="stable")[UNATTRIBUTED_COLUMNS].reset_index(drop=True)
    return table if top is None else table.head(int(top))


@dataclass(frozen=True)
class Headline:
    """The run in a few numbers: what a notebook cell or a summary line shows first.

    Attributes
    ----------
    source, device:
        The activity source (``cupti/native``, ``cpu``, ...) and ``metadata["device"]`` ("" if unknown).
    activity_rows, attributed_rows, kernels:
        Activity rows, those ``profiling_df()`` reports, and distinct kernel names.
    total_us, attributed_us, coverage:
        All kernel time, attributed kernel time (µs) and their ratio (NaN when nothing ran).
    top_functions:
        ``(function_name, kernel µs)`` of the most expensive functional calls, largest first.
    """

    source: str
    device: str
    activity_rows: int
    attributed_rows: int
    kernels: int
    total_us: float
    attributed_us: float
    coverage: float
    top_functions: tuple[tuple[str, float], ...]


def headline(result: ProfileResult, top: int = 3) -> Headline:
    """The headline numbers of ``result``.

    Parameters
    ----------
    result:
        A finished (or loaded) result.
    top:
        How many functional calls ``top_functions`` names.

    Returns
    -------
    Headline
        Counts, times, coverage and the top functional calls.
    """
    attributed = result.attributed()
    functions: tuple[tuple[str, float], ...] = ()
    if attributed.num_rows:
        sums = attributed.group_by("function_name").aggregate([("kernel_us", "sum")]).to_pydict()
        pairs = sorted(zip(sums["function_name"], sums["kernel_us_sum"]), key=lambda p: (-p[1], p[0]))
        functions = tuple((str(name), float(us)) for name, us in pairs[:top])
    kernels = len(pc.unique(result.activity["kernel"])) if result.activity.num_rows else 0
    total = result.total_us
    return Headline(
        source=result.source,
        device=str(result.metadata.get("device", "")),
        activity_rows=result.activity.num_rows,
        attributed_rows=attributed.num_rows,
        kernels=kernels,
        total_us=total,
        attributed_us=result.attributed_us,
        coverage=result.attributed_us / total if total > 0 else math.nan,
        top_functions=functions,
    )


def activity_kinds(result: ProfileResult) -> dict[str, int]:
    """Activity rows per kind (``kernel``, ``memcpy``, ``memset``, ``cpu_op``), most first."""
    if result.activity.num_rows == 0:
        return {}
    counts = pc.value_counts(result.activity["kind"]).to_pylist()
    pairs = sorted(((c["values"], c["counts"]) for c in counts), key=lambda p: (-p[1], str(p[0])))
    return {str(kind): int(count) for kind, count in pairs}
