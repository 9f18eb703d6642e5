"""The ``aitune-dispatch`` command line: small subcommand functions over the public API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pandas as pd


def _pick_device(requested: str) -> str:
    import torch

    if requested != "auto":
        return requested
    return "cuda" if torch.cuda.is_available() else "cpu"


def cmd_demo(args: argparse.Namespace) -> int:
    """Profile the built-in demo model and print the summary table."""
    from .demo import demo_workload
    from .profiler import ModuleFunctionKernelProfiler

    device = _pick_device(args.device)
    model, samples = demo_workload(device)
    profiler = ModuleFunctionKernelProfiler(device=device)
    profiling_df, function_data = profiler.profile(model, samples, warmup_iterations=args.warmup)
    result = profiler.last_result
    assert result is not None
    summary = profiler.describe_results(profiling_df, function_data, top_k=args.top_k)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(f"aitune_dispatch demo on {device} ({result.source} activity source)")
        print(summary.to_string())
        print(
            f"{len(profiling_df)} attributed rows of {result.activity.num_rows}; "
            f"coverage {result.coverage:.1%} of {result.total_us:.1f} us"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one subparser per subcommand."""
    parser = argparse.ArgumentParser(prog="aitune-dispatch", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="profile the built-in demo model")
    demo.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    demo.add_argument("--warmup", type=int, default=3)
    demo.add_argument("--top-k", type=int, default=10)
    demo.set_defaults(run=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = build_parser().parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
