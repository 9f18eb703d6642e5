"""Benchmark harness: aitune_dispatch vs the record_function baseline vs the bare model, on the zoo.

    python -m benchmarks.harness --out OUT              # the H200 run: bench sizes, ×1 ×4 ×16 ×64
    python -m benchmarks.harness --device cpu --quick --out OUT   # CPU smoke, well under a minute

For every zoo model and method (``ours-native``, ``ours-python``, ``ours-pytracer``, ``baseline`` on CUDA; ``ours``,
``baseline`` on the CPU) a worker (:mod:`benchmarks.worker`) measures ``profile()`` at each repeat
of the sample list. Workers run in fresh processes (``--isolate worker``) so that start-up costs and
host memory never leak between methods; the whole run keeps to ``--budget-s`` by skipping what its
measurements predict will not fit. Writes ``results.json``, ``RESULTS.md`` and the workers' logs
under ``--out``; with CUDA it also runs :mod:`benchmarks.compare_reference` and includes its table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from aitune_dispatch.config import DEVICES

from . import report, worker

ROOT = Path(__file__).resolve().parents[1]
MODEL_ORDER = ["sdpa_blocks", "vit_b_16", "gpt2", "resnet50", "mha_blocks", "mlp"]
CUDA_METHODS = ["ours-native", "baseline", "ours-python", "ours-pytracer"]
CPU_METHODS = ["ours", "baseline"]
COMPARE_TIMEOUT_S = 120
QUICK_MODELS = ["mlp", "sdpa_blocks", "mha_blocks"]
PACKAGES = [
    "torch",
    "cupti-python",
    "nvidia-cuda-cupti",
    "torchvision",
    "transformers",
    "pandas",
    "pyarrow",
    "numpy",
    "aitune-dispatch",
]


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options, with the ``--quick`` and device defaults filled in."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.harness", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for results.json, RESULTS.md, logs and cProfile texts")
    p.add_argument("--device", default="cuda", choices=DEVICES)
    p.add_argument("--quick", action="store_true", help="small sizes, ×1 ×2, three small models, in-process")
    p.add_argument("--models", nargs="*", help=f"zoo models (default: {' '.join(MODEL_ORDER)})")
    p.add_argument(
        "--methods",
        nargs="*",
        help="ours-native ours-python ours-pytracer ours baseline (default: by device)",
    )
    p.add_argument("--repeats", default=None, help="comma-separated sample-list repeats (default 1,4,16,64)")
    p.add_argument("--size", choices=["bench", "small"], help="zoo size (default: bench; small with --quick)")
    p.add_argument("--warmup", type=int, default=1, help="warmup_iterations of every profile() call")
    p.add_argument("--budget-s", type=float, default=360.0, help="wall budget of all workers (then ≤120 s compare)")
    p.add_argument("--call-cap-s", type=float, default=40.0, help="skip a repeat predicted to take longer")
    p.add_argument("--isolate", choices=["worker", "none"], help="fresh process per worker (default) or in-process")
    p.add_argument("--cprofile-top", type=int, default=0, help="cProfile our methods at the largest size, top N")
    p.add_argument("--cprofile-baseline", action="store_true", help="also cProfile the baseline")
    p.add_argument(
        "--compare",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run benchmarks.compare_reference too (default: on with CUDA)",
    )
    p.add_argument("--results-md", help="also write RESULTS.md here (e.g. benchmarks/RESULTS.md)")
    raw = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(raw)
    _defaults(args)
    args.command = shlex.join(["python", "-m", "benchmarks.harness", *raw])
    return args


def _defaults(args: argparse.Namespace) -> None:
    quick = args.quick
    args.size = args.size or ("small" if quick else "bench")
    args.repeats = [int(r) for r in (args.repeats or ("1,2" if quick else "1,4,16,64")).split(",")]
    args.models = args.models or (QUICK_MODELS if quick else MODEL_ORDER)
    args.methods = args.methods or (CUDA_METHODS if args.device == "cuda" else CPU_METHODS)
    args.isolate = args.isolate or ("none" if quick else "worker")
    args.compare = args.device == "cuda" if args.compare is None else args.compare


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One worker spec per model × method, model-major, without deadlines yet."""
    out = Path(args.out)
    specs = []
    for model in args.models:
        for method in args.methods:
            top = args.cprofile_top if (method != "baseline" or args.cprofile_baseline) else 0
            specs.append(
                {
                    "model": model,
                    "method": method,
                    "device": args.device,
                    "size": args.size,
                    "repeats": args.repeats,
                    "warmup": args.warmup,
                    "call_cap_s": args.call_cap_s,
                    "cprofile_top": top,
                    "result": str(out / "workers" / f"{model}__{method}.json"),
                }
            )
    return specs


def run_workers(args: argparse.Namespace, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run every worker within the budget; each gets a fair share of what is left (at least 60 s)."""
    results, stop_at = [], time.time() + args.budget_s
    for index, spec in enumerate(specs):
        left = stop_at - time.time()
        if left <= 5:
            results.append({**_identity(spec), "status": "skipped", "reason": "harness budget spent", "runs": []})
            continue
        spec["deadline"] = time.time() + min(left, max(60.0, 2 * left / (len(specs) - index)))
        print(f"[harness] {spec['model']} / {spec['method']} ({left:.0f} s left)", flush=True)
        results.append(_run_one(args, spec))
    return results


def _identity(spec: dict[str, Any]) -> dict[str, Any]:
    return {"model": spec["model"], "method": spec["method"]}


def _run_one(args: argparse.Namespace, spec: dict[str, Any]) -> dict[str, Any]:
    """One worker, in a fresh process or in this one."""
    if args.isolate == "none":
        return worker.run(spec)
    path = Path(spec["result"])
    spec_path = path.with_suffix(".spec.json")
    spec_path.write_text(json.dumps(spec))
    log = path.with_suffix(".log")
    timeout = max(spec["deadline"] - time.time(), 0) + 30
    command = [sys.executable, "-m", "benchmarks.worker", str(spec_path)]
    try:
        with open(log, "w") as handle:
            subprocess.run(command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {**_identity(spec), "status": "error", "reason": f"timed out after {timeout:.0f} s", "runs": []}
    if not path.exists():
        return {**_identity(spec), "status": "error", "reason": f"no result; see {log.name}", "runs": []}
    return json.loads(path.read_text())


def run_compare(args: argparse.Namespace) -> str | None:
    """benchmarks.compare_reference in a fresh process; its markdown table, or why it is missing."""
    folder = Path(args.out) / "compare"
    command = [
        sys.executable,
        "-m",
        "benchmarks.compare_reference",
        "--device",
        args.device,
        "--size",
        args.size,
        "--out",
        str(folder),
        "--models",
        *args.models,
    ]
    print("[harness] compare_reference", flush=True)
    try:
        with open(Path(args.out) / "compare.log", "w") as handle:
            subprocess.run(
                command, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, timeout=COMPARE_TIMEOUT_S, check=False
            )
    except subprocess.TimeoutExpired:
        return f"compare_reference timed out after {COMPARE_TIMEOUT_S} s (see compare.log)\n"
    table = folder / "compare.md"
    return table.read_text() if table.exists() else "compare_reference failed (see compare.log)\n"


def meta(args: argparse.Namespace, wall_s: float) -> dict[str, Any]:
    """Machine, versions, date and command of this run."""
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": _gpu_name(args.device),
        "cpu": _cpu_name(),
        "versions": {"python": platform.python_version(), **_versions()},
        "commit": _commit(),
        "command": args.command,
        "wall_s": wall_s,
    }


def _versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _gpu_name(device: str) -> str:
    if device != "cuda":
        return f"{platform.node()} (no GPU used)"
    try:
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        return subprocess.run(query, capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        import torch

        return torch.cuda.get_device_name() if torch.cuda.is_available() else "unknown GPU"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            names = [line.split(":", 1)[1].strip() for line in info if line.startswith("model name")]
        return f"{names[0]} ×{len(names)}" if names else platform.processor()
    except OSError:
        return platform.processor()


def _commit() -> str:
    if os.environ.get("GIT_COMMIT"):  # set by whoever sent the tree (a copy's git metadata can be stale)
        return os.environ["GIT_COMMIT"]
    try:
        command = ["git", "rev-parse", "--short", "HEAD"]
        found = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        return found + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("GIT_COMMIT", "unknown (no git)")


def write(args: argparse.Namespace, results: dict[str, Any]) -> Path:
    """results.json and RESULTS.md under ``--out`` (and ``--results-md``); returns RESULTS.md's path."""
    out = Path(args.out)
    texts = {}
    for w in results["workers"]:
        if w.get("cprofile") and (out / "workers" / w["cprofile"]).exists():
            texts[w["cprofile"]] = (out / "workers" / w["cprofile"]).read_text()
    results["cprofile_text"] = texts
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    text = report.render(results)
    (out / "RESULTS.md").write_text(text)
    if args.results_md:
        Path(args.results_md).write_text(text)
    return out / "RESULTS.md"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the workers (and the comparison), then write the results."""
    args = parse(argv)
    started = time.time()
    (Path(args.out) / "workers").mkdir(parents=True, exist_ok=True)
    workers = run_workers(args, plan(args))
    compare_md = run_compare(args) if args.compare else None
    config = {k: getattr(args, k) for k in ("device", "size", "warmup", "repeats", "isolate", "models", "methods")}
    results = {
        "meta": meta(args, time.time() - started),
        "config": config,
        "workers": workers,
        "compare_md": compare_md,
    }
    path = write(args, results)
    print(report.targets_table(results))
    print(f"[harness] wrote {path} in {time.time() - started:.0f} s", flush=True)
    return 0 if all(w.get("status") in ("ok", "skipped") for w in workers) else 1


if __name__ == "__main__":
    sys.exit(main())
