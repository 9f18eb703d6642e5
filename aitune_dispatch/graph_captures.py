"""``observe_graph_captures``: attribute replays of CUDA graphs captured before ``profile()``.

Builds the observer ``provenance/observer.py`` implements with the tracer and CUPTI source a
``profile()`` of the same options would use (``docs/compiled.md``, "Graphs captured before profile()").
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from . import backends, collection
from .config import ProfileConfig
from .provenance.capture import uses_compile
from .provenance.observer import GraphCaptureObserver


def observe_graph_captures(
    model: nn.Module, *, functions: str = "functional", op_tracer: str | None = None
) -> GraphCaptureObserver:
    """An observer of every CUDA graph captured while it is active, to attribute their replays later.

    Start it before the graphs are captured (``torch.cuda.graph``, ``make_graphed_callables``,
    ``torch.compile(mode="reduce-overhead")`` warming up): each capture is then traced as a capture
    inside ``profile()`` is, and a later ``profile()`` in this process attributes the replays of
    those graphs to module, functional call and op (``attribution == "graph_capture"``, or
    ``"inductor"`` for compiled graphs). Nothing is installed outside captures, so replays run as
    they would unobserved. What it recorded lives as long as the graph does.

    Parameters
    ----------
    model:
        The hierarchy whose modules name the captured nodes: the model later profiled, or a part
        of it (replays are mapped onto the profiled hierarchy by module object). Its modules are
        read when the observer starts, as ``profile()`` reads its model when it begins.
    functions:
        ``"functional"`` or ``"all"``, as the profiler's argument: pass the value the later
        profiler uses, or the rows differ from a capture inside ``profile()``.
    op_tracer:
        As the profiler's argument (None: native where built).

    Returns
    -------
    GraphCaptureObserver
        Not yet started: use it as a context manager (``with observe_graph_captures(model):``) or
        call ``start()`` and later ``stop()``. ``captured`` counts the captures it observed and
        ``unavailable`` says why one could not be (another CUPTI subscriber, say).

    Raises
    ------
    RuntimeError
        Without CUDA, or where the CUPTI source cannot be loaded (the message says what to install).
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"observe_graph_captures() takes the model (an nn.Module); got {type(model).__name__}")
    if not torch.cuda.is_available():
        raise RuntimeError("observe_graph_captures() needs CUDA: CUDA graphs are captured on a GPU")
    config = ProfileConfig(functions=functions, op_tracer=op_tracer)
    compiled = uses_compile(model, model) or "torch._dynamo" in sys.modules
    config = backends.for_run(config, compiled)
    target = collection.make_cuda_source(config.decoder, config.correlation)
    return GraphCaptureObserver(
        model, str(config.op_tracer), config.all_functions, target, str(config.interception)
    )
