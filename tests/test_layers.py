"""The package reads as its data flow: no stage imports a higher one, no private name crosses stages, no circles.

Stages, lowest first: ``schema`` / ``config`` (and the notebook-display hook) below all; then
tracing → collection → joining → results; above results two branches, the reports (→ cli) and the
capture (capture.py, arguments.py → profiler.py → benchmarking → cli); the package root above
everything. Every ``import`` of the package's own modules is read with ``ast`` from the source,
wherever it sits: a function-level import counts (that is how circles used to be held apart), and
so does one under ``if TYPE_CHECKING:`` (a circle of annotations is a circle too).

Private names (``_x``, not dunders) are checked as they are used, not only as they are imported:
an attribute reached through a name a module imported (``capture._record``,
``getattr(capture, "_record")``) belongs to the stage it came from, and an object's private
attribute (``tracer._taken``) may be read only in the module that defines that name. The
benchmarks and the CLI neither import such names nor assign into the package's modules
(monkeypatching). Only the package root imports modules of ours by a string (its lazy attributes).
docs/design.md's "Layout" table must list every module in the stage given here, and the stages it stands on.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.single_backend  # reads source files; no tracing backend involved

PACKAGE = "aitune_dispatch"
REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / PACKAGE
BENCHMARKS = REPO / "benchmarks"
LAYOUT_DOC = REPO / "docs/design.md"  # its "Layout" section lists every module in its stage

# stage -> the stages directly below it; a stage may import itself and everything below it. This is the
# star the code has: tracing, collection and joining each stand on base alone; provenance (compiled and
# graph attribution) reads all three; the capture puts them together into a result, which the views and
# reports read without knowing how it was recorded
BELOW = {
    "base": (),
    "tracing": ("base",),
    "collection": ("base",),
    "joining": ("base",),
    "provenance": ("tracing", "collection"),
    "results": ("base",),
    "reports": ("results",),
    "capture": ("tracing", "collection", "joining", "provenance", "results"),
    "profiler": ("capture",),
    "benchmarking": ("profiler",),
    "cli": ("reports", "benchmarking"),
    "root": ("cli",),
}
# modules that are not a folder of their own, by dotted name below the package
MODULE_STAGES = {
    "": "root",  # aitune_dispatch/__init__.py: lazy attributes, wires the notebook display
    "__main__": "root",
    "torch": "root",  # `import aitune_dispatch.torch as ait`
    "schema": "base",
    "config": "base",
    "interrupts": "base",  # Ctrl-C held while record() installs and removes, and in the gates' critical sections
    "display": "base",  # the notebook-display hook the root points at reports
    "demo": "base",  # a model and its samples; imports nothing of ours
    "encoded": "base",  # dictionary-encoded string columns (schema.STRING): built, tested, decoded
    "tensors": "base",  # what is recorded of a tensor argument: shape, strides, nested parts
    "torch_compat": "base",  # every difference between the torch versions supported, in one place
    "joining": "joining",
    "capture": "capture",
    "arguments": "capture",  # the profiler's and profile()'s arguments, checked before the capture
    "backends": "capture",  # the one place that picks the tracer and the decoder, native or pure Python
    "graph_captures": "capture",  # observe_graph_captures: the observer, built with profile()'s tracer and source
    "profiler": "profiler",
    "region": "profiler",  # recording(): profile a region of the user's code, beside the spec's facade
    "script": "profiler",  # run_script(): a script run as __main__ inside a recording() without a module
    "cli": "cli",
    "progress": "cli",  # the CLI's progress bar and stage lines
}


def stage_of(module: str) -> str:
    """The stage of a dotted module name of the package (``aitune_dispatch.results.views`` -> results)."""
    inner = module.removeprefix(PACKAGE).removeprefix(".")
    head = inner.split(".")[0]
    if head in MODULE_STAGES and "." not in inner:
        return MODULE_STAGES[head]
    if head in BELOW:  # a folder: tracing/, collection/, provenance/, results/, reports/, benchmarking/
        return head
    raise AssertionError(f"{module} has no stage; add it to MODULE_STAGES in {__file__}")


def allowed(stage: str) -> set[str]:
    """``stage`` and every stage below it."""
    seen, pending = {stage}, list(BELOW[stage])
    while pending:
        lower = pending.pop()
        if lower not in seen:
            seen.add(lower)
            pending.extend(BELOW[lower])
    return seen


@dataclass(frozen=True)
class Import:
    """One import of a module of the package: who, what, which names, whether it only type-checks."""

    importer: str
    target: str
    names: tuple[str, ...]
    line: int
    typing_only: bool


def module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def exists(module: str) -> bool:
    base = ROOT.joinpath(*module.split(".")[1:])
    compiled = any(base.parent.glob(base.name + ".*.so")) or base.with_suffix(".pyi").is_file()
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file() or compiled


def _typing_blocks(tree: ast.AST) -> set[int]:
    """Line numbers of everything under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _resolve(importer: str, package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".") if package else importer.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(path: Path) -> Iterator[Import]:
    """Every import of a package module in ``path``, a ``from X import m`` of a submodule as its own."""
    importer, tree = module_name(path), ast.parse(path.read_text(), str(path))
    typing_lines = _typing_blocks(tree)
    for node in ast.walk(tree):
        typing_only = getattr(node, "lineno", 0) in typing_lines
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == PACKAGE:
                    yield Import(importer, alias.name, (), node.lineno, typing_only)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(importer, is_package(path), node)
            if target.split(".")[0] != PACKAGE:
                continue
            submodules = [a.name for a in node.names if exists(f"{target}.{a.name}")]
            names = tuple(a.name for a in node.names if a.name not in submodules)
            for name in submodules:
                yield Import(importer, f"{target}.{name}", (), node.lineno, typing_only)
            if names:
                yield Import(importer, target, names, node.lineno, typing_only)


def all_imports() -> list[Import]:
    return [item for path in sorted(ROOT.rglob("*.py")) for item in imports_of(path)]


def upward(imports: list[Import]) -> list[str]:
    """The imports of a higher stage than the importer's."""
    return [
        f"{i.importer} ({stage_of(i.importer)}) imports {i.target} ({stage_of(i.target)}), line {i.line}"
        for i in imports
        if stage_of(i.target) not in allowed(stage_of(i.importer))
    ]


def private_crossings(imports: list[Import]) -> list[str]:
    """Private modules or names (``_x``, not dunders) imported from another stage."""
    crossing = []
    for i in imports:
        if stage_of(i.importer) == stage_of(i.target):
            continue
        private_module = any(part.startswith("_") and not part.startswith("__") for part in i.target.split("."))
        private_names = [n for n in i.names if n.startswith("_") and not n.startswith("__")]
        if private_module or private_names:
            crossing.append(f"{i.importer} imports {i.target} {private_names or ''}, line {i.line}")
    return crossing


def cycle(imports: list[Import]) -> list[str] | None:
    """One import circle (a path that ends where it began), type-only imports included, or None."""
    edges: dict[str, set[str]] = {}
    for i in imports:
        if i.target != i.importer:
            edges.setdefault(i.importer, set()).add(i.target)
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


# -- private names as they are used ---------------------------------------------------------------------
# a namedtuple's public API is spelled with one underscore
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}
ATTRIBUTE_CALLS = {"getattr", "setattr", "hasattr", "delattr"}
BY_STRING = ("import_module", "__import__")  # importlib.import_module(name), __import__(name)


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in NAMEDTUPLE_API


@dataclass(frozen=True)
class Binding:
    """What a module-level name of a file stands for: a package module, or a name from one."""

    module: str  # the package module (the one the name was imported from, for a name)
    is_module: bool


def bindings(path: Path, importer: str, tree: ast.AST) -> tuple[dict[str, Binding], set[str]]:
    """The names the file's imports bind to package modules (or their names), and those bound to others."""
    ours: dict[str, Binding] = {}
    others: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != PACKAGE:
                    others.add((alias.asname or alias.name).split(".")[0])
                elif alias.asname:
                    ours[alias.asname] = Binding(alias.name, True)
                else:
                    ours[PACKAGE] = Binding(PACKAGE, True)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(importer, is_package(path), node)
            for alias in node.names:
                name = alias.asname or alias.name
                if target.split(".")[0] != PACKAGE:
                    others.add(name)
                elif exists(f"{target}.{alias.name}"):
                    ours[name] = Binding(f"{target}.{alias.name}", True)
                else:
                    ours[name] = Binding(target, False)
    return ours, others


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None unless it is names and attributes only."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def _owner(parts: list[str], ours: dict[str, Binding]) -> tuple[str, str] | None:
    """``(package module, private name)`` for the first private name along ``parts``, or None."""
    binding = ours.get(parts[0])
    if binding is None:
        return None
    module, is_module = binding.module, binding.is_module
    for part in parts[1:]:
        if is_module and exists(f"{module}.{part}"):
            module = f"{module}.{part}"
        elif private(part):
            return module, part
        else:
            is_module = False  # a name of ``module``: what follows is its attributes, still its module's
    return None


def _attribute_uses(tree: ast.AST) -> Iterator[tuple[list[str], str, int]]:
    """Every attribute chain (``a.b._c``) and ``getattr(a.b, "_c")``-style use, with its last name and line."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (parts := _chain(node)):
            yield parts, node.attr, node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_CALLS:
            args = node.args
            if len(args) >= 2 and isinstance(args[1], ast.Constant) and isinstance(args[1].value, str):
                if parts := _chain(args[0]):
                    yield [*parts, args[1].value], args[1].value, node.lineno


def _defined_names(tree: ast.AST) -> set[str]:
    """Every name a file defines: functions, classes, assigned names, parameters, ``self._x = ...``.

    An attribute assigned on anything but ``self`` / ``cls`` (``tracer._taken = ...``) defines
    nothing: it writes into another object.
    """
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _package_privates() -> set[str]:
    """The private names the package defines anywhere (torch's own, ``_orig_mod``..., are not ours)."""
    return {
        name for path in ROOT.rglob("*.py") for name in _defined_names(ast.parse(path.read_text())) if private(name)
    }


def private_uses(path: Path, importer: str) -> tuple[list[tuple[str, str, int]], list[str]]:
    """The file's private names reached through package imports (``(owner module, expression, line)``),
    and its uses of private attributes the package defines elsewhere, not in this file (``tracer._taken``)."""
    tree = ast.parse(path.read_text(), str(path))
    ours, others = bindings(path, importer, tree)
    elsewhere = PACKAGE_PRIVATES - _defined_names(tree)
    through_imports, foreign = [], []
    for parts, last, line in _attribute_uses(tree):
        owner = _owner(parts, ours)
        if owner is not None:
            through_imports.append((owner[0], ".".join(parts), line))
        elif last in elsewhere and parts[0] not in ("self", "cls", *others):
            foreign.append(f"{importer}: {'.'.join(parts)}, line {line}")
    return through_imports, foreign


def private_attribute_crossings(paths: Iterable[Path]) -> list[str]:
    """Private names of another stage reached as attributes (``capture._record``) in the package."""
    crossing = []
    for path in paths:
        importer = module_name(path)
        for owner, text, line in private_uses(path, importer)[0]:
            if stage_of(owner) != stage_of(importer):
                crossing.append(f"{importer} ({stage_of(importer)}) uses {text} of {owner}, line {line}")
    return crossing


def foreign_privates(paths: Iterable[Path], name_of: Callable[[Path], str]) -> list[str]:
    """Private attributes of objects read where no definition of that name is (``tracer._taken``)."""
    return [found for path in paths for found in private_uses(path, name_of(path))[1]]


def monkeypatches(path: Path, importer: str) -> list[str]:
    """Assignments into package modules or their names (``capture.make_source = ...``), however spelled."""
    tree = ast.parse(path.read_text(), str(path))
    ours, _ = bindings(path, importer, tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and (parts := _chain(target)) and parts[0] in ours:
                found.append(f"{importer}: assigns {'.'.join(parts)}, line {node.lineno}")
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            args = node.args
            if name in ("setattr", "delattr") and args and (parts := _chain(args[0])) and parts[0] in ours:
                found.append(f"{importer}: {name}({'.'.join(parts)}, ...), line {node.lineno}")
            strings_given = [a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if name.endswith(("patch", "setattr")) and any(s.startswith(PACKAGE) for s in strings_given):
                found.append(f"{importer}: {name}({strings_given[0]!r}, ...), line {node.lineno}")
    return found


def dynamic_imports(path: Path) -> set[str]:
    """The functions that import a module by a string (``importlib.import_module``, ``__import__``)."""
    found = set()
    for function in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in BY_STRING:
                    found.add(function.name)
    return found


def benchmark_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def benchmark_private_imports(path: Path) -> list[str]:
    """Private package modules or names a benchmark imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[0] == PACKAGE and any(private(part) for part in parts):
                found.append(f"{benchmark_name(path)} imports {module}, line {node.lineno}")
    return found


PACKAGE_FILES = sorted(ROOT.rglob("*.py"))
PACKAGE_PRIVATES = _package_privates()
BENCHMARK_FILES = sorted(BENCHMARKS.glob("*.py"))
IMPORTS = all_imports()


def test_the_parser_sees_the_imports_it_must_judge():
    # not vacuous: the facade's imports, a relative submodule import and a type-only import are read
    pairs = {(i.importer, i.target) for i in IMPORTS}
    assert ("aitune_dispatch.profiler", "aitune_dispatch.capture") in pairs
    assert ("aitune_dispatch.results.views.kernels", "aitune_dispatch.schema") in pairs  # from ...schema import
    assert ("aitune_dispatch.tracing.native", "aitune_dispatch.tracing._tracer") in pairs  # from .. import _tracer
    assert any(i.typing_only and i.importer.startswith("aitune_dispatch.reports") for i in IMPORTS)
    assert {stage_of(i.importer) for i in IMPORTS} == set(BELOW) - {"base"}  # base imports nothing of ours


def test_the_rules_catch_the_old_layout():
    # the layout before issue 11: a result drew its notebook view from reports, persist and
    # profile_result imported each other, the CLI reached into the profiler's privates
    result, persist = "aitune_dispatch.results.profile_result", "aitune_dispatch.results.persist"
    old = [
        Import(result, "aitune_dispatch.reports.html", ("notebook_html",), 1, False),
        Import(persist, result, ("ProfileResult",), 2, False),
        Import(result, persist, ("save_result",), 3, False),
        Import("aitune_dispatch.cli", "aitune_dispatch.profiler", ("_record",), 4, False),
        Import("aitune_dispatch.reports.base", "aitune_dispatch.joining", ("_Index",), 5, False),
    ]
    found = upward(old)  # reports may not read the joining stage either: the star has no sideways arrow
    assert len(found) == 2 and "reports.html (reports)" in found[0] and "joining (joining)" in found[1]
    assert len(private_crossings(old)) == 2
    assert cycle(old) == [
        "aitune_dispatch.results.persist",
        "aitune_dispatch.results.profile_result",
        "aitune_dispatch.results.persist",
    ]


def test_no_module_imports_a_higher_stage():
    found = upward(IMPORTS)
    assert not found, "\n".join(found)


def test_the_stages_are_as_tight_as_the_code():
    # the star is what the code does, not a looser allowance: every stage imports each stage it is
    # declared to stand on, and nothing beyond what that allows (test_no_module_imports_a_higher_stage)
    used = {(stage_of(i.importer), stage_of(i.target)) for i in IMPORTS}
    unused = [(stage, lower) for stage, lowers in BELOW.items() for lower in lowers if (stage, lower) not in used]
    assert not unused, f"declared but never imported (tighten BELOW): {unused}"


def test_no_private_name_crosses_stages():
    found = private_crossings(IMPORTS)
    assert not found, "\n".join(found)


def test_no_import_circles():
    found = cycle(IMPORTS)
    assert found is None, " -> ".join(found or [])


def test_a_circle_of_type_only_imports_is_a_circle():
    # ranks.py annotated with ProfileResult under TYPE_CHECKING while profile_result.py imports ranks
    ranks, result = "aitune_dispatch.results.ranks", "aitune_dispatch.results.profile_result"
    old = [Import(result, ranks, (), 1, False), Import(ranks, result, ("ProfileResult",), 2, True)]
    assert cycle(old) == [result, ranks, result]


def test_no_private_name_of_another_stage_is_used_as_an_attribute():
    found = private_attribute_crossings(PACKAGE_FILES)
    assert not found, "\n".join(found)


def test_no_private_attribute_is_read_outside_the_module_that_defines_it():
    found = foreign_privates(PACKAGE_FILES, module_name) + foreign_privates(BENCHMARK_FILES, benchmark_name)
    assert not found, "\n".join(found)


def test_the_attribute_rules_catch_reaching_into_a_stage(tmp_path):
    # the CLI and the benchmarks used to call the profiler's privates and patch them
    cli = ROOT / "cli.py"
    source = tmp_path / "cli.py"
    source.write_text(
        "from . import capture\n"
        "import aitune_dispatch.capture as cap\n"
        "from .tracing import native\n"
        "def run(tracer):\n"
        "    capture._record(None)\n"
        "    getattr(cap, '_make_source')\n"
        "    native.NativeTracer._columns\n"
        "    tracer._taken = {}\n"
        "    capture.make_source = None\n"
        "    setattr(native, 'load', None)\n"
        "    return capture.record, step._replace(done=1)\n"
    )
    uses, foreign = private_uses(source, module_name(cli))
    assert sorted((owner, text) for owner, text, _ in uses) == [
        ("aitune_dispatch.capture", "cap._make_source"),
        ("aitune_dispatch.capture", "capture._record"),
        ("aitune_dispatch.tracing.native", "native.NativeTracer._columns"),
    ]
    assert foreign == ["aitune_dispatch.cli: tracer._taken, line 8"]  # NativeTracer's, written from outside
    source.write_text("def run(tracer, self):\n    self._taken = 1\n    return tracer._taken\n")
    assert private_uses(source, module_name(cli))[1] == []  # a file defining _taken on self may read it
    source.write_text(
        "from . import capture\nfrom .tracing import native\n"
        "capture.make_source = None\nsetattr(native, 'load', None)\n"
        "def test(monkeypatch):\n    monkeypatch.setattr('aitune_dispatch.capture.record', None)\n"
    )
    assert len(monkeypatches(source, module_name(cli))) == 3


@pytest.mark.parametrize("path", [ROOT / "cli.py", *BENCHMARK_FILES], ids=lambda p: p.name)
def test_the_cli_and_the_benchmarks_neither_patch_nor_reach_privates(path):
    # they drive the profiler through its public surface: no private of ours imported or reached as an
    # attribute (capture._record, NativeTracer._columns), nothing of ours assigned (monkeypatched)
    name = module_name(path) if path.is_relative_to(ROOT) else benchmark_name(path)
    found = monkeypatches(path, name) + (benchmark_private_imports(path) if path.parent == BENCHMARKS else [])
    found += [f"{name}: {text}, line {line}" for _, text, line in private_uses(path, name)[0]]
    assert not found, "\n".join(found)


def test_no_package_module_assigns_into_another():
    found = [item for path in PACKAGE_FILES for item in monkeypatches(path, module_name(path))]
    assert not found, "\n".join(found)


def test_only_the_root_imports_modules_of_ours_by_a_string():
    # the root's lazy attributes (above every stage); the CLI imports only the user's factory module by
    # its name; renderers are reached through reports.renderer_for, not by a module name
    by_string = {module_name(path): found for path in PACKAGE_FILES if (found := dynamic_imports(path))}
    assert by_string == {PACKAGE: {"__getattr__"}, "aitune_dispatch.cli": {"_import_name"}}, by_string
    lazy = importlib.import_module(PACKAGE)._LAZY
    assert all(exists(PACKAGE + relative) for relative in lazy.values()), lazy


# -- docs/design.md's "Layout" --------------------------------------------------------------------------
LAYOUT_STAGES = {"below all": "base", "package root": "root"}  # the other rows are named as BELOW


def layout_table() -> str:
    """The table of the Layout section that starts with ``| stage |`` (the section has others)."""
    section = LAYOUT_DOC.read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    return "| stage |" + section.split("| stage |", 1)[1].split("\n\n", 1)[0]


def layout_modules() -> dict[str, str]:
    """``module name -> stage`` from the Layout table; a row's first name gives the folder of the rest."""
    text = layout_table()
    listed: dict[str, str] = {}
    for row in re.findall(r"^\| ([^|]+) \| [^|]+ \| ([^|]+) \|", text, flags=re.MULTILINE):
        label, cell = row[0].strip(), row[1]
        if label in ("stage", "---"):
            continue
        names = re.findall(r"`([^`]+\.py)`", cell)
        folder = str(Path(names[0]).parent) if names else "."
        for position, name in enumerate(names):
            path = Path(name) if position == 0 else Path(folder) / name
            assert path.as_posix() not in listed, f"{path} is listed twice"
            listed[path.as_posix()] = LAYOUT_STAGES.get(label, label)
    return listed


def test_the_layout_lists_every_module_in_its_stage():
    listed = layout_modules()
    files = {path.relative_to(ROOT).as_posix(): path for path in PACKAGE_FILES}
    # a folder's __init__.py goes with the folder's row
    folders = {Path(name).parent.as_posix() for name in listed}
    unlisted = [n for n in files if n not in listed and not (n.endswith("/__init__.py") and n[:-12] in folders)]
    assert not unlisted, f"docs/design.md's Layout lacks {unlisted}"
    missing = [name for name in listed if name not in files]
    assert not missing, f"docs/design.md's Layout lists modules that do not exist: {missing}"
    wrong = {n: (s, stage_of(module_name(files[n]))) for n, s in listed.items() if stage_of(module_name(files[n])) != s}
    assert not wrong, f"Layout stage != this test's stage: {wrong}"


def test_the_layout_says_what_each_stage_stands_on():
    text = layout_table()
    rows = re.findall(r"^\| ([^|]+) \| ([^|]+) \| [^|]+ \|", text, flags=re.MULTILINE)
    def stage(label: str) -> str:
        return LAYOUT_STAGES.get(label.strip(), label.strip())

    stands_on = {stage(label): {stage(s) for s in on.split(",")} for label, on in rows if stage(label) != "stage"}
    stands_on.pop("---", None)
    expected = {name: set(lower) or {"—"} for name, lower in BELOW.items()}
    assert stands_on == expected, "the Layout's 'stands on' column differs from BELOW"


@pytest.mark.parametrize("stage", sorted(BELOW))
def test_every_stage_has_modules(stage):
    assert any(stage_of(module_name(path)) == stage for path in ROOT.rglob("*.py")), stage


def test_the_facade_is_small():
    assert len((ROOT / "profiler.py").read_text().splitlines()) <= 120
