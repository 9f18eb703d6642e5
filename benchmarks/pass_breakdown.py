"""Where the recorded pass's time goes, mechanism by mechanism.

    python -m benchmarks.pass_breakdown --out OUT [--models ...] [--repeat 16]

For each zoo model (bench size, the sample list repeated ``--repeat`` times) the pass runs, in one
process, under each configuration: bare; an empty ``TorchFunctionMode``; two no-op global module
hooks; our module hooks alone (native backend, no modes); our CUPTI activity source alone (no
tracing, so no correlation ids); our tracing alone (hooks, functional calls as the default sees them, op recorder, no
CUPTI), with and without sample keys; CUPTI and tracing without the correlation-id pushes; and
everything, as ``profile()`` runs it. Each is the median of three passes after one warm one; the
table gives seconds and the ratio to bare. Writes ``breakdown.md`` and ``breakdown.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from . import zoo

CONFIGS = (
    "bare",
    "empty function mode",
    "no-op global hooks",
    "our module hooks",
    "cupti only",
    "tracing only",
    "tracing, no samples",
    "tracing + cupti, no pushes",
    "tracing + cupti (profile)",
)


def _timed_pass(run: Callable[[], None], around: Callable[[Callable[[], None]], None]) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    around(run)
    torch.cuda.synchronize()
    return time.perf_counter() - started


def _with_cupti(body: Callable[[Any], None]) -> None:
    """``body(source)`` while our CUPTI activity source collects, as profile() brackets its pass."""
    from aitune_dispatch import collection

    source = collection.make_cuda_source("native")
    source.start()
    try:
        body(source)
        torch.cuda.synchronize()
    finally:
        source.stop()


def _tracing(model: Any, names: frozenset[str] | None, source: Any) -> Callable[[Callable[[], None]], None]:
    """Our tracing as ``profile()`` installs it (functional calls seen where the default sees them)."""
    from aitune_dispatch.backends import resolve_interception
    from aitune_dispatch.tracing import ModuleTracker, TraceSession, make_tracer

    interception = resolve_interception(None, "native", False)

    def around(run: Callable[[], None]) -> None:
        modules = ModuleTracker(model)
        tracer = make_tracer("native", modules.module_ids(), names, source, False, interception=interception)
        with TraceSession(modules, tracer):
            run()

    return around


def _empty_mode(run: Callable[[], None]) -> None:
    from torch.overrides import TorchFunctionMode

    class Empty(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    with Empty():
        run()


def _noop_hooks(run: Callable[[], None]) -> None:
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    handles = [
        register_module_forward_pre_hook(lambda module, args: None),
        register_module_forward_hook(lambda module, args, output: None, always_call=True),
    ]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()


def _module_hooks(model: Any, record_ops: bool = True) -> Callable[[Callable[[], None]], None]:
    """Our module tracking alone (``record_ops`` False: without the aten op callback too)."""
    from dataclasses import replace

    from aitune_dispatch.tracing import ModuleTracker, native

    def around(run: Callable[[], None]) -> None:
        modules = ModuleTracker(model)
        native_module = native.load()
        # the native stacks and columns without its modes: start, report forwards, stop
        only = replace(native.NativePass.stacks_only(modules.module_ids()), record_ops=record_ops)
        native_module.start(**only.keywords())
        modules.install(native_module.enter_module, native_module.exit_module)
        try:
            run()
        finally:
            modules.remove()
            native_module.stop()
            native_module.take()

    return around


def measure(name: str, repeat: int) -> dict[str, float]:
    """Median pass seconds of every configuration for one zoo model."""
    from aitune_dispatch.collection import CpuOpTimer

    work = zoo.build(name, "cuda", repeat)
    run = work.run

    arounds: dict[str, Callable[[Callable[[], None]], None]] = {
        "bare": lambda r: r(),
        "empty function mode": _empty_mode,
        "no-op global hooks": _noop_hooks,
        "our module hooks": _module_hooks(work.model),
        "cupti only": lambda r: _with_cupti(lambda source: r()),
        "tracing only": _tracing(work.model, None, CpuOpTimer()),
        "tracing, no samples": _tracing(work.model, frozenset(), CpuOpTimer()),
        "tracing + cupti, no pushes": lambda r: _with_cupti(lambda source: _tracing(work.model, None, CpuOpTimer())(r)),
        "tracing + cupti (profile)": lambda r: _with_cupti(lambda source: _tracing(work.model, None, source)(r)),
    }
    out: dict[str, float] = {}
    with torch.no_grad():
        for config in CONFIGS:
            times = [_timed_pass(run, arounds[config]) for _ in range(4)][1:]
            out[config] = statistics.median(times)
    return out


def render(results: dict[str, dict[str, float]], repeat: int) -> str:
    """A markdown table: seconds and ratio to bare per configuration."""
    lines = [
        f"Recorded-pass breakdown (bench size, samples ×{repeat}, median of 3 passes; ratio to bare)\n",
        "| model | " + " | ".join(CONFIGS) + " |",
        "|---|" + "---|" * len(CONFIGS),
    ]
    for model, times in results.items():
        bare = times["bare"]
        cells = [f"{times[c]:.3f} s ({times[c] / bare:.2f}×)" for c in CONFIGS]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every model and write breakdown.md / breakdown.json."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.pass_breakdown", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--models", nargs="*", default=["sdpa_blocks", "vit_b_16", "gpt2", "resnet50", "llama_generate"])
    p.add_argument("--repeat", type=int, default=16)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("pass_breakdown needs CUDA")
    results = {}
    for name in args.models:
        try:
            results[name] = measure(name, args.repeat)
        except zoo.ModelUnavailable as error:
            print(f"{name}: skipped ({error})")
            continue
        print(name, {k: round(v, 4) for k, v in results[name].items()}, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "breakdown.json").write_text(json.dumps(results, indent=1))
    text = render(results, args.repeat)
    (out / "breakdown.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
