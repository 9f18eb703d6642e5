"""Compiled and graphed models on the GPU: what profile() attributes, in the numbers issue 14 asks for.

    python -m benchmarks.compiled_attribution [--cases mlp sdpa_blocks gpt2 graph] [--out DIR] [--device cpu]

For each case, in ``torch.compile``'s default mode and in ``reduce-overhead`` (CUDA graphs), one
``profile()`` after 3 warm-up passes of a freshly compiled model, then a second one (no recompile):
rows of ``profiling_df``, coverage, activity rows by ``attribution``, the functional names, how
many module names lie below the root, the provenance metadata, warnings, whether the kernel
multiset equals an uninstrumented CUPTI capture of the same compiled model (default mode), and
Dynamo's graph count and graph breaks. ``graph`` is an eager MLP captured by the profiled module
itself (inside profile(): warm-up) and one captured before profile(). The MLP's fused kernels and
their sources (``kernel_sources``) are printed last. ``--out`` writes the same text to
``DIR/compiled_attribution.md``. A case that raises is reported and the others still run.
``--device cpu`` is a smoke run of the script itself (CPU activity source: extern calls only, no
graphs, no uninstrumented capture).
"""

from __future__ import annotations

import argparse
import collections
import io
import time
import traceback
import warnings
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aitune_dispatch import encoded
from aitune_dispatch.config import DEVICES

from . import zoo

MODES = ("default", "reduce-overhead")
DEVICE = "cuda"


def _run(function: Callable[..., Any], samples: list) -> None:
    with torch.no_grad():
        for args, kwargs in samples:
            function(*args, **kwargs)
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _bare(function: Callable[..., Any], samples: list) -> collections.Counter[str]:
    from aitune_dispatch.collection import make_cuda_source

    source = make_cuda_source()
    torch.cuda.synchronize()
    source.start()
    try:
        _run(function, samples)
    finally:
        source.stop()
    return collections.Counter(source.activity().kernels.column("name").to_pylist())


def _profile(function: Any, samples: list, functions: str) -> tuple[Any, Any, float, list[str]]:
    from aitune_dispatch import ModuleFunctionKernelProfiler

    profiler = ModuleFunctionKernelProfiler(device=DEVICE, functions=functions)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        started = time.perf_counter()
        profiling_df, _ = profiler.profile(function, samples, warmup_iterations=3)
        seconds = time.perf_counter() - started
    messages = [str(w.message) for w in caught if "Using `torch.compile" not in str(w.message)]
    return profiling_df, profiler.last_result, seconds, messages


def report(label: str, profiling_df: Any, result: Any, seconds: float, messages: list[str]) -> None:
    """Print what the lead quotes for one profile() call."""
    from aitune_dispatch import schema

    activity = result.to_pandas()
    by_attribution = activity["attribution"].value_counts().to_dict()
    functions = sorted(set(profiling_df["function_name"]))
    below_root = sorted(set(profiling_df["module_name"]) - {""})
    print(f"### {label}")
    print(f"- profile() {seconds:.1f} s; profiling_df rows {len(profiling_df)}; activity rows {len(activity)}; "
          f"coverage {result.coverage:.1%}")
    print(f"- activity rows by attribution: {by_attribution}")
    print(f"- functional names: {functions}")
    print(f"- module names below the root: {len(below_root)} (e.g. {below_root[:6]})")
    print(f"- graph-replayed rows: {int((activity['graph_id'] != 0).sum())}")
    for key in (schema.META_INDUCTOR, schema.META_GRAPH_CAPTURE, schema.META_COMPILED_KERNELS,
                schema.META_GRAPH_KERNELS):
        print(f"- {key}: {result.metadata.get(key)}")
    for message in messages:
        print(f"- warning: {message[:300]}")


def compiled_case(name: str, build: Callable[[], tuple[nn.Module, list]], functions: str = "functional") -> None:
    """One model, compiled afresh in each mode: two profile() calls, fidelity and recompiles."""
    from torch._dynamo.utils import counters

    from aitune_dispatch.provenance.inductor import forget_programs

    for mode in MODES:
        torch._dynamo.reset()
        forget_programs()
        counters.clear()
        model, samples = build()
        compiled = torch.compile(model, mode=mode)
        _run(compiled, samples)
        _run(compiled, samples)  # the user's own calls: compiled (and, reduce-overhead, captured) before profiling
        graphs_before = counters["stats"]["unique_graphs"]
        first = _profile(compiled, samples, functions)
        graphs_first = counters["stats"]["unique_graphs"]
        second = _profile(compiled, samples, functions)
        report(f"{name}, torch.compile mode={mode}, first profile()", *first)
        report(f"{name}, mode={mode}, second profile() (nothing recompiled)", *second)
        print(f"- Dynamo graphs: {graphs_before} before, {graphs_first} after the first profile(), "
              f"{counters['stats']['unique_graphs']} after the second; graph breaks: {dict(counters['graph_break'])}")
        if mode == "default" and DEVICE == "cuda":
            _run(compiled, samples)
            bare = _bare(compiled, samples)
            ours = collections.Counter(second[1].activity.column("kernel").to_pylist())
            print(f"- kernel multiset equals an uninstrumented capture: {ours == bare} "
                  f"({sum(ours.values())} vs {sum(bare.values())} kernels)")
        if name == "mlp" and mode == "default":
            sources = encoded.decoded(second[1].kernel_sources).to_pandas()
            print("- kernel_sources (every call each fused kernel came from; rank 0 is the one attributed):")
            print("```")
            print(sources.drop(columns=["module_id"]).to_string(index=False))
            print("```")
        print()


def _mlp() -> tuple[nn.Module, list]:
    generator = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 64)).eval().to(DEVICE)
    return model, [((torch.randn(32, 128, generator=generator).to(DEVICE),), {}) for _ in range(2)]


def _zoo(name: str) -> tuple[nn.Module, list]:
    workload = zoo.build(name, DEVICE, size="small")
    return workload.model, workload.samples


def graph_case() -> None:
    """An eager MLP captured by the profiled module: inside profile() (warm-up), and before it."""
    if DEVICE != "cuda":
        print("### graph: skipped (CUDA graphs need CUDA)\n")
        return
    for where in ("inside profile() (first warm-up pass)", "before profile()"):
        torch._dynamo.reset()
        model, samples = _mlp()
        graphed = zoo.Graphed(model, samples[0][0][0])
        if where.startswith("before"):
            _run(graphed, samples[:1])
        profiling_df, result, seconds, messages = _profile(graphed, samples, "functional")
        report(f"user-captured CUDA graph of the MLP, captured {where}", profiling_df, result, seconds, messages)
        replayed = result.to_pandas()
        replayed = replayed[replayed["graph_id"] != 0]
        rows = replayed.groupby(["module_name", "function_name", "op", "attribution"], dropna=False).size()
        print("- replayed kernels by (module, function, op, attribution):")
        print("```")
        print(rows.to_string())
        print("```")
        print()


CASES: dict[str, Callable[[], None]] = {
    "mlp": lambda: compiled_case("mlp", _mlp),
    "sdpa_blocks": lambda: compiled_case("sdpa_blocks", lambda: _zoo("sdpa_blocks")),
    "gpt2": lambda: compiled_case("gpt2", lambda: _zoo("gpt2"), functions="all"),
    "graph": graph_case,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--out", type=Path, default=None, help="also write DIR/compiled_attribution.md")
    parser.add_argument("--device", choices=DEVICES, default="cuda", help="cpu: a smoke run of this script")
    args = parser.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("compiled_attribution: needs CUDA (run it on the GPU machine: benchmarks/gpu_run.sh compiled)")
        return 2
    text = io.StringIO()
    failed = 0
    for case in args.cases:
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            try:
                CASES[case]()
            except zoo.ModelUnavailable as error:
                print(f"### {case}: skipped ({error})\n")
            except Exception:  # noqa: BLE001 - report and go on with the other cases
                failed += 1
                print(f"### {case}: FAILED\n```\n{traceback.format_exc()}```\n")
        print(buffer.getvalue(), end="", flush=True)
        text.write(buffer.getvalue())
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "compiled_attribution.md").write_text(text.getvalue())
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
