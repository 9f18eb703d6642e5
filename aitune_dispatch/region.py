"""``recording()``: profile a region of the user's own code (a training step, a ``generate()`` loop, a
harness's timed region) into the same :class:`ProfileResult` as ``profile()`` gives."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from types import TracebackType

import torch
from torch import nn

from . import arguments, capture, schema
from .config import ProfileConfig
from .results import ProfileResult

_active: list[Recording] = []  # the recording whose with block runs now (one per process: capture's lock)


class Recording:
    """One recorded region: a context manager, single-use; :attr:`result` once the recording has ended.

    Made by :func:`recording`; see there for what is recorded and how :meth:`step` and the schedule work.

    Parameters
    ----------
    module:
        The root of the hierarchy that names the rows; None: every outermost module call is a root.
    config:
        The validated options (``arguments.resolved_config``).
    wait:
        The first recorded step (the schedule's ``wait + warmup``).
    active:
        How many steps are recorded; None: every step until the block ends.
    """

    def __init__(
        self, module: nn.Module | None, config: ProfileConfig, wait: int = 0, active: int | None = None
    ) -> None:
        self._root = module
        self._config = config
        self._first = wait  # the first recorded step
        self._last = None if active is None else wait + active  # the step at which recording stops
        self._entered = False
        self._region: AbstractContextManager[list[ProfileResult]] | None = None
        self._done: list[ProfileResult] = []
        self._step = 0
        self._bounds: list[int] = []

    def __enter__(self) -> Recording:
        if self._entered:
            raise RuntimeError("a Recording records one region; call aitune_dispatch.recording(...) again for another")
        self._entered = True
        if self._first == 0:
            self._start()
        _active.append(self)  # after a start that may be refused: a refused recording is not active
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        if self in _active:
            _active.remove(self)
        if self._region is None:
            return None
        if len(self._bounds) == 1:  # no step() while recording: the block is the one step
            self._bounds.append(time.perf_counter_ns())
        return self._stop(exc_type, exc, tb)  # after the last step(): rows in no step (steps() leaves them out)

    def step(self) -> None:
        """End the current step: recording starts at step ``wait`` (schedule's ``wait + warmup``) and
        stops once ``active`` steps have ended; each recorded step's rows keep their step
        (``result.steps()``). A step() after the recording stopped only counts.

        Returns
        -------
        None
        """
        if not self._entered:
            raise RuntimeError("step() is called inside the recording's with block")
        if self._region is not None:
            self._bounds.append(time.perf_counter_ns())
        self._step += 1
        if self._region is not None and self._step == self._last:
            self._stop(None, None, None)
        elif self._region is None and self._step == self._first and not self._done:
            self._start()

    @property
    def step_number(self) -> int:
        """The number of the current step (0 until the first :meth:`step`)."""
        return self._step

    def _start(self) -> None:
        region = capture.region(self._config, self._root)
        self._done = region.__enter__()
        self._region = region
        self._bounds = [time.perf_counter_ns()]

    def _stop(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        region, self._region = self._region, None
        assert region is not None  # only a started recording stops
        handled = region.__exit__(exc_type, exc, tb)
        if self._done and len(self._bounds) > 2:  # steps: their bounds go with the result
            bounds = ",".join(map(str, self._bounds))
            steps = {schema.META_STEP_BOUNDS: bounds, schema.META_FIRST_STEP: str(self._first)}
            metadata = {**self._done[0].metadata, **steps}
            self._done[0] = dataclasses.replace(self._done[0], metadata=metadata)
        return handled

    @property
    def result(self) -> ProfileResult:
        """The recording's :class:`ProfileResult`: ``profiling_df()`` and ``function_data`` are the spec's
        outputs, ``steps()`` the time per step.

        Raises
        ------
        RuntimeError
            Before the recording has ended, where it ended with an exception (nothing is kept then), or
            where the schedule's first recorded step never came.
        """
        if not self._done:
            if self._entered and self._region is None and self._step < self._first:
                raise RuntimeError(
                    f"nothing was recorded: the schedule records from step {self._first} (wait + warmup), and "
                    f"{self._step} step() call(s) ran; call rec.step() at the end of each step"
                )
            state = "has not ended yet" if self._entered else "has not been entered"
            raise RuntimeError(
                f"the recording's with block {state}, or it ended with an exception: the result exists once "
                "the block has run to its end"
            )
        return self._done[0]


def step() -> None:
    """End the current step of the recording whose ``with`` block runs now (its :meth:`Recording.step`);
    with none, do nothing, so a script may call it at the end of every step whether or not it is recorded
    (``python -m aitune_dispatch run --steps A:B script.py`` records its steps A..B-1).

    Returns
    -------
    None
    """
    if _active:
        _active[-1].step()


def active_recording() -> Recording | None:
    """The recording whose ``with`` block runs now, or None.

    Returns
    -------
    Recording or None
    """
    return _active[-1] if _active else None


def recording(
    module: nn.Module | None = None,
    *,
    function_names: Iterable[str] | None = None,
    device: str | torch.device | None = None,
    decoder: str | None = None,
    functions: str = "functional",
    op_tracer: str | None = None,
    correlation: str | None = None,
    interception: str | None = None,
    wait: int = 0,
    warmup: int = 0,
    active: int | None = None,
) -> Recording:
    """Record every kernel the code inside ``with recording(module=model) as rec:`` runs, attributed as
    ``profile()`` attributes it; ``rec.result`` afterwards. Without a module (``with recording() as rec:``)
    every outermost module call in the block is a root of the hierarchy, named by its class.

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
        None (the default): each module called while no module already known runs is a root, named by
        its class (``MLP``), further roots of that class numbered in order of first call (``MLP_1``,
        ``MLP_2``); its submodules are named below it (``MLP.fc1``). The same module called again is the
        same root; a root that a later root holds becomes that root's submodule (``MLP.fc1``).
    function_names, device, decoder, functions, op_tracer, correlation, interception:
        As for :class:`ModuleFunctionKernelProfiler`.
    wait, warmup, active:
        A step schedule, as torch.profiler's: with ``rec.step()`` called at the end of each step, steps
        ``0 .. wait + warmup - 1`` run unrecorded (nothing is installed; warm-up steps are not traced
        either), the next ``active`` steps are recorded (None: every step until the block ends), and
        later steps run unrecorded again. Each recorded row keeps its step (``result.steps()``: the
        median, min, max and spread over the steps); ``describe()`` and ``profiling_df()`` total every
        recorded step.

    Returns
    -------
    Recording
        A single-use context manager; its ``result`` is the :class:`ProfileResult` once the block ends.

    Raises
    ------
    TypeError, ValueError
        ``module`` is neither an ``nn.Module`` nor None, or an option is not accepted (the message names
        those that are).
    """
    for name, value in (("wait", wait), ("warmup", warmup), ("active", 1 if active is None else active)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "active" else 0):
            least = "1 or more (or None: every step)" if name == "active" else "0 or more"
            raise ValueError(f"{name} must be an int, {least}; got {value!r}")
    if module is not None and not isinstance(module, nn.Module):
        raise TypeError(
            "recording(module=...) takes the nn.Module whose hierarchy names the rows, or None to take every "
            f"outermost module call for a root; got {type(module).__name__}"
        )
    config = arguments.resolved_config(
        function_names=function_names, device=device, decoder=decoder, functions=functions,
        op_tracer=op_tracer, correlation=correlation, interception=interception,
    )  # fmt: skip
    arguments.warn_unknown_names(config.function_names)
    root = None if module is None else getattr(module, "_orig_mod", module)
    return Recording(root, config, wait + warmup, active)
