"""The package reads as its data flow: no stage imports a higher one, no private name crosses stages, no circles.

Stages, lowest first: ``schema`` / ``config`` (and the notebook-display hook) below all; then
tracing → collection → joining → results; above results two branches, the reports (→ cli) and the
capture (capture.py, arguments.py → profiler.py → benchmarking → cli); the package root above
everything. Every
``import`` of the package's own modules is read with ``ast`` from the source, wherever it sits (a
function-level import counts: that is how circles used to be held apart); only imports under
``if TYPE_CHECKING:`` are left out of the circle check, since they never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.single_backend  # reads source files; no tracing backend involved

PACKAGE = "aitune_dispatch"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

# stage -> the stages directly below it; a stage may import itself and everything below it
BELOW = {
    "base": (),
    "tracing": ("base",),
    "collection": ("tracing",),
    "joining": ("collection",),
    "results": ("joining",),
    "reports": ("results",),
    "capture": ("results",),
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
    "display": "base",  # the notebook-display hook the root points at reports
    "demo": "base",  # a model and its samples; imports nothing of ours
    "strings": "base",  # dictionary-encoded string columns (schema.STRING): built, tested, decoded
    "_tracer": "tracing",  # compiled half of tracing/native.py
    "_cupti_native": "collection",  # compiled half of collection/native_sink.py
    "joining": "joining",
    "provenance": "joining",  # compiled kernels and graph replays attributed on the joined tables
    "provenance_capture": "capture",  # brackets record(): traced warm-up, graph observer, attribution
    "capture": "capture",
    "arguments": "capture",  # profile()'s arguments, checked before the capture
    "profiler": "profiler",
    "cli": "cli",
}


def stage_of(module: str) -> str:
    """The stage of a dotted module name of the package (``aitune_dispatch.results.views`` -> results)."""
    inner = module.removeprefix(PACKAGE).removeprefix(".")
    head = inner.split(".")[0]
    if head in MODULE_STAGES and "." not in inner:
        return MODULE_STAGES[head]
    if head in BELOW:  # a folder: tracing/, collection/, results/, reports/, benchmarking/
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
    """One import circle among the imports that run (a path that ends where it began), or None."""
    edges: dict[str, set[str]] = {}
    for i in imports:
        if not i.typing_only and i.target != i.importer:
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


IMPORTS = all_imports()


def test_the_parser_sees_the_imports_it_must_judge():
    # not vacuous: the facade's imports, a relative submodule import and a type-only import are read
    pairs = {(i.importer, i.target) for i in IMPORTS}
    assert ("aitune_dispatch.profiler", "aitune_dispatch.capture") in pairs
    assert ("aitune_dispatch.results.views.kernels", "aitune_dispatch.schema") in pairs  # from ...schema import
    assert ("aitune_dispatch.tracing.native", "aitune_dispatch._tracer") in pairs  # from .. import _tracer
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
    assert len(upward(old)) == 1 and "reports.html (reports)" in upward(old)[0]
    assert len(private_crossings(old)) == 2
    assert cycle(old) == [
        "aitune_dispatch.results.persist",
        "aitune_dispatch.results.profile_result",
        "aitune_dispatch.results.persist",
    ]


def test_no_module_imports_a_higher_stage():
    found = upward(IMPORTS)
    assert not found, "\n".join(found)


def test_no_private_name_crosses_stages():
    found = private_crossings(IMPORTS)
    assert not found, "\n".join(found)


def test_no_import_circles():
    found = cycle(IMPORTS)
    assert found is None, " -> ".join(found or [])


@pytest.mark.parametrize("stage", sorted(BELOW))
def test_every_stage_has_modules(stage):
    assert any(stage_of(module_name(path)) == stage for path in ROOT.rglob("*.py")), stage


def test_the_facade_is_small():
    assert len((ROOT / "profiler.py").read_text().splitlines()) <= 120
