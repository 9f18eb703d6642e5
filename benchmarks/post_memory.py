"""Host memory and time of the post-processing path at N kernels, on synthetic records (CPU, no GPU).

    python -m benchmarks.post_memory [--kernels 1000000] [--runs 3] [--tracer native|python] [--json FILE]

What is measured: :func:`aitune_dispatch.capture.post_process`, everything ``profile()`` does after the
recorded pass (the tracer's columns and the CUPTI decoder's columns turned into Arrow tables, the
join, the compiled-kernel / graph-replay attribution pass, the :class:`ProfileResult`), then
``profiling_df()`` (what ``profile()`` returns) and ``describe_results(profiling_df, function_data)``
(the spec's summary of it): the path from the decoders to the spec's outputs. Peak RSS
growth is the high-water mark during that block over the RSS before it (``benchmarks/rss.py``,
after the synthetic inputs exist, as the decoders' columns exist on the GPU machine); time is
wall-clock seconds of the block, reported per kernel.

The inputs are what the two decoders hand over after a real pass: the native tracer's ``take()``
columns (or the pure-Python recorder's, ``--tracer python``) and the compiled CUPTI decoder's
``DecodedRecords`` (fed through a real ``CuptiSource`` whose CUPTI bindings are stand-ins), over a
Llama-like hierarchy of 419 real ``nn.Module`` objects. Their shapes follow the demo model recorded
on the H200 (``tests/data/h200_demo_result``: per 82 kernels 126 ops, 42 functional calls and 40
module forwards; kernel names average 298 characters): per kernel 1.54 ops, 0.51 calls, 0.49 module
forwards, one launch record; ``--names`` distinct kernel names (default 300) of 150-450 characters
(mean ~300), 60 op names, 12 functional names; 95 % of launches claimed by an op, the rest by a
scope; 80 % of ops inside a functional call. Each run is a fresh interpreter (a child process), so
no allocator state carries over; the summary is the median and range over ``--runs``.
"""

from __future__ import annotations

import argparse
import enum
import json
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from aitune_dispatch.config import OP_TRACERS

from .rss import measure_growth

OPS_PER_KERNEL = 126 / 82  # tests/data/h200_demo_result
CALLS_PER_KERNEL = 42 / 82
FORWARDS_PER_KERNEL = 40 / 82
LAYERS = 32  # Llama-like: 3 + 32 * 13 = 419 modules
FUNCTIONS = (
    "linear", "silu", "scaled_dot_product_attention", "embedding", "softmax", "layer_norm",
    "dropout", "pad", "gelu", "rms_norm", "cross_entropy", "interpolate",
)  # fmt: skip
OP_NAMES = 60
CORRELATION_KIND = 7  # CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2
SCOPE_BASE = 1 << 62
REPO = Path(__file__).resolve().parents[1]


# -- the hierarchy --------------------------------------------------------------------------------------
def llama_like() -> Any:
    """A module tree shaped like a 32-layer Llama: embed, layers (attention, MLP, two norms), norm, head."""
    from torch import nn

    class Leaf(nn.Module):
        """A module without parameters: the benchmark never runs a forward."""

    class Linear(Leaf): ...

    class RMSNorm(Leaf): ...

    class SiLU(Leaf): ...

    class Embedding(Leaf): ...

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj, self.o_proj = Linear(), Linear(), Linear(), Linear()

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate_proj, self.up_proj, self.down_proj, self.act_fn = Linear(), Linear(), Linear(), SiLU()

    class DecoderLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.self_attn, self.mlp = Attention(), MLP()
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed_tokens = Embedding()
            self.layers = nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
            self.norm = RMSNorm()

    class CausalLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model, self.lm_head = Model(), Linear()

    return CausalLM()


# -- names ----------------------------------------------------------------------------------------------
def kernel_names(count: int, rng: np.random.Generator) -> list[str]:
    """``count`` distinct CUDA-like kernel names, 150-450 characters (mean ~300)."""
    heads = (
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<",
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16, ",
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, ",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, ",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_",
    )
    filler = "c10::BFloat16, at::native::(anonymous namespace)::launch_kernel<float>::{lambda(int)#1}, "
    names = []
    for index in range(count):
        length = int(rng.integers(150, 451))
        text = f"{heads[index % len(heads)]}{index}>, "
        while len(text) < length:
            text += filler
        names.append(text[: length - 1] + ")")
    return names


def _codes(count: int, vocabulary: int, rng: np.random.Generator) -> np.ndarray:
    """Codes into a vocabulary, a few values frequent (Zipf-like, as kernel and op names are)."""
    weights = 1.0 / np.arange(1, vocabulary + 1)
    return rng.choice(vocabulary, size=count, p=weights / weights.sum()).astype(np.int32)


# -- the tracer's columns -------------------------------------------------------------------------------
def trace_columns(kernels: int, modules: int, rng: np.random.Generator) -> dict[str, Any]:
    """What ``_tracer.take()`` returns after a pass of ``kernels`` kernels (native_shims/tracer/module.cpp)."""
    n_ops, n_calls = round(kernels * OPS_PER_KERNEL), round(kernels * CALLS_PER_KERNEL)
    n_forwards = round(kernels * FORWARDS_PER_KERNEL)
    step = 1_000  # ns between two ops on the host clock
    call_module = rng.integers(1, modules, n_calls).astype(np.int64)
    call_start = np.arange(n_calls, dtype=np.int64) * (n_ops * step // max(n_calls, 1))
    call_sample = np.where(rng.random(n_calls) < 0.9, rng.integers(0, 4, n_calls), -1).astype(np.int64)
    op_call = np.minimum(np.arange(n_ops, dtype=np.int64) * n_calls // n_ops, n_calls - 1)
    op_call = np.where(rng.random(n_ops) < 0.8, op_call, -1)
    op_module = np.where(op_call >= 0, call_module[np.maximum(op_call, 0)], rng.integers(0, modules, n_ops))
    op_start = np.arange(n_ops, dtype=np.int64) * step
    n_ctx = n_calls + n_forwards
    function_names = list(FUNCTIONS)
    call_name = _codes(n_calls, len(function_names), rng)
    samples = {
        name_id: [(int((call_name == name_id).sum()), ((), {})) for _ in range(4)] for name_id in range(len(FUNCTIONS))
    }
    return {
        "op_names": [f"aten::op_{index}" for index in range(OP_NAMES)],
        "op_name": _codes(n_ops, OP_NAMES, rng).tobytes(),
        "op_module": op_module.astype(np.int64).tobytes(),
        "op_call": op_call.tobytes(),
        "op_thread": np.zeros(n_ops, np.int64).tobytes(),
        "op_start": op_start.tobytes(),
        "op_end": (op_start + step // 2).tobytes(),
        "function_names": function_names,
        "call_name": call_name.tobytes(),
        "call_parent": np.full(n_calls, -1, np.int64).tobytes(),
        "call_module": call_module.tobytes(),
        "call_start": call_start.tobytes(),
        "call_end": (call_start + step).tobytes(),
        "call_thread": np.zeros(n_calls, np.int64).tobytes(),
        "call_sample": call_sample.tobytes(),
        "samples": samples,
        "mcall_module": rng.integers(0, modules, n_forwards).astype(np.int64).tobytes(),
        "mcall_start": (np.arange(n_forwards, dtype=np.int64) * 2 * step).tobytes(),
        "mcall_end": (np.arange(n_forwards, dtype=np.int64) * 2 * step + step).tobytes(),
        "mcall_thread": np.zeros(n_forwards, np.int64).tobytes(),
        "ctx_module": rng.integers(0, modules, n_ctx).astype(np.int64).tobytes(),
        "ctx_call": np.where(rng.random(n_ctx) < 0.5, rng.integers(0, n_calls, n_ctx), -1).astype(np.int64).tobytes(),
        "threads": [(0, "MainThread", True, 0, threading.get_native_id())],
        "scopes_pushed": n_ctx,
        "ops_pushed": n_ops,
        "push_log": b"",
    }


def _fill_buffers(buffers: Any, columns: dict[str, Any]) -> None:
    """The same pass in the pure-Python buffers's columns (``tracing/buffers.py``)."""
    for name in columns["op_names"]:
        buffers.op_names.id(name)
    for name in columns["function_names"]:
        buffers.function_names.id(name)
    for key in ("op_name", "call_name"):
        getattr(buffers, key).frombytes(np.frombuffer(columns[key], np.int32).astype(np.int64).tobytes())
    for key, value in columns.items():
        if key not in ("op_name", "call_name") and isinstance(value, bytes) and hasattr(buffers, key):
            getattr(buffers, key).frombytes(value)
    buffers.stacks()  # thread 0


# -- the CUPTI decoder's columns ------------------------------------------------------------------------
class RuntimeCbid(enum.IntEnum):
    """Stand-in for ``cupti.runtime_api_trace_cbid`` (the names ``callback_names`` reads)."""

    cudaLaunchKernel_v7000 = 211
    cudaMemcpyAsync_v3020 = 41
    cudaMemsetAsync_v3020 = 51


class DriverCbid(enum.IntEnum):
    """Stand-in for ``cupti.driver_api_trace_cbid``."""

    cuLaunchKernel = 307


class FakeCupti:
    """The attributes of the ``cupti`` bindings that ``CuptiSource`` reads after a pass (hashable, as
    ``callback_names`` caches by it)."""

    ExternalCorrelationKind = SimpleNamespace(CUSTOM2=CORRELATION_KIND)
    runtime_api_trace_cbid = RuntimeCbid
    driver_api_trace_cbid = DriverCbid

    @staticmethod
    def activity_push_external_correlation_id(kind: int, value: int) -> None:
        """Never called after a pass."""

    @staticmethod
    def activity_pop_external_correlation_id(kind: int) -> None:
        """Never called after a pass."""


def decoded_records(kernels: int, names: int, trace: dict[str, Any], rng: np.random.Generator) -> Any:
    """What the compiled decoder's sink returns from ``take()`` after the same pass."""
    from aitune_dispatch.collection.decoded import DecodedRecords

    n_ops = len(trace["op_start"]) // 8
    n_ctx = trace["scopes_pushed"]
    correlation = np.arange(1, kernels + 1, dtype=np.int64)
    op_of_kernel = np.sort(rng.integers(0, n_ops, kernels)).astype(np.int64)
    start = np.frombuffer(trace["op_start"], np.int64)[op_of_kernel] + 200
    duration = rng.integers(2_000, 50_000, kernels).astype(np.int64)
    kind = np.where(rng.random(kernels) < 0.95, 0, rng.integers(1, 3, kernels)).astype(np.int8)
    by_scope = rng.random(kernels) < 0.05  # launched outside any op: tagged with the scope it ran in
    external = np.where(by_scope, SCOPE_BASE + rng.integers(0, n_ctx, kernels), op_of_kernel)
    api_kind = np.where(rng.random(kernels) < 0.9, 0, 1).astype(np.int8)
    cbid = np.where(api_kind == 0, np.where(kind == 0, 211, np.where(kind == 1, 41, 51)), 307).astype(np.int32)
    return DecodedRecords(
        correlation_id=correlation,
        start_ns=start,
        end_ns=start + duration,
        device=np.zeros(kernels, np.int64),
        stream=np.full(kernels, 7, np.int64),
        kind_code=kind,
        name_index=_codes(kernels, names, rng),
        names=kernel_names(names, rng),
        ext_correlation_id=correlation,
        ext_id=external.astype(np.int64),
        records=3 * kernels,
        api_correlation_id=correlation,
        api_kind=api_kind,
        api_cbid=cbid,
        api_start_ns=start - 150,
        api_end_ns=start - 100,
        api_thread=np.full(kernels, 12345, np.int64),
        graph_id=np.zeros(kernels, np.int64),
        graph_node_id=np.zeros(kernels, np.int64),
    )


class Sink:
    """A record sink that hands over records decoded earlier."""

    name = "native"
    warnings: tuple[str, ...] = ()

    def __init__(self, records: Any) -> None:
        self._records = records

    def register(self) -> None:
        """Nothing to register: no CUPTI here."""

    def take(self) -> Any:
        """The records of the pass."""
        return self._records


# -- one run ----------------------------------------------------------------------------------------------
def _session(tracer_name: str, root: Any, trace: dict[str, Any], source: Any) -> Any:
    from aitune_dispatch.tracing import ModuleTracker, TraceSession

    modules = ModuleTracker(root)
    if tracer_name == "native":
        from aitune_dispatch.tracing.native import NativeTracer

        tracer: Any = NativeTracer.ended(modules.module_ids(), trace)  # as if _tracer.take() returned it
    else:
        from aitune_dispatch.tracing.python import PythonTracer

        tracer = PythonTracer(modules.module_ids(), None, source)
        _fill_buffers(tracer.buffers, trace)
    return TraceSession(modules, tracer)


def _table_mb(result: Any) -> float:
    tables = ("activity", "ops", "calls", "modules", "module_calls", "launches", "kernel_sources")
    return sum(getattr(result, name).nbytes for name in tables) / 2**20


def run_once(kernels: int, names: int, tracer_name: str, seed: int = 0) -> dict[str, Any]:
    """One measured post-processing pass over freshly synthesised inputs."""
    from aitune_dispatch.capture import PhaseClock, post_process
    from aitune_dispatch.collection.cupti_source import CuptiSource
    from aitune_dispatch.config import ProfileConfig
    from aitune_dispatch.provenance.capture import ProvenanceCapture
    from aitune_dispatch.results import describe_results

    rng = np.random.default_rng(seed)
    root = llama_like()
    modules = len(list(root.modules()))
    trace = trace_columns(kernels, modules, rng)
    source = CuptiSource(Sink(decoded_records(kernels, names, trace, rng)), cupti=FakeCupti())
    session = _session(tracer_name, root, trace, source)
    config = ProfileConfig(device="cuda", op_tracer=tracer_name)
    clock = PhaseClock(None)
    provenance = ProvenanceCapture("cuda", source, tracer_name, compiled=False)
    del trace, rng
    with measure_growth() as growth:
        started = time.perf_counter()
        clock.restart()
        result = post_process(config, session, source, clock, provenance)
        processed = time.perf_counter()
        frame = result.profiling_df()  # what profile() returns, with function_data
        framed = time.perf_counter()
        summary = describe_results(frame, result.function_data)  # the spec's summary of that frame
        done = time.perf_counter()
    rows = result.activity.num_rows
    return {
        "kernels": rows,
        "profiling_df_rows": len(frame),
        "summary_rows": len(summary),
        "peak_mb": growth.peak_mb,
        "retained_mb": growth.retained_mb,
        "peak_reset": growth.peak_reset,
        "result_tables_mb": _table_mb(result),
        "total_us_per_kernel": (done - started) / rows * 1e6,
        "post_process_us_per_kernel": (processed - started) / rows * 1e6,
        "decode_us_per_kernel": clock.laps.get("decode", 0.0) / rows * 1e6,
        "join_us_per_kernel": clock.laps.get("join", 0.0) / rows * 1e6,
        "profiling_df_us_per_kernel": (framed - processed) / rows * 1e6,
        "describe_us_per_kernel": (done - framed) / rows * 1e6,
        "kernel_type": str(result.activity.schema.field("kernel").type),
        "profiling_df_kernel_dtype": str(frame["kernel"].dtype),
    }


# -- the parent: several fresh runs, summarised ------------------------------------------------------------
METRICS = (
    ("peak_mb", "peak RSS growth MB", 0),
    ("retained_mb", "retained MB", 0),
    ("result_tables_mb", "result tables MB", 0),
    ("total_us_per_kernel", "total µs/kernel", 3),
    ("post_process_us_per_kernel", "post_process µs/kernel", 3),
    ("profiling_df_us_per_kernel", "profiling_df µs/kernel", 3),
    ("describe_us_per_kernel", "describe_results µs/kernel", 3),
)


def _commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True)  # fmt: skip
    except OSError:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if head.returncode == 0 else "unknown"


def environment() -> dict[str, str]:
    """Machine and versions, for the results table."""
    import pandas as pd
    import pyarrow as pa

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        "pandas": pd.__version__,
        "numpy": np.__version__,
        "commit": _commit(),
    }


def summarise(runs: list[dict[str, Any]]) -> str:
    """A markdown table: the median and range of every metric over the runs."""
    lines = ["| metric | median | min | max |", "|---|---|---|---|"]
    for key, label, digits in METRICS:
        values = [run[key] for run in runs]
        cells = [f"{v:,.{digits}f}" for v in (statistics.median(values), min(values), max(values))]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``--runs`` fresh child processes and print their median, or (``--child``) one run as JSON."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.post_memory", description=__doc__.split("\n")[0])
    p.add_argument("--kernels", type=int, default=1_000_000)
    p.add_argument("--names", type=int, default=300, help="distinct kernel names")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tracer", choices=OP_TRACERS, default="native")
    p.add_argument("--json", type=Path, help="also write every run and the environment here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(run_once(args.kernels, args.names, args.tracer)))
        return 0
    command = [sys.executable, "-m", "benchmarks.post_memory", "--child", "--kernels", str(args.kernels),
               "--names", str(args.names), "--tracer", args.tracer]  # fmt: skip
    runs = []
    for index in range(args.runs):
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            return done.returncode
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"run {index + 1}/{args.runs}: " + ", ".join(f"{k} {runs[-1][k]:.3f}" for k, _, _ in METRICS), flush=True)
    env = environment()
    print(f"\n{args.kernels:,} kernels, {args.names} kernel names, {args.tracer} tracer; " + ", ".join(
        f"{k} {v}" for k, v in env.items()))  # fmt: skip
    print(f"in-memory kernel column: {runs[0]['kernel_type']}; profiling_df kernel dtype: "
          f"{runs[0]['profiling_df_kernel_dtype']}\n")  # fmt: skip
    print(summarise(runs))
    if args.json:
        args.json.write_text(json.dumps({"environment": env, "arguments": vars(args) | {"json": str(args.json)},
                                         "runs": runs}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
