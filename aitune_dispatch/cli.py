"""aitune-dispatch: which CUDA kernels each torch.nn.functional call launches, and for how long.

  aitune-dispatch demo [--device auto|cuda|cpu] [--warmup N] [--top N]
      [--functions functional|all] [--out DIR [--with-tensors]]
      [--write FILE ...] [--full-names] [--quiet]
  aitune-dispatch profile MODULE:FACTORY [--function-names linear,relu]
      [same options as demo]
  aitune-dispatch run [--steps A:B] [--device auto|cuda|cpu] [--top N]
      [--functions functional|all] [--out DIR [--with-tensors]]
      [--write FILE ...] [--full-names] [--quiet] SCRIPT.py [script args ...]
  aitune-dispatch report RESULT [--top N] [--html FILE.html]
      [--perfetto FILE.json[.gz]] [--out DIR] [--write FILE ...] [--full-names]
  aitune-dispatch compare A B [--top N] [--csv FILE.csv] [--html FILE.html]
      [--full-names]
  aitune-dispatch ranks RESULT [--top N] [--compare R1 R2]
  aitune-dispatch bench RESULT [--function-names linear,conv2d] [--repeats N]
      [--warmup-calls N] [--cache warm|cold] [--csv FILE.csv]

profile imports MODULE (a dotted module name found from the current directory or PYTHONPATH,
or a path/to/file.py) and calls FACTORY (an attribute, dotted for nested ones) with
device="cuda"|"cpu" when it has a device parameter, else with no arguments. FACTORY returns
(model, samples) with an nn.Module, or (function, samples, module) to profile a plain function
(a pipeline) while observing module; samples is a list of (args, kwargs) pairs, or None to call
the function once without arguments.

--out DIR writes DIR/result/ (the saved result, see ProfileResult.save), DIR/report.html and
DIR/trace.json (Perfetto, Kineto's conventions); --write FILE writes FILE in the format its name
ends in (.html, .htm, .json, .json.gz), and --html / --perfetto name the file of that format
instead of DIR's. Output names are checked before any work is done. Progress goes to stderr: a
line per stage (warm-up, recording, post-processing) and, where stderr is a terminal, a bar with a
count and an ETA for the warm-up passes, the recorded samples and bench's replayed samples.
--quiet silences progress. Warnings are one line each on stderr. Bad input exits with status 1 and one
line on stderr (set AITUNE_DISPATCH_TRACEBACK=1 for the traceback); usage errors exit with
status 2. report and compare need no torch. Tables fit the terminal width (COLUMNS overrides
it). Kernels go by their short name (vectorized_elementwise_kernel), never cut below 40
characters: where a table does not fit, its lower-priority columns are left out, as its title
says; --full-names shows each kernel's full demangled name.

run runs SCRIPT.py as __main__ (its arguments after it, ours before it) inside
aitune_dispatch.recording() without a module: every outermost module call is a root, named by
its class. --steps A:B records steps A..B-1 of a script that calls aitune_dispatch.step() at the
end of each step; without it the whole script is one step. It prints and writes what profile does.

bench replays every distinct sample of a saved result in isolation (aitune_dispatch.benchmark;
with the saved tensors where the result kept them, else random inputs of the recorded shapes) on
the device it was recorded on, and prints the per-sample table (the median time per call and the
IQR of the timed calls; a warning where they spread widely) and the weighted total per function.
RESULT may also be a directory into which each rank of a torch.distributed job saved its result:
it loads as their merge; ranks prints the per-rank view of such a merge (and --compare R1 R2 the
time difference between two ranks).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import shutil
import sys
import textwrap
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import config, reports
from .progress import Progress
from .reports import HtmlRenderer, PerfettoRenderer, renderer_for, text
from .reports.base import human_time
from .reports.ranks import rank_text
from .results import ProfileResult, atomic, compare, compare_ranks, load, views
from .schema import PACKAGE_VERSION

if TYPE_CHECKING:
    import pandas as pd

    from .capture import Step

PROG = "aitune-dispatch"
HELP_WIDTH = 80  # --help is read at any terminal width: longer lines are harder to read, not more useful
CSV_DIGITS = {"before_us": 3, "after_us": 3, "delta_us": 3, "ratio": 6}  # ns resolution; ratios to 6 places


class CliError(Exception):
    """Bad input, reported as one line on stderr with a non-zero exit status."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


@dataclass(frozen=True)
class Workload:
    """What to profile: ``function`` called on each sample while ``module`` is observed.

    ``samples`` is what the factory returned, listed; the profiler validates each item.
    """

    function: Callable[..., Any]
    samples: list[Any] | None
    module: Any

    @property
    def passes(self) -> int:
        """Calls per pass over the samples."""
        return 1 if self.samples is None else len(self.samples)


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _parse_target(spec: str) -> tuple[str, str]:
    module_ref, _, attribute = spec.rpartition(":")
    if not module_ref or not attribute or not all(part.isidentifier() for part in attribute.split(".")):
        raise CliError(f"expected MODULE:FACTORY such as my_models:build or path/to/models.py:build; got {spec!r}")
    return module_ref, attribute


def _import_file(path: Path) -> Any:
    if not path.is_file():
        raise CliError(f"no such file: {path}; pass an existing path/to/file.py:FACTORY")
    name = f"_aitune_dispatch_user_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"cannot import {path} as a Python module; pass a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.resolve().parent))  # so the file can import its neighbours
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _import_name(name: str) -> Any:
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # the console script does not search the current directory
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and (name == error.name or name.startswith(f"{error.name}.")):
            raise CliError(
                f"cannot find module {name!r}; run from its directory, add it to PYTHONPATH, "
                "or pass path/to/file.py:FACTORY"
            ) from error
        raise


def _import_module(module_ref: str) -> Any:
    is_file = module_ref.endswith(".py") or "/" in module_ref or os.sep in module_ref
    try:
        return _import_file(Path(module_ref)) if is_file else _import_name(module_ref)
    except CliError:
        raise
    except Exception as error:  # the user's module failed while importing
        raise CliError(f"importing {module_ref} raised {_one_line(error)}") from error


def _resolve_factory(spec: str) -> Callable[..., Any]:
    module_ref, attribute = _parse_target(spec)
    target: Any = _import_module(module_ref)
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise CliError(f"{module_ref} has no attribute {attribute!r}; check the FACTORY name in {spec!r}")
        target = getattr(target, part)
    if not callable(target):
        raise CliError(f"{spec} is a {type(target).__name__}, not a callable factory")
    return target


def _call_factory(factory: Callable[..., Any], device: str, spec: str) -> Any:
    try:
        takes_device = "device" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # builtins without a signature
        takes_device = False
    try:
        return factory(device=device) if takes_device else factory()
    except Exception as error:  # the user's factory failed
        raise CliError(f"factory {spec} raised {_one_line(error)}") from error


def _samples(samples: Any, spec: str) -> list[Any] | None:
    """The factory's samples as a list (each item is checked by the profiler, which words the error)."""
    if samples is None:
        return None
    if not isinstance(samples, Iterable) or isinstance(samples, (str, bytes)):
        raise CliError(f"factory {spec} returned bad samples: expected (args, kwargs) pairs or None; got {samples!r}")
    return list(samples)


def _workload(value: Any, spec: str) -> Workload:
    from torch import nn

    shape = "(model, samples) or (function, samples, module)"
    if not isinstance(value, (tuple, list)) or len(value) not in (2, 3):
        got = f"a {len(value)}-tuple" if isinstance(value, (tuple, list)) else f"a {type(value).__name__}"
        raise CliError(f"factory {spec} must return {shape}; got {got}")
    function, samples, module = (value[0], value[1], value[0]) if len(value) == 2 else value
    if not isinstance(module, nn.Module):
        raise CliError(
            f"factory {spec} must return {shape} with an nn.Module; got a {type(module).__name__} "
            "where the module belongs"
        )
    if not callable(function):
        raise CliError(f"factory {spec} returned a {type(function).__name__} as the function; return a callable")
    return Workload(function, _samples(samples, spec), module)


def _pick_device(requested: str) -> str:
    import torch

    available = torch.cuda.is_available()
    if requested == "auto":
        return "cuda" if available else "cpu"
    if requested == "cuda" and not available:
        raise CliError("--device cuda was requested but CUDA is unavailable; use --device cpu or auto")
    return requested


class _Following:
    """Progress lines from the profiler's steps (``capture.Step``), and the phase a failure came in."""

    def __init__(self, progress: Progress, workload: Workload, device: str) -> None:
        self.progress, self.workload, self.device = progress, workload, device
        self.phase: str | None = None

    def __call__(self, step: Step) -> None:
        self.phase = step.phase
        progress, calls = self.progress, self.workload.passes
        if step.phase == "warmup" and step.total:
            if step.done == 0:
                progress.stage(f"warmup: {step.total} passes of {calls} calls")
            progress.step("warm-up passes", step.done, step.total)
        elif step.phase == "pass":
            if step.done == 0:
                progress.stage(f"recording one pass of {calls} calls on {self.device}")
            progress.step("recorded samples", step.done, step.total)
        elif step.phase == "flush":
            progress.stage("post-processing: joining kernels to ops, functional calls and modules")

    def failure(self, error: Exception, spec: str) -> CliError:
        """The one-line error for ``error``, raised while following (its phase says whose it is)."""
        from .arguments import SampleError

        if isinstance(error, SampleError):
            return CliError(f"factory {spec} returned bad samples: {error}")
        if self.phase == "warmup":
            return CliError(f"the workload raised {_one_line(error)} during warmup")
        return CliError(f"profiling failed: {_one_line(error)}")


def _record(workload: Workload, device: str, args: argparse.Namespace, label: str) -> ProfileResult:
    from .profiler import ModuleFunctionKernelProfiler

    names = getattr(args, "function_names", None)
    profiler = ModuleFunctionKernelProfiler(names, device=device, functions=args.functions)
    progress = Progress(args.quiet)
    following = _Following(progress, workload, device)
    try:
        with progress:
            result = profiler.profile_result(
                workload.function,
                workload.samples,
                module=workload.module,
                warmup_iterations=args.warmup,
                on_progress=following,
            )
    except Exception as error:  # the user's model (or the capture) failed
        raise following.failure(error, label) from error
    progress.line(f"post-processing done: {result.activity.num_rows} activity rows ({progress.elapsed():.1f} s)")
    return result


MAX_WIDTH = 200  # tables stop growing here: wider lines are harder to follow, not more readable


def _width() -> int:
    """The terminal's width (``COLUMNS`` overrides it) within 40..``MAX_WIDTH`` columns."""
    return min(max(shutil.get_terminal_size((text.DEFAULT_WIDTH, 24)).columns, 40), MAX_WIDTH)


def _fitted(line: str) -> str:
    """``line`` wrapped to the terminal width, continuation lines indented (a long title or path)."""
    return text.wrap_title(line, _width())


def _print_summary(result: ProfileResult, top_k: int | None, title: str, full_names: bool = False) -> None:
    print(text.TextRenderer(top_k=top_k, width=_width(), title=title, full_names=full_names).render(result))
    for warning in result.warnings:
        print(f"{PROG}: warning: {_flat(warning)}", file=sys.stderr)


def _load(path: str) -> ProfileResult:
    try:
        return load(path)  # a saved result, or a directory of per-rank results (merged)
    except (OSError, ValueError) as error:
        raise CliError(str(error)) from error


def _save(result: ProfileResult, path: Path, with_tensors: bool) -> None:
    try:
        result.save(path, with_tensors=with_tensors)
    except (OSError, ValueError) as error:
        raise CliError(f"saving the result failed: {error}") from error
    print(f"saved the result to {path}")


def _write_failed(path: Path, error: Exception) -> CliError:
    """One line naming ``path``, as the disk's error from ``results.atomic.write_bytes`` already does."""
    if isinstance(error, OSError) and error.strerror and str(path) in error.strerror:
        return CliError(error.strerror)
    return CliError(f"writing {path} failed: {_one_line(error)}")


def _write(result: ProfileResult, path: Path) -> None:
    """Render ``result`` into ``path`` with the renderer its name asks for (``reports.renderer_for``)."""
    try:
        written = renderer_for(path).write(result, path)
    except Exception as error:  # one line, whatever the renderer raised
        raise _write_failed(path, error) from error
    print(f"wrote {written}")


def _write_csv(table: pd.DataFrame, path: Path) -> None:
    """``table`` as CSV at ``path``, put in place only when complete: a failure keeps the previous file."""
    try:
        atomic.write_bytes(path, table.to_csv(index=False).encode("utf-8"))
    except OSError as error:
        raise _write_failed(path, error) from error
    print(f"wrote {path}")


def _requested(args: argparse.Namespace) -> list[Path]:
    """Every file asked for, in order: ``--html``, ``--perfetto`` and ``--write`` name files; ``--out DIR``
    gives each format with a ``default_name`` a place (``reports.RENDERERS`` order), filled by the named
    files of that format or else by ``DIR/<default_name>``; the other named files follow."""
    named = [path for path in (getattr(args, "html", None), getattr(args, "perfetto", None)) if path is not None]
    named += args.write or []
    if args.out is None:
        return named
    requested: list[Path] = []
    for renderer in reports.RENDERERS:
        if renderer.default_name:
            of_format = [path for path in named if path.name.lower().endswith(renderer.accepted())]
            requested += of_format or [args.out / renderer.default_name]
    return requested + [path for path in named if path not in requested]


def _write_requested(result: ProfileResult, args: argparse.Namespace) -> None:
    for path in _requested(args):
        _write(result, path)


def _profile_and_print(workload: Workload, device: str, args: argparse.Namespace, label: str) -> int:
    result = _record(workload, device, args, label)
    _print_summary(
        result,
        args.top,
        f"{label} on {device} ({result.source} activity source; shares of all kernel time)",
        _full_names(args),
    )
    if args.out is not None:
        _save(result, args.out / "result", args.with_tensors)
    _write_requested(result, args)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Profile the built-in demo model and print the summary table."""
    from .demo import demo_workload

    device = _pick_device(args.device)
    model, samples = demo_workload(device)
    workload = Workload(model, samples, model)
    return _profile_and_print(workload, device, args, "aitune_dispatch demo")


def cmd_profile(args: argparse.Namespace) -> int:
    """Profile the (model, samples) a user factory returns and print the summary table."""
    factory = _resolve_factory(args.target)
    device = _pick_device(args.device)
    workload = _workload(_call_factory(factory, device, args.target), args.target)
    return _profile_and_print(workload, device, args, args.target)


def cmd_run(args: argparse.Namespace) -> int:
    """Run a script inside a recording without a module, print the summary table and write the outputs."""
    from .script import ScriptError, run_script

    device = _pick_device(args.device)
    progress = Progress(args.quiet)
    names = getattr(args, "function_names", None)
    try:
        with progress:
            progress.line(f"running {args.script} (recorded on {device})")
            result = run_script(
                args.script, args.script_args, steps=args.steps, device=device, functions=args.functions,
                function_names=names,
            )  # fmt: skip
    except (ScriptError, FileNotFoundError) as error:
        raise CliError(str(error)) from error
    except RuntimeError as error:  # refused, or the steps asked for never came
        raise CliError(f"recording {args.script} failed: {_one_line(error)}") from error
    progress.line(f"post-processing done: {result.activity.num_rows} activity rows ({progress.elapsed():.1f} s)")
    title = f"{args.script} on {device} ({result.source} activity source; shares of all kernel time)"
    _print_summary(result, args.top, title, _full_names(args))
    if args.out is not None:
        _save(result, args.out / "result", args.with_tensors)
    _write_requested(result, args)
    return 0


def _steps(text: str) -> tuple[int, int]:
    from .script import parse_steps

    try:
        return parse_steps(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _add_run(commands: Any, common: argparse.ArgumentParser) -> None:
    run = _subcommand(
        commands,
        "run",
        common,
        "run a script and record what it runs",
        "SCRIPT.py runs as __main__ inside aitune_dispatch.recording() without a module, every outermost "
        "module call a root. Our options come before SCRIPT.py, the script's own after it.",
    )
    run.add_argument(
        "--steps", type=_steps, metavar="A:B",
        help="record steps A..B-1 of a script calling aitune_dispatch.step() (default: the whole script)",
    )  # fmt: skip
    run.add_argument(
        "--function-names", type=_names, metavar="NAMES", help="collect samples of these functions only (linear,relu)"
    )
    _add_recording_options(run)
    _add_full_names(run)
    run.add_argument("script", metavar="SCRIPT.py", help="the script to run as __main__")
    run.add_argument("script_args", nargs=argparse.REMAINDER, metavar="...", help="the script's own arguments")
    run.set_defaults(run=cmd_run)


def cmd_report(args: argparse.Namespace) -> int:
    """Load a saved result, print its summary and write the requested reports."""
    result = _load(args.result)
    tail = f" ({result.source} activity source; shares of all kernel time)"
    name = text.cut_middle(str(args.result), max(_width() - len(tail), 20))
    _print_summary(result, args.top, name + tail, _full_names(args))
    ranks = rank_text(result, args.top, _width())  # merged results only
    if ranks:
        print(f"\n{ranks}")
    _write_requested(result, args)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Print the per-function and per-kernel time difference between two saved results."""
    before, after = _load(args.before), _load(args.after)
    mismatch = text.mismatch_warning(before, after)
    if mismatch:
        print(f"{PROG}: warning: {mismatch}", file=sys.stderr)
    table = compare(before, after)
    delta = after.total_us - before.total_us
    change = f" ({100 * delta / before.total_us:+.1f}%)" if before.total_us > 0 else ""
    for label, path, result in (("before", args.before, before), ("after ", args.after, after)):
        tail = f": {human_time(result.total_us)} kernel time ({result.source})"
        room = _width() - len(label) - 1 - len(tail)
        print(_fitted(f"{label} {text.cut_middle(str(path), max(room, 20))}{tail}"))
    print(f"delta {'+' if delta >= 0 else '-'}{human_time(abs(delta))}{change}")
    for level in ("function", "kernel"):
        print()
        print(text.comparison_text(table, level, args.top, _width(), _full_names(args)))
    if args.csv is not None:
        _write_csv(table.round(CSV_DIGITS), args.csv)
    if args.html is not None:
        _write_comparison(before, after, table, args)
    return 0


def _write_comparison(
    before: ProfileResult, after: ProfileResult, table: pd.DataFrame, args: argparse.Namespace
) -> None:
    """The HTML comparison page at ``args.html``, written as every report is (beside it, then put in place)."""
    renderer = reports.ComparisonRenderer(labels=(str(args.before), str(args.after)))
    try:
        written = renderer.write(before, after, args.html, table)
    except Exception as error:  # one line, whatever the renderer raised
        raise _write_failed(args.html, error) from error
    print(f"wrote {written}")


def cmd_ranks(args: argparse.Namespace) -> int:
    """Print the per-rank view of a merged result, and optionally the difference between two ranks."""
    result = _load(args.result)
    text_of_ranks = rank_text(result, args.top, _width())
    if not text_of_ranks:
        raise CliError(
            f"{args.result} holds one rank's result; pass a directory into which every rank saved its "
            "result (result.save(f'DIR/rank{rank}')) or a result saved from aitune_dispatch.merge()"
        )
    print(text_of_ranks)
    if args.compare is not None:
        before, after = args.compare
        try:
            table = compare_ranks(result, before, after)
        except ValueError as error:
            raise CliError(str(error)) from error
        print(f"\nrank {before} vs rank {after}:")
        for level in ("function", "kernel"):
            print()
            print(text.comparison_text(table, level, args.top, _width()))
    return 0


def _add_ranks(commands: Any, common: argparse.ArgumentParser) -> None:
    ranks = _subcommand(
        commands,
        "ranks",
        common,
        "the per-rank view of a torch.distributed job",
        "Per rank, and per functional call across ranks, of a merged result (a directory of per-rank results "
        "or a saved merge). Needs no torch.",
    )
    ranks.add_argument("result", metavar="RESULT", help="a directory of per-rank results, or a saved merge")
    _add_top(ranks, 10, "rows per table")
    ranks.add_argument(
        "--compare", type=_non_negative, nargs=2, metavar=("R1", "R2"), help="also compare rank R1 (before) with R2"
    )
    ranks.set_defaults(run=cmd_ranks)


def _load_for_bench(path: str) -> ProfileResult:
    """The saved result with its tensors (on their recorded devices) where it kept them."""
    from .benchmarking import replay_device
    from .results.persist import TensorsNotSavedError

    result = _load(path)
    try:
        replay_device(result)
        return load(path, with_tensors=True, map_location=None)
    except TensorsNotSavedError:  # saved without tensors: benchmark() makes inputs from the metadata
        return result
    except (RuntimeError, OSError, ValueError) as error:  # ValueError: damaged tensors (ResultFormatError)
        raise CliError(str(error)) from error


def _print_bench(table: pd.DataFrame) -> None:
    from .benchmarking import weighted_totals

    print(text.bench_text(table, _width()))
    print()
    heading = "weighted per function (sum of calls x time per call; a failed candidate counts at the original's time):"
    print(_fitted(heading))
    print(text.weighted_text(weighted_totals(table), _width()))
    for row in table[table["error"].notna()].itertuples():
        where = f"{row.function_name} sample {row.sample} {row.implementation}"
        print(f"{PROG}: {where}: {_flat(row.error)}", file=sys.stderr)


def cmd_bench(args: argparse.Namespace) -> int:
    """Replay the distinct samples of a saved result in isolation and print their kernel time."""
    from .benchmarking import benchmark

    result = _load_for_bench(args.result)
    progress = Progress(args.quiet)
    progress.stage(f"replaying the samples of {args.result} ({args.repeats} timed calls each)")
    try:
        with progress:
            table = benchmark(
                result,
                sorted(args.function_names) if args.function_names else None,
                repeats=args.repeats,
                warmup=args.warmup_calls,
                cache=args.cache,
                progress=lambda done, total, label: progress.step(f"replayed {label}", done, total),
            )
    except (TypeError, ValueError, RuntimeError) as error:
        raise CliError(str(error)) from error
    _print_bench(table)
    if args.csv is not None:
        _write_csv(text.bench_csv_frame(table), args.csv)
    return 0


def _add_bench(commands: Any, common: argparse.ArgumentParser) -> None:
    bench = _subcommand(
        commands,
        "bench",
        common,
        "replay the samples of a saved result, timed",
        "Every distinct sample of the selected functions is called in isolation on the device it was "
        "recorded on (with the saved tensors where the result kept them, else random inputs of the "
        "recorded shapes); prints the per-sample table and the weighted total per function.",
    )
    bench.add_argument("result", metavar="RESULT", help="a saved result (directory or .parquet file)")
    bench.add_argument(
        "--function-names",
        type=_names,
        metavar="NAMES",
        help="replay these functions only, e.g. linear,conv2d (default: every function with samples)",
    )
    _deprecated_alias(bench, "--functions", "--function-names", type=_names)
    bench.add_argument(
        "--repeats", type=_positive, default=50, metavar="N", help="timed calls per sample (default: 50)"
    )
    bench.add_argument(
        "--warmup-calls",
        type=_non_negative,
        default=5,
        metavar="N",
        help="untimed calls per sample first (default: 5)",
    )
    _deprecated_alias(bench, "--warmup", "--warmup-calls", type=_non_negative)
    bench.add_argument(
        "--cache",
        choices=config.CACHE_STATES,
        default="warm",
        help="warm: timed calls back to back; cold: the last-level cache (L2 on CUDA) overwritten before each "
        "(default: warm)",
    )
    bench.add_argument("--csv", type=_CSV, metavar="FILE.csv", help="write the full table to this file")
    bench.set_defaults(run=cmd_bench)


class _DeprecatedAlias(argparse.Action):
    """An old spelling of an option: stores into the new one's ``dest`` and notes the new name on stderr."""

    def __init__(self, option_strings: Sequence[str], dest: str, replacement: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.replacement = replacement

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        print(f"{PROG}: warning: {option} is deprecated; use {self.replacement}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _deprecated_alias(parser: argparse.ArgumentParser, old: str, new: str, type: Callable[[str], Any]) -> None:
    """``old`` as a hidden, still working spelling of ``new`` (same ``dest``) that warns when used."""
    dest = new.lstrip("-").replace("-", "_")
    parser.add_argument(
        old,
        dest=dest,
        type=type,
        action=_DeprecatedAlias,
        replacement=new,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )


def _add_top(parser: argparse.ArgumentParser, default: int, what: str) -> None:
    """``--top N`` (``what`` it limits), with the old ``--top-k`` as a hidden alias (same ``dest``)."""
    parser.add_argument(
        "--top", type=_top, default=default, metavar="N", help=f"{what}, or all (default: {default})"
    )
    parser.add_argument("--top-k", dest="top", type=_top, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def _top(text: str) -> int | None:
    """``--top``: a positive integer, or ``all`` (None: every row), by the API's one rule (``views.check_top``)."""
    if text.strip().lower() == "all":
        return None
    try:
        return views.check_top(int(text), "--top")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or all, got {text!r}") from None


def _non_negative(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value!r}")
    return number


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _names(value: str) -> frozenset[str]:
    names = frozenset(name.strip() for name in value.split(",") if name.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected comma-separated function names such as linear,relu")
    return names


def _output(endings: tuple[str, ...], what: str) -> Callable[[str], Path]:
    """An argparse type: a file path whose name ends in one of ``endings`` (checked before any work)."""

    def check(value: str) -> Path:
        path = Path(value)
        if path.is_dir():
            raise argparse.ArgumentTypeError(
                f"{value} is a folder; pass a file name such as {path / ('out' + endings[0])}"
            )
        if not path.name.lower().endswith(endings):
            raise argparse.ArgumentTypeError(f"{what} must end in {' or '.join(endings)}; got {value!r}")
        return path

    return check


def _out_dir(value: str) -> Path:
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value} is a file; --out takes a folder (created if missing)")
    return path


def _any_output(value: str) -> Path:
    """An argparse type: a file path whose name some registered renderer writes (``reports.renderer_for``)."""
    path = Path(value)
    if path.is_dir():
        example = path / f"report{reports.RENDERERS[0].extension}"
        raise argparse.ArgumentTypeError(f"{value} is a folder; pass a file name such as {example}")
    try:
        renderer_for(path)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
    return path


def _add_outputs(parser: argparse.ArgumentParser, saves: bool) -> None:
    """``--out DIR`` and ``--write FILE``, their help naming the registered formats."""
    named = [f"DIR/{renderer.default_name}" for renderer in reports.RENDERERS if renderer.default_name]
    folder = ["DIR/result/", *named] if saves else named
    listed = ", ".join(folder[:-1]) + f" and {folder[-1]}" if len(folder) > 1 else "".join(folder)
    parser.add_argument("--out", type=_out_dir, metavar="DIR", help=f"write {listed}")
    endings = ", ".join(ending for renderer in reports.RENDERERS for ending in renderer.accepted())
    parser.add_argument(
        "--write",
        type=_any_output,
        action="append",
        metavar="FILE",
        help=f"write this file in the format its name ends in ({endings}); repeatable",
    )


_HTML = _output(HtmlRenderer.accepted(), "the HTML report")
_TRACE = _output(PerfettoRenderer.accepted(), "the trace")
_CSV = _output((".csv",), "the CSV file")


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """demo's and profile's options: warm-up passes, then what every recording command takes."""
    parser.add_argument("--warmup", type=_non_negative, default=3, metavar="N", help="warm-up passes (default: 3)")
    _add_recording_options(parser)


def _add_recording_options(parser: argparse.ArgumentParser) -> None:
    """The options of every command that records (demo, profile, run): device, rows, what to attribute, outputs."""
    parser.add_argument(
        "--device",
        choices=["auto", *config.DEVICES],
        default="auto",
        help="where to run (default: auto, i.e. cuda when available, else cpu)",
    )
    _add_top(parser, 10, "rows per table")
    parser.add_argument(
        "--functions",
        choices=list(config.FUNCTIONS),
        default="functional",
        help="all: also attribute ops outside functional calls to torch-level calls (torch.addmm) "
        "(default: functional)",
    )
    _add_outputs(parser, saves=True)
    parser.add_argument("--with-tensors", action="store_true", help="save the sample tensors with the result")


def _add_full_names(parser: argparse.ArgumentParser) -> None:
    """``--full-names``: the kernel tables show each kernel's full demangled name instead of its short name."""
    parser.add_argument(
        "--full-names",
        action="store_true",
        help="show each kernel's full demangled name (folded onto more lines) instead of its short name",
    )


def _full_names(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "full_names", False))  # a subcommand without the option prints short names


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's help at most ``HELP_WIDTH`` columns (less on a narrower terminal), never cutting a word.

    Paragraphs of a description are filled to the width, except indented ones (the synopsis), kept as
    written; words are wrapped whole, hyphenated options included (``--function-names``).
    """

    def __init__(self, prog: str) -> None:
        columns = shutil.get_terminal_size((HELP_WIDTH, 24)).columns
        super().__init__(prog, width=max(min(HELP_WIDTH, columns - 1), 40))

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_long_words=False, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in text.strip("\n").split("\n\n"):
            if paragraph.startswith(" "):
                paragraphs.append("\n".join(indent + line for line in paragraph.splitlines()))
            else:
                words = " ".join(paragraph.split())
                wrap = textwrap.wrap(words, width, break_long_words=False, break_on_hyphens=False)
                paragraphs.append("\n".join(indent + line for line in wrap))
        return "\n\n".join(paragraphs)


def _subcommand(commands: Any, name: str, common: argparse.ArgumentParser, summary: str, details: str) -> Any:
    return commands.add_parser(
        name,
        parents=[common],
        help=summary,
        description=f"{summary[0].upper()}{summary[1:]}. {details}",
        formatter_class=_HelpFormatter,
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one subparser per subcommand."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=_HelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {PACKAGE_VERSION}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = _subcommand(
        commands,
        "demo",
        common,
        "profile the built-in demo model",
        "A conv stem and two attention blocks; prints the summary table (and writes --out DIR).",
    )
    _add_run_options(demo)
    _add_full_names(demo)
    demo.set_defaults(run=cmd_demo)
    profile = _subcommand(
        commands,
        "profile",
        common,
        "profile the model a factory returns",
        "MODULE:FACTORY returns (model, samples) or (function, samples, module); see aitune-dispatch --help.",
    )
    profile.add_argument("target", metavar="MODULE:FACTORY", help="e.g. my_models:build or models.py:build")
    profile.add_argument(
        "--function-names", type=_names, metavar="NAMES", help="collect samples of these functions only (linear,relu)"
    )
    _add_run_options(profile)
    _add_full_names(profile)
    profile.set_defaults(run=cmd_profile)
    report = _subcommand(
        commands,
        "report",
        common,
        "summarise a saved result and write reports",
        "Prints the summary of RESULT; writes the HTML report and the trace where asked. Needs no torch.",
    )
    report.add_argument("result", metavar="RESULT", help="a saved result (directory or .parquet file)")
    _add_top(report, 10, "rows per table")
    report.add_argument("--html", type=_HTML, metavar="FILE.html", help="write the HTML report to this file")
    report.add_argument(
        "--perfetto", type=_TRACE, metavar="FILE.json", help="write the trace to this file (.json.gz: gzip)"
    )
    _add_outputs(report, saves=False)
    _add_full_names(report)
    report.set_defaults(run=cmd_report)
    comparison = _subcommand(
        commands,
        "compare",
        common,
        "time difference between two results",
        "Kernel time per function and per kernel before (A) and after (B), largest change first. Needs no torch.",
    )
    comparison.add_argument("before", metavar="A", help="the saved result before the change")
    comparison.add_argument("after", metavar="B", help="the saved result after the change")
    _add_top(comparison, 20, "rows per level")
    comparison.add_argument("--csv", type=_CSV, metavar="FILE.csv", help="write the full comparison to this file")
    comparison.add_argument(
        "--html",
        type=_HTML,
        metavar="FILE.html",
        help="write the comparison page to this file (with steps on both sides: the interval of each change)",
    )
    _add_full_names(comparison)
    comparison.set_defaults(run=cmd_compare)
    _add_run(commands, common)
    _add_ranks(commands, common)
    _add_bench(commands, common)
    return parser


def _flat(message: object) -> str:
    return " ".join(str(message).split())


def _show_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    print(f"{PROG}: warning: {_flat(message)}", file=sys.stderr)


@contextmanager
def _one_line_warnings() -> Iterator[None]:
    """Warnings as ``aitune-dispatch: warning: <message>``, one line, no source line."""
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        yield


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: exit status 0, 1 for bad input (one line on stderr), 130 when interrupted,
    141 when stdout closed early (``| head``); ``argv`` None reads ``sys.argv``.
    """
    args = build_parser().parse_args(argv)
    try:
        with _one_line_warnings():
            status = int(args.run(args))
        sys.stdout.flush()  # a closed pipe fails here, inside the try, not at interpreter exit
        return status
    except CliError as error:
        if os.environ.get("AITUNE_DISPATCH_TRACEBACK"):
            raise
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (``| head``): stop quietly, as a SIGPIPE'd tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush cannot fail again
        return 141


if __name__ == "__main__":
    sys.exit(main())
