"""The results every renderer is tested against, built once (pyinstrument's shared-session habit).

``demo_result`` (a conftest fixture, session-scoped): the demo model profiled on CPU, one warm-up.
``h200_result`` (fixture) / :data:`H200_RESULT` (path): the demo recorded on the lent H200 by the
current code and committed under tests/data (``h200_launches_result`` / :data:`H200_LAUNCHES_RESULT`
name the same recording). :func:`synthetic_result` and :func:`layered_result` are hand-made
results whose every number is known (their docstrings show the arithmetic); :func:`empty_result` has
every table and no row; :func:`merged_result` is the two hand-made ones merged as ranks 0 and 1.
Renderer tests take these; no test file builds its own. :func:`activity_table` is the activity of
the tests that build small results row by row (one kernel a row, 1 µs apart).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import torch

from aitune_dispatch import ModuleFunctionKernelProfiler, schema
from aitune_dispatch.collection.base import Activity
from aitune_dispatch.demo import demo_workload
from aitune_dispatch.joining import join
from aitune_dispatch.results import ProfileResult, merge
from aitune_dispatch.schema import (
    ACTIVITY,
    ATTRIBUTION_TRACE,
    CALLS,
    CORRELATION,
    KERNELS,
    LAUNCHES,
    MODULE_CALLS,
    MODULES,
    NO_CALL,
    NOT_IN_GRAPH,
    OPS,
)
from aitune_dispatch.tracing import TraceTables

H200_RESULT = Path(__file__).parent / "data" / "h200_demo_result"
# the same recording: it has launch records and the GPU's properties (the name the launch tests use)
H200_LAUNCHES_RESULT = H200_RESULT


def join_tables(
    kernels: pa.Table,
    correlation: pa.Table,
    ops: pa.Table,
    calls: pa.Table,
    modules: pa.Table,
    scope_correlation: pa.Table | None = None,
    contexts: pa.Table | None = None,
) -> pa.Table:
    """``joining.join`` of hand-made tables, wrapped in the ``Activity`` and ``TraceTables`` a run hands it."""
    if scope_correlation is None:
        scope_correlation = schema.empty(schema.SCOPE_CORRELATION)
    activity = Activity(kernels=kernels, correlation=correlation, source="test", scope_correlation=scope_correlation)
    if contexts is None:
        contexts = schema.empty(schema.CONTEXTS)
    trace = TraceTables(ops, calls, schema.empty(MODULE_CALLS), contexts, threads=(), scopes_pushed=0, ops_pushed=0)
    return join(activity, trace, modules)


def demo_result() -> ProfileResult:
    """The demo model (a conv stem, two attention blocks) profiled on CPU after one warm-up pass."""
    model, samples = demo_workload("cpu")
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    profiler.profile(model, samples, warmup_iterations=1)
    assert profiler.last_result is not None
    return profiler.last_result


def activity_table(
    kernel: list[str],
    kernel_us: list[float],
    function_name: list[str | None],
    *,
    first_start_ns: int = 0,
    device: int | list[int] = 0,
    op: str | list[str] = "aten::op",
    module_id: int | list[int] = 0,
    module_name: str | list[str] = "",
    thread: int = 0,
    call_id: list[int] | None = None,
) -> pa.Table:
    """Activity rows in :data:`ACTIVITY`, row ``i`` one kernel of ``kernel_us[i]`` µs.

    Row ``i`` has correlation id and op id ``i``, starts at ``first_start_ns + 1,000 i`` on stream 7
    and is traced outside any CUDA graph; its call id is ``i`` where it has a function name, else
    :data:`NO_CALL` (or ``call_id[i]`` where given). ``device``, ``op``, ``module_id`` and
    ``module_name``: one value per row, or one for every row.
    """
    n = len(kernel)

    def per_row(value):  # noqa: ANN001, ANN202
        return list(value) if isinstance(value, list) else [value] * n

    starts = [first_start_ns + 1000 * i for i in range(n)]
    return pa.table(
        {
            "correlation_id": list(range(n)),
            "kernel": kernel,
            "kind": ["kernel"] * n,
            "start_ns": starts,
            "end_ns": [start + int(us * 1000) for start, us in zip(starts, kernel_us)],
            "kernel_us": kernel_us,
            "device": pa.array(per_row(device), pa.int32()),
            "stream": [7] * n,
            "op_id": list(range(n)),
            "op": per_row(op),
            "module_id": per_row(module_id),
            "module_name": per_row(module_name),
            "call_id": call_id if call_id is not None else [i if fn else NO_CALL for i, fn in enumerate(function_name)],
            "function_name": function_name,
            "thread": [thread] * n,
            "graph_id": [NOT_IN_GRAPH] * n,
            "graph_node_id": [NOT_IN_GRAPH] * n,
            "attribution": [ATTRIBUTION_TRACE] * n,
        },
        schema=ACTIVITY,
    )


OPS_TIMED = pa.schema(
    [
        ("op_id", pa.int64()),
        ("op", pa.string()),
        ("module_id", pa.int64()),
        ("call_id", pa.int64()),
        ("thread", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
    ]
)


def synthetic_launches(off: int) -> pa.Table:
    """The API records of :func:`synthetic_result`'s activity, CUPTI clock = host + ``off``.

    Correlation 10 (gemm): cudaLaunchKernel 4,500-4,700 inside addmm; 11 (memcpy): cudaMemcpyAsync
    8,300-8,400 inside copy_; 12 (the memset no op claimed): driver cuMemsetD32Async 8,850-8,900,
    on the same CUPTI thread 77; 13: a cudaLaunchKernel 8,900-8,950 on thread 99, which launched no
    recorded activity and ran no op.
    """
    return pa.table(
        [
            [10, 11, 12, 13],
            ["runtime", "runtime", "driver", "runtime"],
            pa.array([211, 41, 220, 211], pa.int32()),
            ["cudaLaunchKernel", "cudaMemcpyAsync", "cuMemsetD32Async", "cudaLaunchKernel"],
            [off + 4_500, off + 8_300, off + 8_850, off + 8_900],
            [off + 4_700, off + 8_400, off + 8_900, off + 8_950],
            [77, 77, 77, 99],
        ],
        schema=LAUNCHES,
    )


def synthetic_result(
    cupti_offset_ns: int = 1_000_000,
    metadata: dict[str, str] | None = None,
    fc_name: str = "fc",
    launches: bool = False,
) -> ProfileResult:
    """Net (root) > fc (Linear) > linear call > aten::addmm > gemm on GPU 0 stream 7.

    Host clock (ns): root 1,000-9,000; fc 2,000-8,000; linear 3,000-7,000; addmm 4,000-6,000;
    aten::copy_ (root, no functional call) 8,200-8,800. CUPTI clock = host + ``cupti_offset_ns``:
    gemm 5,000-5,500 (addmm), memcpy 8,500-9,500 on stream 13 (copy_), memset 9,600-9,700 on
    stream 7 that no op claimed. ``launches``: with :func:`synthetic_launches`.
    """
    off = cupti_offset_ns
    modules = pa.table([[0, 1], ["", fc_name], ["Net", "Linear"], [-1, 0]], schema=MODULES)
    module_calls = pa.table([[0, 1], [1_000, 2_000], [9_000, 8_000], [0, 0]], schema=MODULE_CALLS)
    calls = pa.table([[0], ["linear"], [-1], [1], [3_000], [7_000], [0], [0]], schema=CALLS)
    ops = pa.table(
        [[0, 1], ["aten::addmm", "aten::copy_"], [1, 0], [0, -1], [0, 0], [4_000, 8_200], [6_000, 8_800]],
        schema=OPS_TIMED,
    )
    kernels = pa.table(
        [
            [10, 11, 12],
            ["gemm", "Memcpy HtoD", "Memset"],
            [off + 5_000, off + 8_500, off + 9_600],
            [off + 5_500, off + 9_500, off + 9_700],
            [0, 0, 0],
            [7, 13, 7],
            ["kernel", "memcpy", "memset"],
        ],
        schema=KERNELS,
    )
    correlation = pa.table([[10, 11], [0, 1]], schema=CORRELATION)
    activity = join_tables(kernels, correlation, ops, calls, modules)
    sample = ((SimpleNamespace(shape=(2, 3), dtype="float16", stride=(3, 1)), torch.ones(5, 3).t()), {"bias": None})
    return ProfileResult(
        activity=activity,
        ops=ops,
        calls=calls,
        modules=modules,
        module_calls=module_calls,
        function_data={"linear": [(1, sample)]},
        source="cupti/test",
        metadata=metadata or {},
        launches=synthetic_launches(off) if launches else LAUNCHES.empty_table(),
    )


def layered_result(metadata: dict[str, str] | None = None) -> ProfileResult:
    """Net (root) > layers (ModuleList) > layers.0 / layers.1 (Block) > fc (Linear), plus enc (Encoder).

    Kernels (µs): layers.0.fc gemm 4.0 and layers.1.fc gemm 6.0 (linear, aten::addmm), an aten::add
    of 2.0 in layers.1 outside any functional call, a fused fast-path op of 8.0 in enc, and a
    kernel of 1.0 that no op claimed outside the hierarchy. All kernel time: 4 + 6 + 2 + 8 + 1 = 21.
    """
    names = ["", "layers", "layers.0", "layers.0.fc", "layers.1", "layers.1.fc", "enc"]
    types = ["Net", "ModuleList", "Block", "Linear", "Block", "Linear", "Encoder"]
    modules = pa.table([list(range(7)), names, types, [-1, 0, 1, 2, 1, 4, 0]], schema=MODULES)
    module_calls = pa.table([[0, 2, 3, 4, 5, 6], [0] * 6, [1] * 6, [0] * 6], schema=MODULE_CALLS)
    calls = pa.table([[0, 1], ["linear", "linear"], [-1, -1], [3, 5], [0, 0], [1, 1], [0, 0], [0, 0]], schema=CALLS)
    ops = pa.table(
        [
            [0, 1, 2, 3],
            ["aten::addmm", "aten::addmm", "aten::add", "aten::_transformer_encoder_layer_fwd"],
            [3, 5, 4, 6],
            [0, 1, -1, -1],
            [0] * 4,
        ],
        schema=pa.schema([f for f in OPS if f.name not in ("start_ns", "end_ns")]),
    )
    starts = [100, 200, 300, 400, 500]
    durations = [4_000, 6_000, 2_000, 8_000, 1_000]
    kernels = pa.table(
        [
            [10, 11, 12, 13, 14],
            ["void at::native::gemm<float>(float*)", "void at::native::gemm<float>(float*)", "add_k", "fused", "k"],
            starts,
            [s + d for s, d in zip(starts, durations)],
            [0] * 5,
            [7] * 5,
            ["kernel"] * 5,
        ],
        schema=KERNELS,
    )
    correlation = pa.table([[10, 11, 12, 13], [0, 1, 2, 3]], schema=CORRELATION)
    activity = join_tables(kernels, correlation, ops, calls, modules)
    return ProfileResult(
        activity=activity,
        ops=ops,
        calls=calls,
        modules=modules,
        module_calls=module_calls,
        function_data={},
        source="cupti/test",
        metadata=metadata or {},
    )


def empty_result() -> ProfileResult:
    """:func:`synthetic_result` with no rows: every table keeps its columns."""
    full = synthetic_result()
    return ProfileResult(
        activity=full.activity.slice(0, 0),
        ops=full.ops.slice(0, 0),
        calls=full.calls.slice(0, 0),
        modules=full.modules.slice(0, 0),
        module_calls=full.module_calls.slice(0, 0),
        function_data={},
        source="cpu",
    )


def merged_result() -> ProfileResult:
    """:func:`synthetic_result` as rank 0 and :func:`layered_result` as rank 1, merged (a ``rank`` column)."""
    return merge([synthetic_result(), layered_result()], ranks=[0, 1])


def plain_rows(table, columns: list[str]) -> list[tuple]:
    """``table``'s rows as tuples of ``columns``, a missing string as None (the frames' one string
    dtype holds NaN for it, which is not equal to itself)."""
    return [
        tuple(None if isinstance(v, float) and v != v else v for v in row)
        for row in table[columns].itertuples(index=False, name=None)
    ]
