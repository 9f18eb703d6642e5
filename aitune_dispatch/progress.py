"""The command line's progress on stderr: a line per stage, and a bar for counted steps on a terminal.

A stage (warm-up, recording, post-processing) gets one line. Counted steps (warm-up passes, recorded
samples, replayed samples) draw a ``rich`` bar with a count and an ETA where stderr is a terminal, and
nothing where it is not (a log or a pipe has no use for a redrawn bar). ``quiet`` prints nothing.
``rich`` is imported only when a bar is drawn.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any

PROG = "aitune-dispatch"


class Progress:
    """Progress on ``stream`` (stderr): :meth:`stage` lines, and :meth:`step` counts as a bar on a terminal.

    Parameters
    ----------
    quiet:
        Print nothing.
    stream:
        Where to print; None: ``sys.stderr`` at the time of each print.
    tty:
        Whether ``stream`` is a terminal (draw bars); None: ask the stream.
    """

    def __init__(self, quiet: bool, stream: IO[str] | None = None, tty: bool | None = None) -> None:
        self.quiet = quiet
        self._stream = stream
        self._tty = tty
        self._bar: Any = None  # rich.progress.Progress, while one is drawn
        self._task: Any = None
        self._stage_started = time.perf_counter()

    @property
    def stream(self) -> IO[str]:
        """The stream progress goes to."""
        return self._stream if self._stream is not None else sys.stderr

    @property
    def draws_bars(self) -> bool:
        """Whether counted steps show as a bar: not quiet, and the stream is a terminal."""
        if self.quiet:
            return False
        if self._tty is not None:
            return self._tty
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def line(self, text: str) -> None:
        """Print one progress line unless quiet (above the bar, where one is drawn)."""
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.console.print(f"{PROG}: {text}", markup=False, highlight=False, soft_wrap=True)
        else:
            print(f"{PROG}: {text}", file=self.stream, flush=True)

    def stage(self, text: str) -> None:
        """Start a stage: end the last stage's bar, print the stage's line, restart the stage clock."""
        self._end_task()
        self.line(text)
        self._stage_started = time.perf_counter()

    def elapsed(self) -> float:
        """Seconds since the current stage started."""
        return time.perf_counter() - self._stage_started

    def step(self, label: str, done: int, total: int) -> None:
        """``done`` of ``total`` steps of the current stage, shown as a bar where bars are drawn."""
        if not self.draws_bars or total <= 0:
            return
        if self._bar is None:
            self._bar = self._new_bar()
            self._bar.start()
        if self._task is None:
            self._task = self._bar.add_task(label, total=total)
        self._bar.update(self._task, completed=min(done, total), total=total, description=label)
        if done >= total:  # the bar redraws on a timer: draw the last count before the stage ends
            self._bar.refresh()

    def close(self) -> None:
        """Stop drawing the bar (it is cleared), so that what follows prints on a clean line."""
        self._end_task()
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _end_task(self) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.remove_task(self._task)
        self._task = None

    def _new_bar(self) -> Any:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as Bar

        console = Console(file=self.stream, force_terminal=True, highlight=False)
        columns = (
            TextColumn(f"{PROG}: {{task.description}}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        return Bar(*columns, console=console, transient=True, redirect_stdout=False, redirect_stderr=False)
