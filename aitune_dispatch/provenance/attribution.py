"""Joining, continued: compiled kernels and CUDA graph replays attributed to module, functional call and op.

Pure functions over Arrow tables (no torch) applied to the joined activity: replayed kernels take
their capture's attribution, Inductor kernels are matched to their call sites, and a fused kernel
goes to the call whose result it computes; the rules: ``docs/design.md``, "Compiled and graph
attribution".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .. import encoded, schema

_NONE = -1
def _ints(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(column, _NONE).to_numpy(), dtype=np.int64)


def _objects(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A string column as an object array sharing one Python string per distinct value."""
    return encoded.objects(column)


# -- the fusion rule -------------------------------------------------------------------------------------
def ranked_sources(site_sources: pa.Table) -> pd.DataFrame:
    """``SITE_SOURCES`` plus ``rank``: 0 the latest functional source (else the latest), then latest first."""
    frame = site_sources.to_pandas()
    if frame.empty:
        return frame.assign(rank=pd.Series([], dtype=np.int64))
    frame["_functional"] = frame["function_name"].notna()
    frame = frame.sort_values(["site_id", "_functional", "order"], ascending=[True, False, False], kind="stable")
    first = ~frame["site_id"].duplicated()
    frame["_dominant"] = first
    frame = frame.sort_values(["site_id", "_dominant", "order"], ascending=[True, False, False], kind="stable")
    frame["rank"] = frame.groupby("site_id").cumcount().astype(np.int64)
    for column in ("function_name", "op", "source"):  # None for missing, whatever pandas infers for strings
        frame[column] = pd.Series(_clean(frame[column].to_numpy(object)), index=frame.index, dtype=object)
    return frame.drop(columns=["_functional", "_dominant"]).reset_index(drop=True)


# -- matching launches to sites ------------------------------------------------------------------------
def _best_sites(sites: pd.DataFrame, extern: bool) -> pd.DataFrame:
    """Per key, the sites launches are matched to: those of the best priority present, in launch order."""
    chosen = sites[sites["extern"] == extern]
    if chosen.empty:
        return chosen
    best = chosen.groupby("key")["priority"].transform("min")
    return chosen[chosen["priority"] == best].sort_values(["key", "priority", "program_id", "position"])


def _site_lists(sites: pd.DataFrame, extern: bool) -> tuple[dict[str, int], np.ndarray, np.ndarray, np.ndarray]:
    chosen = _best_sites(sites, extern)
    if chosen.empty:
        return {}, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    keys = {key: i for i, key in enumerate(chosen["key"].drop_duplicates())}
    codes = chosen["key"].map(keys).to_numpy(np.int64)
    counts = np.bincount(codes, minlength=len(keys)).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return keys, offsets, counts, chosen["site_id"].to_numpy(np.int64)


def match_in_order(keys: np.ndarray, sites: pd.DataFrame, extern: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(site_id, graph run)`` of each launch's key (None: no candidate), launches in launch order.

    The k-th launch of a key shared by n sites goes to the (k mod n)-th, in run k div n; unmatched:
    NO_SITE and -1.
    """
    count = len(keys)
    site = np.full(count, schema.NO_SITE, np.int64)
    run = np.full(count, _NONE, np.int64)
    lookup, offsets, counts, flat = _site_lists(sites, extern)
    if not lookup or not count:
        return site, run
    codes = pd.Series(keys, dtype=object).map(lookup)
    known = codes.notna().to_numpy()
    if not known.any():
        return site, run
    code = codes[known].to_numpy(np.int64)
    occurrence = pd.Series(code).groupby(code).cumcount().to_numpy(np.int64)
    site[known] = flat[offsets[code] + occurrence % counts[code]]
    run[known] = occurrence // counts[code]
    return site, run


def _chain(module_id: int, parents: dict[int, int]) -> list[int]:
    """``module_id`` and its ancestors, innermost first."""
    chain = []
    while module_id >= 0 and module_id not in chain:
        chain.append(module_id)
        module_id = parents.get(module_id, schema.NO_MODULE)
    return chain


def key_scopes(
    sites: pd.DataFrame, site_sources: pd.DataFrame, modules: pa.Table, extern: bool
) -> dict[str, frozenset[int] | None]:
    """Per key, the modules its launches may run in: the lowest common ancestor of its sources' and above.

    None where no module of the key's sources was found: any module may run it.
    """
    chosen = _best_sites(sites, extern)
    if chosen.empty:
        return {}
    parents = dict(zip(modules["module_id"].to_pylist(), modules["parent_module_id"].to_pylist()))
    found = chosen[["site_id", "key"]].merge(site_sources[["site_id", "module_id"]], on="site_id")
    found = found[found["module_id"] >= 0]
    scopes: dict[str, frozenset[int] | None] = dict.fromkeys(chosen["key"].unique())
    for key, group in found.groupby("key", sort=False):
        chains = [_chain(int(m), parents) for m in group["module_id"].unique()]
        common = set(chains[0]).intersection(*chains[1:])
        lowest = next((m for m in chains[0] if m in common), None)
        scopes[key] = frozenset(_chain(lowest, parents)) if lowest is not None else None
    return scopes


def in_scope(
    keys: np.ndarray,
    runtime_module: np.ndarray,
    scopes: dict[str, frozenset[int] | None],
    outside_ok: bool = False,
) -> np.ndarray:
    """``keys`` with None where the launch ran outside its key's scope (:func:`key_scopes`).

    ``outside_ok``: a launch outside the hierarchy is in scope too (a root compiled in place runs its
    hooks compiled, so its launches have no module).
    """
    known = pd.Series(keys, dtype=object).notna().to_numpy()
    if not known.any():
        return keys
    pairs = pd.DataFrame(
        [(k, m) for k, chain in scopes.items() if chain is not None for m in chain], columns=["key", "module"]
    ).assign(ok=True)
    rows = pd.DataFrame({"key": keys[known], "module": runtime_module[known]})
    ok = rows.merge(pairs, how="left", on=["key", "module"])["ok"].astype(object).fillna(False).to_numpy(bool)
    ok |= rows["key"].isin([k for k, chain in scopes.items() if chain is None]).to_numpy()
    if outside_ok:
        ok |= rows["module"].to_numpy() < 0
    keep = known.copy()
    keep[known] = ok
    return np.where(keep, keys, None)


def program_scopes(sites: pd.DataFrame, site_sources: pd.DataFrame, modules: pa.Table) -> dict[int, int]:
    """The lowest common ancestor of each program's modules: where its frame-level code ran."""
    parents = dict(zip(modules["module_id"].to_pylist(), modules["parent_module_id"].to_pylist()))
    found = sites[["site_id", "program_id"]].merge(site_sources[["site_id", "module_id"]], on="site_id")
    found = found[found["module_id"] >= 0]
    lowest: dict[int, int] = {}
    for program, group in found.groupby("program_id", sort=False):
        chains = [_chain(int(m), parents) for m in group["module_id"].unique()]
        common = set(chains[0]).intersection(*chains[1:])
        lowest[int(program)] = next((m for m in chains[0] if m in common), schema.NO_MODULE)
    return lowest


def _match_ops(
    op_ids: np.ndarray,
    ops: np.ndarray,
    eligible: np.ndarray,
    sites: pd.DataFrame,
    runtime_module: np.ndarray | None = None,
    scopes: dict[str, frozenset[int] | None] | None = None,
    outside_ok: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Extern sites (and graph runs) of launches claimed by ops: one match per op, which may launch several kernels."""
    site = np.full(len(op_ids), schema.NO_SITE, np.int64)
    run = np.full(len(op_ids), _NONE, np.int64)
    if not eligible.any() or sites.empty:
        return site, run
    if scopes is not None and runtime_module is not None:
        scoped = in_scope(np.where(eligible, ops, None), runtime_module, scopes, outside_ok)
        eligible = eligible & pd.Series(scoped, dtype=object).notna().to_numpy()
    if not eligible.any():
        return site, run
    candidates = pd.DataFrame({"op_id": op_ids[eligible], "op": ops[eligible]}).drop_duplicates("op_id")
    candidates = candidates.sort_values("op_id", kind="stable")  # op ids grow in dispatch order
    matched, runs = match_in_order(candidates["op"].to_numpy(object), sites, extern=True)
    index = candidates["op_id"].to_numpy()
    site[eligible] = pd.Series(matched, index=index).reindex(op_ids[eligible]).to_numpy(np.int64)
    run[eligible] = pd.Series(runs, index=index).reindex(op_ids[eligible]).to_numpy(np.int64)
    return site, run


# -- CUDA graph nodes --------------------------------------------------------------------------------------
def captured_nodes(
    graph_rows: pa.Table,
    ops: pa.Table,
    calls: pa.Table,
    contexts: pa.Table,
    capture: int,
    sites: pa.Table | None = None,
    site_sources: pa.Table | None = None,
    modules: pa.Table | None = None,
    outside_ok: bool = False,
) -> pa.Table:
    """What launched each graph node created while one traced pass ran (``CAPTURED_NODES``), clones included.

    Op and scope ids are row numbers of the pass's trace; ``capture`` is 0 for a warm-up pass, 1 for
    the recorded one; a node of a compiled extern call gets its site, as :func:`attribute` matches ops.
    """
    rows = graph_rows.to_pandas()
    created = rows[(rows["event"] == schema.GRAPH_NODE_CREATED) & (rows["external_id"] >= 0)]
    external = created["external_id"].to_numpy(np.int64)
    scope = external - schema.SCOPE_BASE
    op_rows = np.where((external < schema.SCOPE_BASE) & (external < ops.num_rows), external, _NONE)
    context_rows = np.where((scope >= 0) & (scope < contexts.num_rows), scope, _NONE)
    has_op, in_context = op_rows >= 0, context_rows >= 0
    module_id = np.full(len(created), _NONE, np.int64)
    call_id = np.full(len(created), _NONE, np.int64)
    op = np.full(len(created), None, dtype=object)
    if has_op.any():
        module_id[has_op] = _ints(ops["module_id"])[op_rows[has_op]]
        call_id[has_op] = _ints(ops["call_id"])[op_rows[has_op]]
        op[has_op] = _objects(ops["op"])[op_rows[has_op]]
    if in_context.any():
        module_id[in_context] = _ints(contexts["module_id"])[context_rows[in_context]]
        call_id[in_context] = _ints(contexts["call_id"])[context_rows[in_context]]
    function = np.full(len(created), None, dtype=object)
    called = (call_id >= 0) & (call_id < calls.num_rows)
    if called.any():
        function[called] = _objects(calls["function_name"])[call_id[called]]
    site = np.full(len(created), schema.NO_SITE, np.int64)
    if sites is not None and sites.num_rows:
        frame = sites.to_pandas()
        scopes = (
            key_scopes(frame, site_sources.to_pandas(), modules, extern=True)
            if site_sources is not None and modules is not None
            else None
        )
        claimed = has_op & ((call_id < 0) | _torch_level(pa.array(list(function), pa.string())))
        site, _ = _match_ops(op_rows, op, claimed, frame, module_id, scopes, outside_ok)
    base = pd.DataFrame(
        {
            "graph_id": created["graph_id"].to_numpy(np.int64),
            "graph_node_id": created["node_id"].to_numpy(np.int64),
            "capture": np.full(len(created), capture, np.int64),
            "op_id": np.where(has_op, op_rows, _NONE),
            "op": op,
            "module_id": module_id,
            "call_id": call_id,
            "function_name": function,
            "site_id": site,
        }
    )
    clones = rows[rows["event"] == schema.GRAPH_NODE_CLONED]
    found = [base]
    known = base
    for _ in range(4):  # a clone of a clone (a graph cloned, then instantiated)
        step = clones.merge(
            known,
            left_on=["original_graph_id", "original_node_id"],
            right_on=["graph_id", "graph_node_id"],
            suffixes=("", "_original"),
        )
        if step.empty:
            break
        known = step.assign(graph_node_id=step["node_id"])[list(base.columns)]
        found.append(known)
    frame = pd.concat(found, ignore_index=True).drop_duplicates(["graph_id", "graph_node_id"], keep="last")
    return pa.Table.from_pandas(frame, schema=schema.CAPTURED_NODES, preserve_index=False)


# -- attribution -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Attribution:
    """The activity with compiled and graphed rows attributed, the calls it added, and the fused sources."""

    activity: pa.Table
    calls: pa.Table
    kernel_sources: pa.Table
    compiled_rows: int  # activity rows attributed from Inductor provenance
    graph_rows: int  # activity rows replayed by CUDA graphs
    graph_rows_from_capture: int  # of those, attributed from their capture (or from Inductor provenance)
    unmatched_inductor_rows: int  # rows whose kernel Inductor generated, with no site to attribute it by


def attribute(
    activity: pa.Table,
    calls: pa.Table,
    modules: pa.Table,
    sites: pa.Table | None = None,
    site_sources: pa.Table | None = None,
    captured: pa.Table | None = None,
    outside_ok: bool = False,
) -> Attribution:
    """Attribute compiled kernels and graph replays of ``joining.join``'s table: same rows, calls appended."""
    count = activity.num_rows
    in_graph = _ints(activity["graph_id"]) != schema.NOT_IN_GRAPH
    sites_frame = sites.to_pandas() if sites is not None and sites.num_rows else pd.DataFrame()
    sources_frame = (
        site_sources.to_pandas()
        if site_sources is not None
        else pd.DataFrame({"site_id": pd.Series([], dtype=np.int64), "module_id": pd.Series([], dtype=np.int64)})
    )
    if count == 0 or (sites_frame.empty and not in_graph.any()):
        return _unchanged(activity, calls, _inductor_like(activity, np.zeros(count, bool)))
    correlation = _ints(activity["correlation_id"])
    call_id = _ints(activity["call_id"])
    module_id = _ints(activity["module_id"])
    op_id = _ints(activity["op_id"])
    op = _objects(activity["op"])
    function = _objects(activity["function_name"])
    kernel = _objects(activity["kernel"])
    runtime_module = module_id.copy()

    # 1. replays: what launched each node at capture (a compiled extern call may have been matched there)
    cap = _capture_lookup(activity, in_graph, captured)
    from_capture = cap["matched"]
    site = np.where(from_capture, cap["site_id"], schema.NO_SITE)
    run = np.full(count, _NONE, np.int64)

    # 2. Inductor kernels by name, then extern calls by op, where no functional call was seen (a
    # torch-level call is how the compiled code's own calls look under functions="all")
    torch_level = _torch_level(activity["function_name"])
    free = ((call_id < 0) | torch_level) & ~(from_capture & (cap["call_id"] >= 0))
    if not sites_frame.empty:
        order = np.lexsort((_ints(activity["start_ns"]), correlation))  # launch order
        candidates = free & (site < 0)
        scopes = key_scopes(sites_frame, sources_frame, modules, extern=False)
        names = in_scope(np.where(candidates, kernel, None), module_id, scopes, outside_ok)
        by_name, runs = match_in_order(names[order], sites_frame, extern=False)
        site[order] = np.where(by_name >= 0, by_name, site[order])
        run[order] = np.where(by_name >= 0, runs, run[order])
        claimed = free & (site < 0) & (op_id >= 0) & ~in_graph
        op_scopes = key_scopes(sites_frame, sources_frame, modules, extern=True)
        by_op, op_runs = _match_ops(op_id, op, claimed, sites_frame, module_id, op_scopes, outside_ok)
        site = np.where(claimed, by_op, site)
        run = np.where(claimed, op_runs, run)
    compiled = site >= 0

    # 3. graph replays not attributed by a site: their capture, else the replaying launch
    attribution = np.full(count, schema.ATTRIBUTION_TRACE, dtype=object)
    captured_only = from_capture & ~compiled
    module_id = np.where(captured_only & (cap["module_id"] >= 0), cap["module_id"], module_id)
    op = np.where(captured_only & pd.isna(op), cap["op"], op)
    capture_call = captured_only & (cap["call_id"] >= 0)
    function = np.where(capture_call, cap["function_name"], function)
    attribution[captured_only] = schema.ATTRIBUTION_GRAPH_CAPTURE
    launch = in_graph & ~from_capture & ~compiled
    op = np.where(launch & pd.isna(op), schema.GRAPH_LAUNCH_OP, op)
    attribution[launch] = schema.ATTRIBUTION_GRAPH_LAUNCH

    # 4. compiled kernels: the fusion rule
    ranked = ranked_sources(site_sources) if site_sources is not None else pd.DataFrame()
    keys = pd.DataFrame(
        {
            "kind": np.where(capture_call, 1, 0).astype(np.int8),
            "a": np.where(capture_call, cap["capture"], _NONE),
            "b": np.full(count, "", dtype=object),
            "c": np.where(capture_call, cap["call_id"], _NONE),
            "d": np.where(in_graph, correlation, _NONE),  # a replay is one run of its graph
        }
    )
    if compiled.any() and not ranked.empty:
        dominant = ranked[ranked["rank"] == 0].set_index("site_id")
        chosen = site[compiled]
        dom_module = dominant["module_id"].reindex(chosen).fillna(_NONE).to_numpy(np.int64)
        dom_function = _clean(dominant["function_name"].reindex(chosen).to_numpy(object))
        dom_op = _clean(dominant["op"].reindex(chosen).to_numpy(object))
        # the source's module; else the module it was launched in; else where its graph's frame-level code ran
        lowest = pd.Series(program_scopes(sites_frame, sources_frame, modules), dtype=np.int64)
        programs = sites_frame.set_index("site_id")["program_id"].reindex(chosen)
        frame_level = programs.map(lowest).fillna(schema.NO_MODULE).to_numpy(np.int64)
        fallback = np.where(module_id[compiled] >= 0, module_id[compiled], frame_level)
        module_id[compiled] = np.where(dom_module >= 0, dom_module, fallback)
        function[compiled] = dom_function
        op[compiled] = np.where(pd.isna(op[compiled]), dom_op, op[compiled])
        attribution[compiled] = schema.ATTRIBUTION_INDUCTOR
        rows = np.flatnonzero(compiled)
        named = np.array([f is not None for f in dom_function], dtype=bool)
        keys.loc[rows[named], "kind"] = 2
        keys.loc[rows[named], "a"] = sites_frame.set_index("site_id")["program_id"].reindex(chosen[named]).to_numpy()
        keys.loc[rows[named], "b"] = dominant["source"].reindex(chosen[named]).astype(str).to_numpy()
        keys.loc[rows[named], "c"] = np.where(in_graph, _NONE, run)[rows[named]]  # a replay is identified by "d"

    # a compiled kernel of no functional call has none (not even the torch-level call it was launched in)
    call_id = np.where(compiled & (keys["kind"].to_numpy() == 0), schema.NO_CALL, call_id)
    new_calls, call_id = _synthesized_calls(keys, call_id, function, module_id, _ints(activity["thread"]), calls)
    function = np.where(call_id >= 0, function, None)
    sources = _kernel_sources(compiled, site, call_id, kernel, runtime_module, ranked, modules)
    return Attribution(
        activity=_with_columns(activity, modules, module_id, call_id, function, op, attribution),
        calls=new_calls,
        kernel_sources=sources,
        compiled_rows=int(compiled.sum()),
        graph_rows=int(in_graph.sum()),
        graph_rows_from_capture=int((in_graph & (from_capture | compiled)).sum()),
        unmatched_inductor_rows=_inductor_like(activity, compiled),
    )


def _torch_level(names: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Calls named like torch-level APIs (``torch.addmm``, ``aten.mm.default``), not ``torch.nn.functional`` ones."""
    dotted = encoded.matches(names, lambda values: pc.match_substring(values, "."))
    return np.asarray(dotted.to_numpy(zero_copy_only=False), dtype=bool)


def _clean(values: np.ndarray) -> np.ndarray:
    """Object array with pandas' missing values as None."""
    out = np.empty(len(values), dtype=object)
    out[:] = [None if v is None or (not isinstance(v, str) and pd.isna(v)) else v for v in values]
    return out


def _capture_lookup(activity: pa.Table, in_graph: np.ndarray, captured: pa.Table | None) -> dict[str, np.ndarray]:
    """Per activity row, the captured node it replays (``matched``) and that node's columns."""
    count = activity.num_rows
    out: dict[str, np.ndarray] = {"matched": np.zeros(count, bool)}
    for column in ("capture", "module_id", "call_id", "site_id"):
        out[column] = np.full(count, _NONE, np.int64)
    for column in ("op", "function_name"):
        out[column] = np.full(count, None, dtype=object)
    if captured is None or captured.num_rows == 0 or not in_graph.any():
        return out
    frame = captured.to_pandas().drop_duplicates(["graph_id", "graph_node_id"], keep="last")
    rows = pd.DataFrame(
        {
            "graph_id": _ints(activity["graph_id"])[in_graph],
            "graph_node_id": _ints(activity["graph_node_id"])[in_graph],
            "row": np.flatnonzero(in_graph),
        }
    )
    merged = rows.merge(frame, how="left", on=["graph_id", "graph_node_id"])
    unique_nodes = frame.drop_duplicates("graph_node_id", keep=False)  # node ids CUPTI gave one node only
    if merged["capture"].isna().any() and len(unique_nodes):
        # a kernel reporting another graph id than its node's creation or clone (the exec graph's, say):
        # its node id alone, where unambiguous
        by_node = rows.drop(columns="graph_id").merge(unique_nodes.drop(columns="graph_id"), how="left",
                                                      on="graph_node_id")
        missing = merged["capture"].isna().to_numpy()
        merged.loc[missing, by_node.columns] = by_node.loc[missing].to_numpy()
    where = merged["row"].to_numpy(np.int64)
    out["matched"][where] = merged["capture"].notna().to_numpy()
    for column in ("capture", "module_id", "call_id", "site_id"):
        out[column][where] = merged[column].fillna(_NONE).to_numpy(np.int64)
    for column in ("op", "function_name"):
        out[column][where] = _clean(merged[column].to_numpy(object))
    return out


def _synthesized_calls(
    keys: pd.DataFrame,
    call_id: np.ndarray,
    function: np.ndarray,
    module_id: np.ndarray,
    thread: np.ndarray,
    calls: pa.Table,
) -> tuple[pa.Table, np.ndarray]:
    """One new functional call per distinct key (rows of ``keys`` with ``kind > 0``); the rows point to it."""
    rows = np.flatnonzero(keys["kind"].to_numpy() > 0)
    if not len(rows):
        return calls, call_id
    codes = keys.iloc[rows].groupby(["kind", "a", "b", "c", "d"], sort=False).ngroup().to_numpy(np.int64)
    first = pd.Series(rows).groupby(codes).first().to_numpy(np.int64)
    base = calls.num_rows
    call_id = call_id.copy()
    call_id[rows] = base + codes
    count = len(first)
    added = pa.table(
        {
            "call_id": pa.array(np.arange(base, base + count, dtype=np.int64)),
            "function_name": encoded.of_values(function[first]),
            "parent_call_id": pa.array(np.full(count, schema.NO_CALL, np.int64)),
            "module_id": pa.array(module_id[first]),
            "start_ns": pa.array(np.zeros(count, np.int64)),
            "end_ns": pa.array(np.zeros(count, np.int64)),
            "thread": pa.array(np.maximum(thread[first], 0)),
            "sample": pa.array(np.full(count, schema.NO_SAMPLE, np.int64)),
        },
        schema=schema.CALLS,
    )
    return encoded.encoded(pa.concat_tables([calls.cast(schema.CALLS), added])), call_id


def _kernel_sources(
    compiled: np.ndarray,
    site: np.ndarray,
    call_id: np.ndarray,
    kernel: np.ndarray,
    runtime_module: np.ndarray,
    ranked: pd.DataFrame,
    modules: pa.Table,
) -> pa.Table:
    attributed = compiled & (call_id >= 0)
    if not attributed.any() or ranked.empty:
        return schema.empty(schema.KERNEL_SOURCES)
    frame = pd.DataFrame(
        {
            "call_id": call_id[attributed],
            "kernel": kernel[attributed],
            "site_id": site[attributed],
            "runtime_module": runtime_module[attributed],
        }
    ).drop_duplicates(["call_id", "kernel", "site_id"])
    frame = frame.merge(ranked, on="site_id", how="inner").sort_values(["call_id", "kernel", "rank"], kind="stable")
    module_ids = np.where(frame["module_id"].to_numpy(np.int64) >= 0, frame["module_id"], frame["runtime_module"])
    names = _module_names(modules, module_ids)
    table = pd.DataFrame(
        {
            "call_id": frame["call_id"].to_numpy(np.int64),
            "kernel": frame["kernel"].astype(object).to_numpy(),
            "rank": frame["rank"].to_numpy(np.int64),
            "module_id": module_ids.astype(np.int64),
            "module_name": names,
            "function_name": [None if pd.isna(v) else v for v in frame["function_name"]],
            "op": [None if pd.isna(v) else v for v in frame["op"]],
            "source": frame["source"].astype(object).to_numpy(),
        }
    )
    return encoded.encoded(pa.Table.from_pandas(table, schema=schema.KERNEL_SOURCES, preserve_index=False))


def _module_names(modules: pa.Table, module_ids: np.ndarray) -> list[str | None]:
    names = dict(zip(modules["module_id"].to_pylist(), modules["module_name"].to_pylist()))
    return [names.get(int(m)) for m in module_ids]


def _module_name_column(modules: pa.Table, module_ids: np.ndarray) -> pa.ChunkedArray | pa.Array:
    """The ``module_name`` of each id (null where it is no module of the table), codes taken from ``modules``."""
    ids = np.asarray(module_ids, np.int64)
    known = _ints(modules["module_id"])
    rows = np.full(len(ids), _NONE, np.int64)
    if len(known):
        order = np.argsort(known, kind="stable")
        found = order[np.minimum(np.searchsorted(known, ids, sorter=order), len(known) - 1)]
        rows = np.where((ids >= 0) & (known[found] == ids), found, _NONE)
    return pc.take(modules["module_name"], pa.array(rows, pa.int64(), mask=rows < 0))


def _with_columns(
    activity: pa.Table,
    modules: pa.Table,
    module_id: np.ndarray,
    call_id: np.ndarray,
    function: np.ndarray,
    op: np.ndarray,
    attribution: np.ndarray,
) -> pa.Table:
    columns = {
        "op": encoded.of_values(_clean(op)),
        "module_id": pa.array(module_id, pa.int64()),
        "module_name": _module_name_column(modules, module_id),
        "call_id": pa.array(call_id, pa.int64()),
        "function_name": encoded.of_values(_clean(function)),
        "attribution": encoded.of_values(attribution),
    }
    for name, values in columns.items():
        activity = activity.set_column(activity.schema.get_field_index(name), name, values)
    return encoded.encoded(activity.cast(schema.ACTIVITY))


def _inductor_like(activity: pa.Table, compiled: np.ndarray) -> int:
    if activity.num_rows == 0:
        return 0
    looks = encoded.matches(activity["kernel"], lambda names: pc.match_substring_regex(names, schema.INDUCTOR_KERNEL))
    return int((np.asarray(looks.to_numpy(zero_copy_only=False), dtype=bool) & ~compiled).sum())


def _unchanged(activity: pa.Table, calls: pa.Table, unmatched: int) -> Attribution:
    return Attribution(activity, calls, schema.empty(schema.KERNEL_SOURCES), 0, 0, 0, unmatched)
