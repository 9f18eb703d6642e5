"""Module scopes at the function object: a recording trampoline on ``nn.Module._wrapped_call_impl``
against the global forward hooks we install today (issue 40's "module scopes" study, on the CPU).

    python -m benchmarks.module_scope_study [--rounds 21] [--calls 20]

Each round times, in shuffled order, one pass (``--calls`` forwards) of each model bare; under two no-op
global forward hooks (``register_module_forward_pre_hook`` / ``register_module_forward_hook(always_call)``,
the mechanism alone); under our module tracking as ``profile()`` installs it (those hooks calling the
native tracer's ``enter_module`` / ``exit_module``); and with the native tracer's recording trampoline set
on the vectorcall slot of ``nn.Module._wrapped_call_impl`` (what ``module(x)`` calls: each module call
recorded as a call, its name, thread and times; no aten op callback). The trampoline's figure is an upper
bound on what a module-scope hook at the function object would cost: it records as much as a module
scope needs except the module's id. Prints the median of each configuration over the median bare pass,
with the range of the per-round ratios. Needs CPython >= 3.12 and the native tracer.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
from torch import nn

from .pass_breakdown import _module_hooks, _noop_hooks

CONFIGS = ("bare", "no-op global hooks", "our module hooks", "trampoline on _wrapped_call_impl")


def models() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    """Launch-bound CPU models with many small modules (the regime where module scopes cost most)."""
    torch.manual_seed(0)
    blocks = nn.Sequential(
        *[nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()) for _ in range(16)]
    ).eval()
    mlp = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.LayerNorm(32)) for _ in range(24)]).eval()
    return {"conv_blocks": (blocks, torch.randn(1, 8, 8, 8)), "mlp_blocks": (mlp, torch.randn(4, 32))}


def _trampoline(run: Callable[[], None]) -> None:
    from aitune_dispatch.tracing import native

    tracer = native.load()
    scopes = {nn.Module._wrapped_call_impl: "module"}
    tracer.start(**replace(native.NativePass.hooks_only(frozenset()), functions=scopes).keywords())
    try:
        if not tracer.hooked(nn.Module._wrapped_call_impl):
            raise RuntimeError("the trampoline did not take nn.Module._wrapped_call_impl")
        run()
    finally:
        tracer.stop()
        taken = tracer.take()
    if not taken["call_name"]:
        raise RuntimeError("the trampoline recorded no module call")


def measure(rounds: int, calls: int) -> dict[str, dict[str, list[float]]]:
    """Seconds of one pass per configuration and round, per model."""
    out: dict[str, dict[str, list[float]]] = {}
    for name, (model, x) in models().items():

        def run(model: nn.Module = model, x: torch.Tensor = x) -> None:
            for _ in range(calls):
                model(x)

        arounds = {
            "bare": lambda r: r(),
            "no-op global hooks": _noop_hooks,
            "our module hooks": _module_hooks(model, record_ops=False),
            "trampoline on _wrapped_call_impl": _trampoline,
        }
        times: dict[str, list[float]] = {config: [] for config in CONFIGS}
        with torch.no_grad():
            for config in CONFIGS:  # one untimed pass each
                arounds[config](run)
            for _ in range(rounds):
                order = list(CONFIGS)
                random.shuffle(order)
                for config in order:
                    seconds: list[float] = []

                    def timed(run: Callable[[], None] = run, seconds: list[float] = seconds) -> None:
                        started = time.perf_counter()
                        run()
                        seconds.append(time.perf_counter() - started)

                    arounds[config](timed)
                    times[config].append(seconds[0])
        out[name] = times
    return out


def render(times: dict[str, dict[str, list[float]]]) -> str:
    """Median pass over median bare pass per configuration (range of the per-round ratios), as markdown."""
    lines = ["| model | bare pass ms | " + " | ".join(f"{c} / bare" for c in CONFIGS[1:]) + " |"]
    lines.append("|---" * (len(CONFIGS) + 1) + "|")
    for name, by_config in times.items():
        bare = by_config["bare"]
        cells = []
        for config in CONFIGS[1:]:
            each = [t / b for t, b in zip(by_config[config], bare)]
            median = statistics.median(by_config[config]) / statistics.median(bare)
            cells.append(f"{median:.2f} ({min(each):.2f}–{max(each):.2f})")
        lines.append(f"| {name} | {statistics.median(bare) * 1e3:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.module_scope_study", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args(argv)
    from aitune_dispatch.tracing import native

    reason = native.hooks_unsupported() if native.available() else "the native tracer is not built"
    if reason is not None:
        raise SystemExit(f"module_scope_study needs the function-object hooks: {reason}")
    print(render(measure(args.rounds, args.calls)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
