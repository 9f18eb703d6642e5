"""The design document is the repository's own: each citation names one of its sections, none cites elsewhere.

Code, docs and benchmarks cite ``docs/design.md`` by section name (``docs/design.md``, "The
clock"); each quoted name must be a ``## `` heading of that file, so renaming a section breaks
this test instead of leaving citations that lead nowhere. Docstrings once cited "DESIGN.md facts
5/6", a document outside the repository: no tracked text file may cite such a document, numbered
facts, or a path outside the checkout.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.single_backend  # reads text files; no tracing backend involved

REPO = Path(__file__).resolve().parents[1]
DESIGN = REPO / "docs" / "design.md"
TEXT_SUFFIXES = {".py", ".pyi", ".md", ".sh", ".c", ".cpp", ".h", ".toml", ".cfg", ".txt", ".ini", ".yml", ".yaml"}
# a citation: design.md, then one or more quoted section names joined by "and" or commas
CITATION = re.compile(r'design\.md`{0,2}\s*,\s*((?:"[^"]+"(?:\s*(?:,|and)\s*)?)+)')
# documents elsewhere, numbered facts, absolute paths of a workspace (``$OUT/work/...`` is a subfolder)
OUTSIDE = re.compile(
    r"(?<![\w/$])(?:(?:DESIGN|STYLE|SPEC|NOTES)\.md|\.\./shared|/work/)|\bfacts? \d+(?:/\d+)*\b",
    flags=re.IGNORECASE,
)


def tracked_text_files() -> list[Path]:
    """The repository's tracked text files (what a checkout holds), this test excepted."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    files = [REPO / name for name in listed.splitlines() if Path(name).suffix in TEXT_SUFFIXES]
    return [path for path in files if path.is_file() and path != Path(__file__).resolve()]


def sections() -> set[str]:
    return {line[3:].strip() for line in DESIGN.read_text().splitlines() if line.startswith("## ")}


def citations(text: str) -> list[str]:
    """The section names ``text`` cites, line breaks and comment markers inside a citation joined."""
    flat = re.sub(r"\s*\n\s*(?:#|//|\*)?\s*", " ", text)
    return [name for group in CITATION.findall(flat) for name in re.findall(r'"([^"]+)"', group)]


FILES = tracked_text_files()


def test_the_design_document_is_in_the_repository_and_cited():
    assert DESIGN.is_file() and len(sections()) >= 6
    cited = {name for path in FILES for name in citations(path.read_text(errors="replace"))}
    # the facts the code rests on, each cited where it is relied on
    assert {
        "Correlation: what CUPTI needs",
        "Nested functional calls",
        "Fast paths and the has_torch_function gate",
        "Coexistence with torch.profiler",
        "The clock",
        "torch.compile and CUDA graphs",
    } <= cited


def test_every_citation_names_a_section():
    known = sections()
    wrong = [
        f"{path.relative_to(REPO)}: {name!r}"
        for path in FILES
        for name in citations(path.read_text(errors="replace"))
        if name not in known
    ]
    assert not wrong, f"cited sections that docs/design.md lacks (it has {sorted(known)}):\n" + "\n".join(wrong)


def test_the_citation_reader_joins_wrapped_lines():
    text = '(``docs/design.md``, "Nested functional calls" and "Fast paths and\n# the has_torch_function gate")'
    assert citations(text) == ["Nested functional calls", "Fast paths and the has_torch_function gate"]


def test_nothing_cites_a_document_outside_the_repository():
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in FILES
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if OUTSIDE.search(line)
    ]
    assert not found, "\n".join(found)


def test_the_outside_pattern_catches_the_old_citations():
    assert OUTSIDE.search("see DESIGN.md facts 5/6") and OUTSIDE.search("as in ../shared/STYLE.md")
    assert OUTSIDE.search("fact 10 says") and OUTSIDE.search("/work/shared/notes")
    assert not OUTSIDE.search('docs/design.md, "The clock"')
