"""Reading the CLI's text tables back: where each column lies (from the rule under the titles) and
whether the decimal points of every numeric column line up."""

from __future__ import annotations

import re

NUMBER = re.compile(r"^\s*[+-]?[\d,]*\.\d+(%|x|\u00d7|e[+-]\d+)?\s*$")


def tables(text: str) -> list[list[str]]:
    """Each table in ``text``: its title line, its rule (``---  ---``) and its rows, up to a blank or
    unruled line."""
    lines = text.splitlines()
    found = []
    for index, line in enumerate(lines):
        if index and re.fullmatch(r"-+( +-+)*", line.strip()) and line.strip():
            end = index + 1
            while end < len(lines) and lines[end].strip() and not lines[end].endswith(":"):
                end += 1
            found.append(lines[index - 1 : end])
    return found


def spans(rule: str) -> list[tuple[int, int]]:
    """The character columns of each table column, from its rule."""
    return [(match.start(), match.end()) for match in re.finditer(r"-+", rule)]


def misaligned(text: str) -> list[str]:
    """The numeric columns whose decimal points do not all sit in one character column, by title."""
    bad = []
    checked = 0
    for table in tables(text):
        title, rule, rows = table[0], table[1], table[2:]
        for start, end in spans(rule):
            points = set()
            for row in rows:
                cell = row[start:end]
                if NUMBER.match(cell):
                    points.add(start + cell.index("."))
            checked += bool(points)
            if len(points) > 1:
                bad.append(title[start:end].strip())
    assert checked, f"no numeric column with decimals found in:\n{text}"
    return bad
