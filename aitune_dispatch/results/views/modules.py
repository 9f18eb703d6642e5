"""The module hierarchy's views: layer patterns, labels, the module table and the module tree, with
repeated layers grouped under one pattern so a deep model reads as its few kinds of layer."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ... import encoded, schema
from ...schema import MODULE_COLUMNS
from .accounting import ResultTables, total_us
from .frames import STRING_DTYPE

_INDEX = re.compile(r"^\d+$")
_MODULE_DTYPES: dict[str, Any] = {
    **{c: np.int64 for c in ("depth", "instances", "forwards")},
    **{c: np.float64 for c in ("total_us", "share", "top_function_us", "self_us", "top_self_function_us")},
    **{c: STRING_DTYPE for c in ("pattern", "module_type", "parent", "top_function", "top_self_function")},
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
        ``encoder.layers.*.linear1``: repeated layers share one pattern.
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
    """The last component of a module name (``qkv`` for ``blocks.0.qkv``); the root's label for the root.

    Parameters
    ----------
    name:
        The module's dotted name; ``""`` (or None) for the root.
    module_type:
        Its class name, which labels the root (``DemoModel (root)``).

    Returns
    -------
    str
        The icicle's label of the module.
    """
    return name.rsplit(".", 1)[-1] if name else module_label(name, module_type)


def module_labels(result: ResultTables) -> dict[int, tuple[str, str]]:
    """``module_id -> (label, module_type)`` for every module of the result (:func:`module_label`).

    Parameters
    ----------
    result:
        A result.

    Returns
    -------
    dict of int to (str, str)
    """
    modules = result.modules.to_pydict()
    return {
        module_id: (module_label(name, kind), kind or "")
        for module_id, name, kind in zip(modules["module_id"], modules["module_name"], modules["module_type"])
    }


def modules_frame(result: ResultTables) -> pd.DataFrame:
    """The modules table as a DataFrame indexed by ``module_id``, names and types never null."""
    modules = encoded.decoded(result.modules).to_pandas()
    modules["module_name"] = modules["module_name"].astype(object).fillna("")
    modules["module_type"] = modules["module_type"].astype(object).fillna("")
    return modules.set_index("module_id", drop=False)


def pattern_labels(modules: pd.DataFrame) -> pd.Series:
    """``module_id -> group label``: the layer pattern where several modules of one type share it, else the name."""
    names = [module_label(n, t) for n, t in zip(modules["module_name"], modules["module_type"])]
    # the root keeps its label also where several roots share it (the ranks of a merged result)
    own = [layer_pattern(n) or label for n, label in zip(modules["module_name"], names)]
    patterns = pd.Series(own, index=modules.index, dtype=object)
    shared = patterns.groupby([patterns, modules["module_type"]]).transform("size") > 1
    return patterns.where(shared, pd.Series(names, index=modules.index, dtype=object))


def module_groups(result: ResultTables) -> dict[int, str]:
    """``module_id -> group label`` of every module: repeated layers share their :func:`layer_pattern`.

    Parameters
    ----------
    result:
        A finished (or loaded) result.

    Returns
    -------
    dict[int, str]
        ``blocks.*.qkv`` for ``blocks.0.qkv`` and ``blocks.1.qkv`` of one type; a module whose
        pattern no other of its type shares keeps its name.
    """
    if result.modules.num_rows == 0:
        return {}
    return {int(k): str(v) for k, v in pattern_labels(modules_frame(result)).items()}


def activity_frame(result: ResultTables) -> pd.DataFrame:
    """The activity columns the views group by, as a DataFrame with None (not NaN) for missing names."""
    columns = ["kernel", "kind", "kernel_us", "op", "module_id", "call_id", "function_name", "op_id"]
    frame = encoded.decoded(result.activity.select(columns)).to_pandas()
    for column in ("kernel", "kind", "op", "function_name"):
        frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame


def _inclusive(self_us: pd.Series, parents: Mapping[int, int]) -> pd.Series:
    depth: dict[int, int] = {}
    for module_id in self_us.index:  # depth by walking up; trees are small next to activity
        chain: list[int] = []
        node = module_id
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


def _ancestors(module_ids: pd.Index, parents: Mapping[int, int]) -> pd.DataFrame:
    """(module_id, ancestor) for every module and each module above it, itself included."""
    pairs: list[tuple[int, int]] = []
    for module_id in module_ids:
        node, seen = module_id, 0
        while node != schema.NO_MODULE and seen <= len(parents):
            pairs.append((module_id, node))
            node, seen = parents.get(node, schema.NO_MODULE), seen + 1
    return pd.DataFrame(pairs, columns=["module_id", "ancestor"])


def _function_times(
    inside: pd.DataFrame, modules: pd.DataFrame, parents: Mapping[int, int]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Kernel time per (module, functional call): launched in the module itself (own), and in it or
    any module below it (inclusive)."""
    called = inside[inside["call_id"] >= 0]
    own = called.groupby(["module_id", "function_name"], sort=False, observed=True)["kernel_us"].sum().reset_index()
    up = own.merge(_ancestors(modules.index, parents), on="module_id")
    inclusive = up.groupby(["ancestor", "function_name"], sort=False, observed=True)["kernel_us"].sum().reset_index()
    return own, inclusive.rename(columns={"ancestor": "module_id"})


def _top_per_group(times: pd.DataFrame, group_of: pd.Series) -> dict[Any, tuple[str, float]]:
    """The functional call with the most kernel time over each group's modules, and that time."""
    if times.empty:
        return {}
    frame = times.assign(group=times["module_id"].map(group_of)).dropna(subset=["group"])
    sums = frame.groupby(["group", "function_name"], sort=False, observed=True)["kernel_us"].sum().reset_index()
    best = sums.sort_values(["kernel_us", "function_name"], ascending=[False, True], kind="stable")
    best = best.drop_duplicates("group")
    return {g: (str(n), float(us)) for g, n, us in zip(best["group"], best["function_name"], best["kernel_us"])}


def _per_module(result: ResultTables) -> pd.DataFrame:
    modules = modules_frame(result)
    frame = activity_frame(result)
    inside = frame[frame["module_id"] >= 0]
    self_us = inside.groupby("module_id")["kernel_us"].sum().reindex(modules.index, fill_value=0.0)
    parents = dict(zip(modules["module_id"], modules["parent_module_id"]))
    forwards = result.module_calls["module_id"].to_pandas().value_counts()
    modules["self_us"] = self_us.astype(float)
    modules["total_us"] = _inclusive(self_us, parents)
    modules["forwards"] = forwards.reindex(modules.index, fill_value=0).astype(np.int64)
    modules["pattern"] = pattern_labels(modules)
    parent_pattern = modules["parent_module_id"].map(modules["pattern"])
    modules["parent"] = parent_pattern.astype(object).where(parent_pattern.notna(), None)
    modules["label"] = [module_label(n, t) for n, t in zip(modules["module_name"], modules["module_type"])]
    modules["depth"] = [n.count(".") + 1 if n else 0 for n in modules["module_name"]]
    modules["group"] = list(zip(modules["pattern"], modules["module_type"]))
    own, inclusive = _function_times(inside, modules, parents)
    modules.attrs["top_own"] = _top_per_group(own, modules["group"])
    modules.attrs["top_inclusive"] = _top_per_group(inclusive, modules["group"])
    return modules


def _group_rows(modules: pd.DataFrame, total_us: float) -> list[dict[str, Any]]:
    rows = []
    top_own, top_inclusive = modules.attrs["top_own"], modules.attrs["top_inclusive"]
    for (pattern, module_type), group in modules.groupby(["pattern", "module_type"], sort=False):
        group = group.sort_values("total_us", ascending=False, kind="stable")
        inclusive = top_inclusive.get((pattern, module_type), (None, 0.0))
        own = top_own.get((pattern, module_type), (None, 0.0))
        rows.append(
            {
                "pattern": pattern,
                "module_type": module_type,
                "depth": int(group["depth"].iloc[0]),
                "parent": group["parent"].iloc[0],
                "instances": len(group),
                "forwards": int(group["forwards"].sum()),
                "total_us": float(group["total_us"].sum()),
                "share": float(group["total_us"].sum()) / total_us if total_us > 0 else 0.0,
                "top_function": inclusive[0],
                "top_function_us": inclusive[1],
                "self_us": float(group["self_us"].sum()),
                "top_self_function": own[0],
                "top_self_function_us": own[1],
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


def module_table(result: ResultTables) -> pd.DataFrame:
    """Kernel time per module, repeated layers grouped by :func:`layer_pattern`, in tree order.

    Parameters
    ----------
    result:
        A finished (or loaded) result.

    Returns
    -------
    pandas.DataFrame
        ``MODULE_COLUMNS``, one row per (layer pattern, module type), parents first, siblings
        largest first. ``total_us`` nests; ``self_us`` over all rows plus the time outside the
        hierarchy is all kernel time.
    """
    if result.modules.num_rows == 0:
        return pd.DataFrame({c: pd.Series([], dtype=_MODULE_DTYPES.get(c, object)) for c in MODULE_COLUMNS})
    rows = _tree_order(_group_rows(_per_module(result), total_us(result.activity)))
    table = pd.DataFrame({c: pd.Series([row[c] for row in rows], dtype=object) for c in MODULE_COLUMNS})
    return table.astype(_MODULE_DTYPES)


# -- the module tree: what the report's icicle draws -------------------------------------------------
def _per_module_function(activity: pa.Table) -> dict[int, list[tuple[str | None, float]]]:
    if activity.num_rows == 0:
        return {}
    attributed = pc.greater_equal(activity["call_id"], 0)
    no_call = pa.scalar(None, activity.schema.field("function_name").type)  # keeps the column's dictionary type
    names = pc.if_else(attributed, activity["function_name"], no_call)
    table = pa.table({"module_id": activity["module_id"], "function_name": names, "us": activity["kernel_us"]})
    grouped = table.group_by(["module_id", "function_name"]).aggregate([("us", "sum")]).to_pydict()
    out: dict[int, list[tuple[str | None, float]]] = {}
    for module_id, name, us in zip(grouped["module_id"], grouped["function_name"], grouped["us_sum"]):
        out.setdefault(module_id, []).append((name, float(us)))
    return out


def _leaves(parts: list[tuple[str | None, float]]) -> list[dict[str, Any]]:
    named = sorted((p for p in parts if p[0] is not None), key=lambda p: -p[1])
    leaves: list[dict[str, Any]] = [
        {"name": name, "kind": "function", "total_us": us, "children": []} for name, us in named
    ]
    no_call = sum(us for name, us in parts if name is None)
    if no_call > 0:
        leaves.append({"name": "(no functional call)", "kind": "nocall", "total_us": no_call, "children": []})
    return leaves


def _module_nodes(result: ResultTables, parts: dict[int, list[tuple[str | None, float]]]) -> dict[int, dict[str, Any]]:
    modules = result.modules.to_pydict()
    nodes = {}
    for module_id, name, module_type in zip(modules["module_id"], modules["module_name"], modules["module_type"]):
        own = parts.get(module_id, [])
        nodes[module_id] = {
            "name": local_name(name, module_type),
            "path": module_label(name, module_type),
            "type": module_type or "",
            "kind": "module",
            "module_id": module_id,
            "self_us": sum(us for _, us in own),
            "no_call_us": sum(us for name, us in own if name is None),
            "children": [],
            "leaves": _leaves(own),
        }
    return nodes


def _link_and_total(nodes: dict[int, dict[str, Any]], parents: Mapping[int, int]) -> list[dict[str, Any]]:
    roots: list[dict[str, Any]] = []
    for module_id in sorted(nodes):
        parent = parents.get(module_id, schema.NO_MODULE)
        (nodes[parent]["children"] if parent in nodes else roots).append(nodes[module_id])
    order, stack = [], list(roots)
    while stack:  # iterative: module trees can be deeper than the recursion limit allows
        node = stack.pop()
        order.append(node)
        stack.extend(node["children"])
    for node in reversed(order):  # children before parents
        node["children"] = node["children"] + node.pop("leaves")
        node["total_us"] = node["self_us"] + sum(c["total_us"] for c in node["children"] if c["kind"] == "module")
    return roots


def module_tree(result: ResultTables) -> dict[str, Any]:
    """Kernel time over the module tree: ``total_us`` of a module includes its descendants.

    Parameters
    ----------
    result:
        The result to draw.

    Returns
    -------
    dict
        Nested nodes ``{name, kind, total_us, children}`` (``name`` local, ``path`` qualified): a
        module's submodules, then a leaf per functional call made directly in it, then
        ``(no functional call)``. The top node ``all activity`` also holds
        ``(outside profiled modules)``.
    """
    parts = _per_module_function(result.activity)
    nodes = _module_nodes(result, parts)
    modules = result.modules.to_pydict()
    roots = _link_and_total(nodes, dict(zip(modules["module_id"], modules["parent_module_id"])))
    outside = sum(us for module_id, rows in parts.items() if module_id not in nodes for _, us in rows)
    children = sorted(roots, key=lambda n: -n["total_us"])
    if outside > 0:
        children.append({"name": "(outside profiled modules)", "kind": "outside", "total_us": outside, "children": []})
    return {
        "name": "all activity",
        "kind": "all",
        "total_us": sum(c["total_us"] for c in children),
        "children": children,
    }
