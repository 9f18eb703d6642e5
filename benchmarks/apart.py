"""One model's measurement in a process of its own, for benchmarks that run torch.profiler beside ours.

torch.profiler's Kineto keeps CUPTI's one callback subscription once it has run in a process, and
``profile()`` then falls back from launch correlation to pushed ids (``docs/design.md``, "Correlation:
what CUPTI needs"). So a benchmark that measures both runs each model in a fresh process, ours first:
the parent calls :func:`measure_apart`, which runs ``python -m <module> --out OUT --one MODEL ...``, and
the child calls :func:`write_one`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import zoo


def measure_apart(module: str, name: str, out: Path, arguments: Sequence[str]) -> dict[str, Any]:
    """``python -m <module> --out OUT --one <name> <arguments>``, then its ``OUT/<name>.json``; a report with
    ``status: error`` where the process failed or wrote nothing."""
    target = out / f"{name}.json"
    target.unlink(missing_ok=True)
    command = [sys.executable, "-m", module, "--out", str(out), "--one", name, *arguments]
    done = subprocess.run(command, check=False)
    if done.returncode != 0 or not target.exists():
        return {"model": name, "status": "error", "reason": f"its process exited with status {done.returncode}"}
    return json.loads(target.read_text())


def write_one(out: Path, name: str, measure: Callable[[], dict[str, Any]]) -> None:
    """The child's side: ``measure()`` (or the skipped report where the model's package is missing) into
    ``OUT/<name>.json``."""
    try:
        result = measure()
    except zoo.ModelUnavailable as error:
        result = {"model": name, "status": "skipped", "reason": str(error)}
    (out / f"{name}.json").write_text(json.dumps(result, default=str))
