"""How much of a training step's kernel time ``recording()`` attributes, and whether it runs the kernels a
bare capture of the same steps runs, in one process.

    python -m benchmarks.train_attribution --out OUT [--models mlp block] [--steps 5] [--device auto]

Each workload (a model, a loss through ``F.mse_loss`` and an AdamW optimizer: fused on CUDA for the MLP,
foreach for the transformer block) is warmed for 3 steps, then ``--steps`` steps are recorded with
``rec.step()`` after each. Reported per workload: the share of kernel time with a module, a functional call
or the optimizer's step call (issue 43's target: at least 95% for the fused-AdamW MLP on the GPU), split
into forward (``trace``), ``backward`` and ``optimizer`` rows, the share inside both a module and a call
(what ``profiling_df()`` reports), the median, min and max of the attributed share per step, what the rest
is (the ops of the unattributed time, largest first), and on CUDA whether the recorded kernels equal a bare
CUPTI capture of as many steps (name multisets). Writes ``train_attribution.md`` and
``train_attribution.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import aitune_dispatch

from . import harness

_REST_LISTED = 5


def _mlp(device: str) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor]:
    width = 1024 if device == "cuda" else 64
    model = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    return model, optimizer, torch.randn(256 if device == "cuda" else 16, width, device=device)


def _block(device: str) -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor]:
    width = 512 if device == "cuda" else 64
    model = nn.TransformerEncoderLayer(width, 8, 4 * width, dropout=0.0, batch_first=True).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    return (
        model,
        optimizer,
        torch.randn(8 if device == "cuda" else 2, 128 if device == "cuda" else 16, width, device=device),
    )


WORKLOADS: dict[str, Callable[[str], tuple[nn.Module, torch.optim.Optimizer, torch.Tensor]]] = {
    "mlp": _mlp,
    "block": _block,
}


def _stepper(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> Callable[[], None]:
    target = torch.zeros_like(x)

    def step() -> None:
        F.mse_loss(model(x), target).backward()
        optimizer.step()
        optimizer.zero_grad()

    return step


def _bare_kernels(step: Callable[[], None], steps: int) -> collections.Counter[str]:
    from aitune_dispatch.collection import make_cuda_source

    source = make_cuda_source()
    torch.cuda.synchronize()
    source.start()
    try:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    finally:
        source.stop()
    return collections.Counter(source.activity().kernels.column("name").to_pylist())


def shares(activity: Any, step_of_row: np.ndarray) -> dict[str, Any]:
    """The attributed shares of a recorded training loop's activity (a pandas frame of ``result.activity``)
    with each row's step."""
    us = activity["kernel_us"].to_numpy(dtype=float)
    total = float(us.sum()) or 1.0
    attribution = activity["attribution"].astype(str).to_numpy()
    module, call = activity["module_id"].to_numpy(), activity["call_id"].to_numpy()
    attributed = (module >= 0) | (call >= 0)
    per_step = [
        float(us[(step_of_row == step) & attributed].sum() / (us[step_of_row == step].sum() or 1.0))
        for step in sorted(set(step_of_row.tolist()))
    ]
    rest = collections.Counter()
    for op, time_us in zip(activity["op"].astype(str).to_numpy()[~attributed], us[~attributed]):
        rest[op] += float(time_us)
    return {
        "attributed": float(us[attributed].sum() / total),
        "forward": float(us[attributed & (attribution == "trace")].sum() / total),
        "backward": float(us[attributed & (attribution == "backward")].sum() / total),
        "optimizer": float(us[attributed & (attribution == "optimizer")].sum() / total),
        "module_and_call": float(us[(module >= 0) & (call >= 0)].sum() / total),
        "per_step": per_step,
        "rest": [(op, time_us / total) for op, time_us in rest.most_common(_REST_LISTED)],
        "kernel_us": total,
    }


def measure(name: str, device: str, steps: int) -> dict[str, Any]:
    """The attributed shares of ``steps`` recorded training steps of workload ``name``, and on CUDA whether
    their kernels equal a bare capture's."""
    torch.manual_seed(0)
    model, optimizer, x = WORKLOADS[name](device)
    step = _stepper(model, optimizer, x)
    for _ in range(3):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
    with aitune_dispatch.recording(model, device=device) as rec:
        for _ in range(steps):
            step()
            rec.step()
    result = rec.result
    from aitune_dispatch.results.views.steps import row_steps

    row = {"model": name, "device": device, "steps": steps, **shares(result.activity.to_pandas(), row_steps(result))}
    if device == "cuda":
        recorded = collections.Counter(result.activity.column("kernel").to_pylist())
        bare = _bare_kernels(step, steps)
        row["same_kernels"] = recorded == bare
        row["kernel_difference"] = {
            "recorded_only": dict((recorded - bare).most_common(5)),
            "bare_only": dict((bare - recorded).most_common(5)),
        }
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of ``rows`` (``measure``'s), shares in percent of each workload's kernel time."""
    lines = [
        "| model | device | steps | attributed | forward | backward | optimizer | module and call "
        "| attributed per step (median, min..max) | same kernels as bare | the rest |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in rows:
        per_step = row["per_step"]
        rest = ", ".join(f"{op} {100 * share:.2f}%" for op, share in row["rest"]) or "none"
        same = {True: "yes", False: "no"}.get(row.get("same_kernels"), "n/a (CPU)")
        lines.append(
            f"| {row['model']} | {row['device']} | {row['steps']} | {100 * row['attributed']:.2f}% | "
            f"{100 * row['forward']:.2f}% | {100 * row['backward']:.2f}% | {100 * row['optimizer']:.2f}% | "
            f"{100 * row['module_and_call']:.2f}% | {100 * statistics.median(per_step):.2f}% "
            f"({100 * min(per_step):.2f}..{100 * max(per_step):.2f}%) | {same} | {rest} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", nargs="+", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    args = parser.parse_args(argv)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    args.device, args.command = device, " ".join(["python -m benchmarks.train_attribution", *(argv or sys.argv[1:])])
    started = time.perf_counter()
    rows = [measure(name, device, args.steps) for name in args.models]
    info = harness.meta(args, time.perf_counter() - started)
    args.out.mkdir(parents=True, exist_ok=True)
    header = "\n".join(f"- {key}: {value}" for key, value in info.items())
    text = f"# Kernel time a recorded training step attributes\n\n{header}\n\n{table(rows)}\n"
    (args.out / "train_attribution.md").write_text(text)
    (args.out / "train_attribution.json").write_text(json.dumps({"meta": info, "rows": rows}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
