"""What a recorded step costs beyond the recorded work: ``recording()`` with ``rec.step()`` after each
iteration against the same iterations recorded as one step, beside the bare loop, in one process.

    python -m benchmarks.step_cost --out OUT [--models mlp sdpa_blocks] [--steps 50] [--rounds 7] [--device auto]

Each round times, for each zoo model (bench size on CUDA, small on the CPU), the same ``--steps``
iterations (one pass over the model's samples each, under ``torch.no_grad()``) three ways, in an order
that rotates each round: bare; inside ``recording(model)`` as one step; inside ``recording(model)``
with ``rec.step()`` after each iteration. The time is the block's own (first iteration to the end of
the last, with ``torch.cuda.synchronize()``), not the post-processing after it. Issue 43's target: a
step costs no more than 0.1 ms beyond what its recorded iteration costs, i.e. ``(stepped − one step)
/ steps`` at most 0.1 ms. Reports medians over rounds and the spread (min–max of that per-step excess
over rounds). Writes ``step_cost.md`` and ``step_cost.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import aitune_dispatch

from . import harness, zoo


def _iterations(model: torch.nn.Module, samples: list[Any], steps: int, after_each: Callable[[], None]) -> None:
    for _ in range(steps):
        for args, kwargs in samples:
            model(*args, **kwargs)
        after_each()


def _timed(run: Callable[[], None], cuda: bool) -> float:
    if cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    run()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - started


def _nothing() -> None:
    return None


def measure(name: str, device: str, steps: int, rounds: int) -> dict[str, Any]:
    """Seconds per configuration and round for ``name``, and the per-step excess in ms."""
    cuda = device == "cuda"
    workload = zoo.build(name, device, size="bench" if cuda else "small")
    model, samples = workload.model, workload.samples
    times: dict[str, list[float]] = {"bare": [], "one step": [], "stepped": []}

    def bare() -> float:
        return _timed(lambda: _iterations(model, samples, steps, _nothing), cuda)

    def recorded(stepped: bool) -> float:
        with aitune_dispatch.recording(model, device=device) as rec:
            seconds = _timed(lambda: _iterations(model, samples, steps, rec.step if stepped else _nothing), cuda)
        if stepped:
            assert len(rec.result.steps(by="function_name")) > 0  # the steps were kept
        return seconds

    runs: dict[str, Callable[[], float]] = {
        "bare": bare,
        "one step": lambda: recorded(False),
        "stepped": lambda: recorded(True),
    }
    with torch.no_grad():
        for run in runs.values():  # warm: the first recording pays the process's once-only costs
            run()
        gc.collect()
        gc.freeze()
        order = list(runs)
        for round_ in range(rounds):
            for key in order[round_ % 3 :] + order[: round_ % 3]:
                times[key].append(runs[key]())
        gc.unfreeze()
    excess_ms = [1e3 * (s - o) / steps for s, o in zip(times["stepped"], times["one step"])]
    return {"model": name, "device": device, "steps": steps, "rounds": rounds, "seconds": times, "excess_ms": excess_ms}


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of ``rows`` (``measure``'s)."""
    lines = [
        "| model | device | steps | bare (ms) | one step / bare | stepped / bare | excess per step (ms, median) "
        "| spread over rounds (ms) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        median = {key: statistics.median(values) for key, values in row["seconds"].items()}
        excess = row["excess_ms"]
        lines.append(
            f"| {row['model']} | {row['device']} | {row['steps']} | {1e3 * median['bare']:.2f} | "
            f"{median['one step'] / median['bare']:.3f} | {median['stepped'] / median['bare']:.3f} | "
            f"{statistics.median(excess):+.4f} | {min(excess):+.4f} .. {max(excess):+.4f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", nargs="+", default=["mlp", "sdpa_blocks"])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    args = parser.parse_args(argv)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    args.device, args.command = device, " ".join(["python -m benchmarks.step_cost", *(argv or sys.argv[1:])])
    started = time.perf_counter()
    rows = [measure(name, device, args.steps, args.rounds) for name in args.models]
    info = harness.meta(args, time.perf_counter() - started)
    args.out.mkdir(parents=True, exist_ok=True)
    header = "\n".join(f"- {key}: {value}" for key, value in info.items())
    text = f"# Per-step cost of recording\n\n{header}\n\n{table(rows)}\n"
    (args.out / "step_cost.md").write_text(text)
    (args.out / "step_cost.json").write_text(json.dumps({"meta": info, "rows": rows}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
