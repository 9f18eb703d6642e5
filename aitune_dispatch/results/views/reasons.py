"""The kernel time ``profiling_df()`` leaves out: by reason, op and module, with why and what to do."""

from __future__ import annotations

import pandas as pd

from ... import schema
from ...schema import UNATTRIBUTED_COLUMNS
from .accounting import ResultTables, total_us, unattributed
from .modules import modules_frame, pattern_labels

# Ops that run a whole module's inference fast path in one fused C++ kernel sequence: no
# torch.nn.functional call encloses them (nn.TransformerEncoderLayer, nn.MultiheadAttention).
FAST_PATH_OPS = frozenset(
    {
        "aten::_transformer_encoder_layer_fwd",
        "aten::_native_multi_head_attention",
        "aten::_nested_tensor_from_mask",
    }
)

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


def _reason(op: str | None, module_id: int, call_id: int) -> str:
    if module_id < 0:
        return "outside_modules"
    if op is None:
        return "no_op"
    return "fast_path" if op in FAST_PATH_OPS else "raw_op"


def unattributed_table(result: ResultTables, top: int | None = None) -> pd.DataFrame:
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
    rows = unattributed(result.activity)
    if rows.num_rows == 0:
        return pd.DataFrame({c: pd.Series([], dtype=object) for c in UNATTRIBUTED_COLUMNS})
    frame = rows.select(["op", "module_id", "call_id", "kernel_us"]).to_pandas()
    frame["op"] = frame["op"].astype(object).where(frame["op"].notna(), None)
    frame["reason"] = [_reason(o, m, c) for o, m, c in zip(frame["op"], frame["module_id"], frame["call_id"])]
    labels = pattern_labels(modules_frame(result)) if result.modules.num_rows else pd.Series(dtype=object)
    frame["module"] = frame["module_id"].map(labels).astype(object)
    frame["module"] = frame["module"].where(frame["module"].notna(), None)
    grouped = frame.groupby(["reason", "op", "module"], dropna=False, sort=False)["kernel_us"].agg(["size", "sum"])
    table = grouped.reset_index().rename(columns={"size": "kernels", "sum": "total_us"})
    for column in ("op", "module"):
        table[column] = table[column].astype(object).where(table[column].notna(), None)
    total = total_us(result.activity)
    table["share"] = table["total_us"] / total if total > 0 else 0.0
    all_mode = result.metadata.get(schema.META_FUNCTIONS) == "all"
    table["why"] = table["reason"].map(REASONS)
    table["hint"] = [HINTS["raw_op_all" if r == "raw_op" and all_mode else r] for r in table["reason"]]
    table = table.sort_values("total_us", ascending=False, kind="stable")[UNATTRIBUTED_COLUMNS].reset_index(drop=True)
    return table if top is None else table.head(int(top))


