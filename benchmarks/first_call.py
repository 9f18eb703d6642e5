"""What a one-shot profile costs: the import and the first ``profile()`` in a fresh process, per zoo model.

    python -m benchmarks.first_call --out OUT [--models ...] [--device cuda] [--size bench] [--warmup 1]

Each model runs in two fresh processes, one for ours and one for the AITune-style baseline
(``reference_baseline.py``), so that neither pays for nor profits from the other's start-up. In
each: torch and the model's package are imported and the model built, one bare pass runs (CUDA
context, cuBLAS and cuDNN start-up belong to the model, not to a profiler), then the profiler's
import is timed, then its first ``profile()`` (``warmup_iterations=--warmup``, the spec's
``(profiling_df, function_data)`` returned), then a second one. The child also lists what the
import and the first ``profile()`` loaded of ``torch._dynamo`` and ``torch._inductor``: an eager
model should load neither. Writes ``first_call.md`` and ``first_call.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EAGER_MODELS = (
    "mlp", "resnet50", "mha_blocks", "sdpa_blocks", "vit_b_16", "efficientnet_b0", "gpt2", "llama_generate",
    "unet_sd15",
)
COMPILER_PACKAGES = ("torch._dynamo", "torch._inductor")
COLUMNS = "| model | import s | our first profile() s | baseline first profile() s | our second profile() s |"


def compiler_modules() -> list[str]:
    """The loaded modules of ``torch._dynamo`` and ``torch._inductor`` (their packages included)."""
    return sorted(
        name for name in sys.modules if any(name == p or name.startswith(p + ".") for p in COMPILER_PACKAGES)
    )


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def child(model: str, method: str, device: str, size: str, warmup: int) -> dict[str, Any]:
    """One fresh process's measurements (what ``--child`` prints as JSON)."""
    import torch

    from . import zoo

    work = zoo.build(model, device, 1, size=size)
    with torch.no_grad():
        work.run()
    _sync(device)
    before = set(compiler_modules())
    started = time.perf_counter()
    if method == "ours":
        from aitune_dispatch import ModuleFunctionKernelProfiler

        profiler: Any = ModuleFunctionKernelProfiler(device=device)
    else:
        from .reference_baseline import ReferenceBaseline

        profiler = ReferenceBaseline(device=device)
    import_s = time.perf_counter() - started
    after_import = sorted(set(compiler_modules()) - before)
    if work.function is not None:
        function, data, kwargs = work.function, None, {"module": work.model}
    else:
        function, data, kwargs = work.model, work.samples, {}
    seconds = []
    rows = 0
    for _ in range(2):
        _sync(device)
        started = time.perf_counter()
        frame, _function_data = profiler.profile(function, data, warmup_iterations=warmup, **kwargs)
        seconds.append(time.perf_counter() - started)
        rows = len(frame)
        if len(seconds) == 1:
            after_first = sorted(set(compiler_modules()) - before)
    return {
        "model": model, "method": method, "import_s": import_s, "first_s": seconds[0], "second_s": seconds[1],
        "rows": rows, "compiler_modules_after_import": after_import, "compiler_modules_after_first": after_first,
        "compiler_modules_before": len(before),
    }


def run_child(model: str, method: str, args: argparse.Namespace) -> dict[str, Any]:
    """``child()`` in a fresh interpreter; an error is returned as ``{"error": ...}``."""
    command = [sys.executable, "-m", "benchmarks.first_call", "--child", model, method,
               "--device", args.device, "--size", args.size, "--warmup", str(args.warmup)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout_s, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"model": model, "method": method, "error": (done.stderr or done.stdout)[-2000:]}
    return json.loads(lines[-1])


def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def render(rows: list[dict[str, Any]]) -> str:
    """The ``## First call`` table, the targets it is read against, and what was loaded."""
    lines = ["## First call", "", COLUMNS, "|---|---|---|---|---|"]
    loaded = ["", "| model | torch._dynamo / torch._inductor modules loaded by our import | by our first profile() |",
              "|---|---|---|"]
    verdicts = []
    for row in rows:
        ours, base = row.get("ours", {}), row.get("baseline", {})
        if "error" in ours or not ours:
            lines.append(f"| {row['model']} | – | – | {_cell(base.get('first_s'))} | – |")
            verdicts.append(f"- {row['model']}: ours failed: {ours.get('error', 'no result')[-300:]!r}")
            continue
        lines.append(
            f"| {row['model']} | {_cell(ours['import_s'])} | {_cell(ours['first_s'])} | "
            f"{_cell(base.get('first_s'))} | {_cell(ours['second_s'])} |"
        )
        loaded.append(
            f"| {row['model']} | {len(ours['compiler_modules_after_import'])} | "
            f"{len(ours['compiler_modules_after_first'])} |"
        )
        bound = 1.3 * (ours["second_s"] + ours["import_s"])
        base_first = base.get("first_s")
        verdicts.append(
            f"- {row['model']}: first {ours['first_s']:.3f} s ≤ baseline first "
            f"{'–' if base_first is None else f'{base_first:.3f}'} s: "
            f"{'–' if base_first is None else ('yes' if ours['first_s'] <= base_first else 'NO')}; "
            f"≤ 1.3 × (second + import) = {bound:.3f} s: {'yes' if ours['first_s'] <= bound else 'NO'}"
        )
    return "\n".join([*lines, *loaded, "", "Targets:", "", *verdicts]) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every model in fresh processes and write first_call.md / .json."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.first_call", description=__doc__.split("\n")[0])
    p.add_argument("--out")
    p.add_argument("--models", nargs="*", default=list(EAGER_MODELS))
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--size", default="bench", choices=("bench", "small"))
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--timeout-s", type=float, default=240.0)
    p.add_argument("--child", nargs=2, metavar=("MODEL", "METHOD"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        from .zoo import ModelUnavailable

        try:
            print(json.dumps(child(args.child[0], args.child[1], args.device, args.size, args.warmup)), flush=True)
        except ModelUnavailable as error:
            print(f"skipped: {error}", file=sys.stderr)
            return 3
        return 0
    if not args.out:
        p.error("--out is required")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for model in args.models:
        row = {"model": model, "ours": run_child(model, "ours", args), "baseline": run_child(model, "baseline", args)}
        rows.append(row)
        print(render([row]).splitlines()[4], flush=True)
        # written after every model, so that a run cut short by its time limit keeps what it measured
        (out / "first_call.json").write_text(json.dumps(rows, indent=1))
        (out / "first_call.md").write_text(render(rows))
    print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
