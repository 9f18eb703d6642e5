"""Where a CUDA graph capture under ``observe_graph_captures`` spends its time, mechanism by mechanism.

    python -m benchmarks.capture_breakdown --out OUT [--models mlp sdpa_blocks] [--rounds 12]

Each model (those of ``benchmarks/graph_observer.py``) is called three times eagerly, then captured
again and again: one ``torch.cuda.graph`` capture of one forward, under ``torch.no_grad()``, timed
between ``torch.cuda.synchronize()`` calls after a ``gc.collect()`` (``torch.cuda.graph`` collects
too). Four variants, in turn within each round after one unmeasured capture of each:

- ``bare``: no observer;
- ``observed``: inside a started observer (``with observe_graph_captures(model):``);
- ``subscription only``: the observer's CUPTI graph-node subscription alone
  (``GraphNodeObserver`` started before the capture, stopped and emptied after it);
- ``tracing only``: the tracing the observer installs for a capture, built from the same public
  pieces with the observer's own options (``ModuleTracker``, ``make_tracer``, ``TraceSession``, the
  trace kept for later), without the subscription.

Per variant: the median capture and its range over the rounds; the medians of torch's own
``CUDAGraph.capture_begin`` and ``capture_end`` (timed beneath the observer's wrappers, which wrap
whatever the class holds when the observer starts); and what was done before ``capture_begin`` and
after ``capture_end``: the observer's ``seconds`` when observed, the variant's own set-up and
tear-down otherwise. Writes ``capture_breakdown.md`` and ``capture_breakdown.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import zoo
from .graph_observer import MODELS, model_and_input

VARIANTS = ("bare", "observed", "subscription only", "tracing only")
STEPS = ("torch capture_begin", "torch capture_end", "observer begin", "observer end")


@contextlib.contextmanager
def timed_capture_methods(laps: dict[str, float]) -> Iterator[None]:
    """``CUDAGraph.capture_begin`` / ``capture_end`` timed into ``laps`` (ms, summed) while entered."""
    graph_class = torch.cuda.CUDAGraph
    originals = {name: graph_class.__dict__.get(name) for name in ("capture_begin", "capture_end")}

    def timing(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed_method(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                key = f"torch {name}"
                laps[key] = laps.get(key, 0.0) + (time.perf_counter() - started) * 1e3

        return timed_method

    try:
        for name in originals:
            setattr(graph_class, name, timing(name, getattr(graph_class, name)))
        yield
    finally:
        for name, original in originals.items():
            if original is None:
                delattr(graph_class, name)
            else:
                setattr(graph_class, name, original)


def _capture(model: nn.Module, example: torch.Tensor, graph: torch.cuda.CUDAGraph) -> None:
    with torch.cuda.graph(graph):
        model(example)


def capture_once(model: nn.Module, example: torch.Tensor, variant: str) -> dict[str, float]:
    """One capture of ``model(example)`` in ``variant``: its ms and the steps' ms."""
    from aitune_dispatch import observe_graph_captures
    from aitune_dispatch.provenance.graphs import GraphNodeObserver, loaded_decoder
    from aitune_dispatch.tracing import ModuleTracker, TraceSession, make_tracer

    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    gc.collect()
    laps: dict[str, float] = {}
    clock = time.perf_counter
    with timed_capture_methods(laps):
        if variant == "bare":
            started = clock()
            _capture(model, example, graph)
            torch.cuda.synchronize()
            seconds = clock() - started
        elif variant == "observed":
            with observe_graph_captures(model) as watching:
                started = clock()
                _capture(model, example, graph)
                torch.cuda.synchronize()
                seconds = clock() - started
            laps["observer begin"] = watching.seconds["begin"] * 1e3
            laps["observer end"] = watching.seconds["end"] * 1e3
        else:
            options = observe_graph_captures(model)  # never started: the options an observer would use
            tracker = ModuleTracker(model)  # an observer reads the hierarchy when it starts
            started = clock()
            if variant == "subscription only":
                nodes = GraphNodeObserver(options.kind, loaded_decoder())
                if not nodes.start():
                    raise RuntimeError(f"the graph-node subscription failed: {nodes.unavailable}")
                began = clock()
                try:
                    _capture(model, example, graph)
                finally:
                    ended = clock()
                    nodes.stop()
                    nodes.take_raw()
            else:
                tracer = make_tracer(
                    options.backend, tracker.module_ids(), frozenset(), options.target, options.all_functions
                )
                with TraceSession(tracker, tracer):
                    began = clock()
                    _capture(model, example, graph)
                    ended = clock()
                tracer.later_tables()
            finished = clock()
            torch.cuda.synchronize()
            seconds = clock() - started
            laps["observer begin"] = (began - started) * 1e3
            laps["observer end"] = (finished - ended) * 1e3
    return {"capture": seconds * 1e3, **laps}


def measure(name: str, rounds: int) -> dict[str, Any]:
    """Every variant's captures of ``name``, ``rounds`` times each, interleaved."""
    model, example = model_and_input(name)
    runs: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    with torch.no_grad():
        for _ in range(3):
            model(example)  # libraries initialised (cuBLAS) before any capture
        for variant in VARIANTS:
            capture_once(model, example, variant)
        for _ in range(rounds):
            for variant in VARIANTS:
                runs[variant].append(capture_once(model, example, variant))
    summary: dict[str, Any] = {}
    for variant, laps in runs.items():
        captures = [lap["capture"] for lap in laps]
        summary[variant] = {
            "capture_ms": statistics.median(captures),
            "capture_min_ms": min(captures),
            "capture_max_ms": max(captures),
            **{step: statistics.median(lap.get(step, 0.0) for lap in laps) for step in STEPS},
        }
    return {"model": name, "input": list(example.shape), "rounds": rounds, "variants": summary, "runs": runs}


def render(results: Sequence[dict[str, Any]]) -> str:
    """``## Where an observed capture goes``: one row per model and variant, as markdown."""
    lines = [
        "## Where an observed capture goes",
        "",
        "| model | variant | capture ms (range) | over bare ms | torch capture_begin ms | torch capture_end ms "
        "| observer begin ms | observer end ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.get("status") == "skipped":
            lines.append(f"| {r['model']} | – | skipped: {r.get('reason', '')} | – | – | – | – | – |")
            continue
        variants = r["variants"]
        bare = variants["bare"]["capture_ms"]
        for variant in VARIANTS:
            v = variants[variant]
            observer = "–" if variant == "bare" else f"{v['observer begin']:.3f}"
            observer_end = "–" if variant == "bare" else f"{v['observer end']:.3f}"
            capture = f"{v['capture_ms']:.3f} ({v['capture_min_ms']:.3f}–{v['capture_max_ms']:.3f})"
            lines.append(
                f"| {r['model']} | {variant} | {capture} | {v['capture_ms'] - bare:+.3f} "
                f"| {v['torch capture_begin']:.3f} | {v['torch capture_end']:.3f} | {observer} | {observer_end} |"
            )
    lines += [
        "",
        "One `torch.cuda.graph` capture of one forward (no warm-up iterations), medians over the rounds "
        "(the range: over the rounds). `subscription only`: the observer's CUPTI graph-node subscription, no "
        "tracing; `tracing only`: the observer's tracing, no subscription. torch's `capture_begin` / "
        "`capture_end` are timed beneath the observer's wrappers; the observer's begin and end are its "
        "`seconds` (its work before `capture_begin` and after `capture_end`), or the variant's own set-up and "
        "tear-down around the capture.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every model and write capture_breakdown.md / .json."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.capture_breakdown", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--models", nargs="*", default=list(MODELS))
    p.add_argument("--rounds", type=int, default=12)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("capture_breakdown needs CUDA")
    zoo.measure_each(args.models, lambda name: measure(name, args.rounds), render, Path(args.out), "capture_breakdown")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
