"""Replayed vs recorded per-call kernel time of the zoo's samples (``aitune_dispatch.benchmark``).

    python -m benchmarks.replay_ratios [--device cuda|cpu] [--size bench|small] [--models ...]
                                       [--functions linear,conv2d,...] [--repeats 50] [--cache warm|cold]
                                       [--out DIR]

For each zoo model: one ``profile()`` (after ``--profile-warmup`` passes), then ``benchmark()`` on the
selected functions' samples. Prints one line per (model, function, sample): calls, the recorded
kernel time per call (nested calls included), the replayed one, their ratio (replayed / recorded)
and whether the replay launched the recorded kernel multiset; then per model the median ratio and
how many samples with matching kernels are within ``--tolerance`` (10%) of the recorded time.
``--out`` also writes ``replay_ratios.csv`` and ``replay_ratios.md``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from aitune_dispatch.config import CACHE_STATES, DEVICES

from . import zoo

FUNCTIONS = ("linear", "conv2d", "scaled_dot_product_attention", "layer_norm")


def model_rows(name: str, args: argparse.Namespace) -> pd.DataFrame:
    """The benchmark rows of one zoo model, with ``model``, ``signature`` and ``ratio`` columns."""
    from aitune_dispatch import ModuleFunctionKernelProfiler, benchmark

    workload = zoo.build(name, args.device, size=args.size)
    profiler = ModuleFunctionKernelProfiler(device=args.device)
    result = profiler.profile_result(workload.model, workload.samples, warmup_iterations=args.profile_warmup)
    functions = [f for f in args.functions if f in result.function_data]
    if not functions:
        return pd.DataFrame()
    table = benchmark(result, functions, repeats=args.repeats, warmup=args.warmup, cache=args.cache)
    signatures = result.samples().set_index(["function_name", "sample"])["signature"]
    table.insert(0, "model", name)
    table["signature"] = [signatures.get((f, s), "") for f, s in zip(table["function_name"], table["sample"])]
    table["ratio"] = table["us_per_call"] / table["recorded_us_per_call"]
    return table


def summary(table: pd.DataFrame, tolerance: float) -> pd.DataFrame:
    """Per model: samples, kernel matches, median ratio where kernels match, and how many are within tolerance."""
    records: list[dict[str, Any]] = []
    for name, rows in table.groupby("model", sort=False):
        matching = rows[rows["kernels_match"].fillna(False).astype(bool) & rows["ok"]]
        ratios = [r for r in matching["ratio"] if not math.isnan(r)]
        within = sum(abs(r - 1.0) <= tolerance for r in ratios)
        records.append(
            {
                "model": name,
                "samples": len(rows),
                "kernels_match": len(matching),
                "median_ratio": statistics.median(ratios) if ratios else math.nan,
                "min_ratio": min(ratios) if ratios else math.nan,
                "max_ratio": max(ratios) if ratios else math.nan,
                f"within_{tolerance:.0%}": f"{within}/{len(ratios)}",
            }
        )
    return pd.DataFrame(records)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--device", choices=DEVICES, default="cuda")
    parser.add_argument("--size", choices=["bench", "small"], default="bench")
    parser.add_argument("--models", nargs="+", default=list(zoo.ZOO))
    parser.add_argument("--functions", type=lambda t: [n for n in t.split(",") if n], default=list(FUNCTIONS))
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile-warmup", type=int, default=3)
    parser.add_argument("--cache", choices=CACHE_STATES, default="warm", help="benchmark()'s cache state")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--out", type=Path)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    tables = []
    for name in args.models:
        try:
            tables.append(model_rows(name, args))
        except zoo.ModelUnavailable as error:
            print(f"skipped {name}: {error}", file=sys.stderr)
    tables = [t for t in tables if not t.empty]
    if not tables:
        print("no samples of the selected functions in the selected models", file=sys.stderr)
        return 1
    table = pd.concat(tables, ignore_index=True)
    columns = ["model", "function_name", "sample", "calls", "recorded_us_per_call", "us_per_call", "ratio"]
    columns += ["kernels_match", "ok", "signature"]
    per_model = summary(table, args.tolerance)
    with pd.option_context("display.width", 250, "display.max_columns", 20, "display.max_colwidth", 70):
        print(table[columns].to_string(index=False, float_format="{:.4g}".format))
        print()
        print(per_model.to_string(index=False, float_format="{:.3f}".format))
    for row in table[table["error"].notna()].itertuples():
        print(f"not ok: {row.model} {row.function_name} sample {row.sample}: {row.error}", file=sys.stderr)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out / "replay_ratios.csv", index=False)
        text = per_model.to_markdown(index=False) if _has_tabulate() else per_model.to_string(index=False)
        title = f"# Replayed / recorded kernel time per call ({args.cache} cache)"
        (args.out / "replay_ratios.md").write_text(f"{title}\n\n{text}\n")
    return 0


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
