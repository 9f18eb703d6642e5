"""``recording()``: profile a region of the user's own code (a training step, a ``generate()`` loop, a
harness's timed region) into the same :class:`ProfileResult` as ``profile()`` gives."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from types import TracebackType

import torch
from torch import nn

from . import arguments, capture
from .config import ProfileConfig
from .results import ProfileResult


class Recording:
    """One recorded region: a context manager, single-use; :attr:`result` once the block has ended.

    Made by :func:`recording`; see there for what is recorded.
    """

    def __init__(self, module: nn.Module, config: ProfileConfig) -> None:
        self._root = module
        self._config = config
        self._region: AbstractContextManager[list[ProfileResult]] | None = None
        self._done: list[ProfileResult] = []

    def __enter__(self) -> Recording:
        if self._region is not None:
            raise RuntimeError("a Recording records one region; call aitune_dispatch.recording(...) again for another")
        region = capture.region(self._config, self._root)
        self._done = region.__enter__()
        self._region = region
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._region is not None  # entered: __exit__ runs only after __enter__ returned
        return self._region.__exit__(exc_type, exc, tb)

    @property
    def result(self) -> ProfileResult:
        """The region's :class:`ProfileResult`: ``profiling_df()`` and ``function_data`` are the spec's outputs.

        Raises
        ------
        RuntimeError
            Before the ``with`` block has ended, or where it ended with an exception (nothing is kept then).
        """
        if not self._done:
            state = "has not ended yet" if self._region is not None else "has not been entered"
            raise RuntimeError(
                f"the recording's with block {state}, or it ended with an exception: the result exists once "
                "the block has run to its end"
            )
        return self._done[0]


def recording(
    module: nn.Module,
    *,
    function_names: Iterable[str] | None = None,
    device: str | torch.device | None = None,
    decoder: str | None = None,
    functions: str = "functional",
    op_tracer: str | None = None,
    correlation: str | None = None,
    interception: str | None = None,
) -> Recording:
    """Record every kernel the code inside ``with recording(module=model) as rec:`` runs, attributed as
    ``profile()`` attributes it; ``rec.result`` afterwards.

    The block runs as written: no warm-up, no ``torch.no_grad()`` (``profile()`` adds both), so a
    training step with its backward and optimizer, or a ``generate()`` loop, is recorded as it runs.
    Kernels inside ``module``'s hierarchy get their module, functional call and aten op; the rest are
    kept in ``result.activity`` with no module (``result.unattributed()`` lists them). One recording or
    ``profile()`` at a time per process: a nested one, or one while torch.profiler collects, is refused
    with a RuntimeError, as ``profile()`` is.

    Parameters
    ----------
    module:
        The ``nn.Module`` whose hierarchy names the rows (its submodules' paths, as ``profile()``'s).
    function_names, device, decoder, functions, op_tracer, correlation, interception:
        As for :class:`ModuleFunctionKernelProfiler`.

    Returns
    -------
    Recording
        A single-use context manager; its ``result`` is the :class:`ProfileResult` once the block ends.

    Raises
    ------
    TypeError, ValueError
        ``module`` is not an ``nn.Module``, or an option is not accepted (the message names those that are).
    """
    if not isinstance(module, nn.Module):
        raise TypeError(
            f"recording(module=...) takes the nn.Module whose hierarchy names the rows; got {type(module).__name__}"
        )
    config = arguments.resolved_config(
        function_names=function_names, device=device, decoder=decoder, functions=functions,
        op_tracer=op_tracer, correlation=correlation, interception=interception,
    )  # fmt: skip
    arguments.warn_unknown_names(config.function_names)
    return Recording(getattr(module, "_orig_mod", module), config)
