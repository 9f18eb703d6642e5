"""A kernel's short name: its demangled base name without namespaces, template arguments, parameters or
return type, as Nsight Systems' "short name" and Kineto show it.

``void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, ...>(int, ...)``
reads ``vectorized_elementwise_kernel``. A name that is not a C++ signature (``sm80_xmma_gemm_...``,
``triton_poi_fused_add_0``, ``Memset (Device)``, ``cpu::aten::addmm``) is its own short name, and a name
the parser cannot read comes back whole: the function never raises on a string. A result holds many
launches of few distinct names, so :func:`short_names` parses each distinct name once.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import pandas as pd

from ...schema import CPU_KERNEL_PREFIX

_OPENERS = {"(": ")", "<": ">", "[": "]", "{": "}"}
_CLOSERS = {closer: opener for opener, closer in _OPENERS.items()}
_ANONYMOUS = "(anonymous namespace)"
_OPERATOR_SYMBOLS = set("+-*/%^&|~!=<>,")
_QUALIFIERS = (" const", " volatile", " &&", " &", " noexcept")
_NOT_CPP = ("Memcpy", "Memset", CPU_KERNEL_PREFIX)  # activity names that are words, not signatures


def short_name(name: str) -> str:
    """The short name of one demangled kernel name (see the module's docstring).

    Parameters
    ----------
    name:
        A demangled kernel name as results hold it (``collection.decoded.demangle``).

    Returns
    -------
    str
        The base name: ``vectorized_elementwise_kernel``, ``operator()``, ``softmax_warp_forward``;
        ``name`` itself where it is not a C++ signature or cannot be parsed.
    """
    if not isinstance(name, str):
        return name
    return _short_name(name)


@functools.lru_cache(maxsize=4096)
def _short_name(name: str) -> str:
    text = " ".join(name.split())
    if not text or text.startswith(_NOT_CPP) or not any(char in text for char in "(<:"):
        return name
    try:
        parsed = _base_name(text.replace(_ANONYMOUS, "\x00"))
    except (IndexError, ValueError):
        return name
    return parsed.replace("\x00", _ANONYMOUS) if parsed else name


def short_names(names: Iterable[object]) -> pd.Series:
    """:func:`short_name` of each of ``names``, each distinct name parsed once; a missing name stays missing.

    Parameters
    ----------
    names:
        Kernel names (a column of a view; None or NaN where a row has none).

    Returns
    -------
    pandas.Series
        The short names, in order, with the index of ``names`` where it is a Series.
    """
    series = names if isinstance(names, pd.Series) else pd.Series(list(names), dtype=object)
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    shorts = [short_name(str(value)) for value in uniques]
    values = [shorts[code] if code >= 0 else None for code in codes]
    return pd.Series(values, index=series.index, dtype=object)


def _base_name(text: str) -> str:
    """The last component of the qualified name that ``text`` (a demangled signature) declares, bare."""
    parts = _top_level_parts(_without_qualifiers(text))
    name = _declared_name(parts)
    components = _components(name)
    last = components[-1]
    if not _is_local(last):
        return _bare(last)
    owner = next((c for c in reversed(components[:-1]) if not _is_local(c)), None)  # foo(int)::{lambda(int)#1}
    return f"{_bare(owner)}::{last}" if owner else last


def _without_qualifiers(text: str) -> str:
    """``f(int) const`` -> ``f(int)``: what follows a member function's parameter list."""
    changed = True
    while changed:
        changed = False
        for qualifier in _QUALIFIERS:
            if text.endswith(qualifier):
                text, changed = text[: -len(qualifier)], True
    return text


def _scan(text: str) -> list[tuple[int, int]]:
    """``(position, depth before it)`` of each character outside an ``operator`` token's symbols.

    Brackets nest by kind (a ``>`` inside ``(...)`` is a comparison, not a closer); ``operator<``,
    ``operator()`` and the like count as name characters, not brackets.
    """
    stack: list[str] = []
    marks: list[tuple[int, int]] = []
    pos = 0
    while pos < len(text):
        end = _operator_end(text, pos)
        if end > pos:
            marks += [(p, len(stack)) for p in range(pos, end)]
            pos = end
            continue
        char = text[pos]
        if char in _OPENERS and not (char == "<" and stack and stack[-1] == "("):
            marks.append((pos, len(stack)))
            stack.append(char)
        elif char in _CLOSERS and char != ">" and _CLOSERS[char] in stack:
            while stack and stack.pop() != _CLOSERS[char]:
                pass
            marks.append((pos, len(stack)))
        elif char == ">" and stack and stack[-1] == "<":
            stack.pop()
            marks.append((pos, len(stack)))
        else:
            marks.append((pos, len(stack)))
        pos += 1
    return marks


def _operator_end(text: str, pos: int) -> int:
    """Where the ``operator...`` token starting at ``pos`` ends (``pos`` itself where none starts there)."""
    if not text.startswith("operator", pos) or (pos > 0 and (text[pos - 1].isalnum() or text[pos - 1] == "_")):
        return pos
    end = pos + len("operator")
    if end < len(text) and (text[end].isalnum() or text[end] == "_"):
        return pos  # an identifier such as operator_kernel
    rest = text[end:]
    for token in ("()", "[]", " new[]", " delete[]", " new", " delete"):
        if rest.startswith(token):
            return end + len(token)
    symbols = end
    while symbols < len(text) and text[symbols] in _OPERATOR_SYMBOLS and symbols - end < 3:
        symbols += 1
    if text.startswith("->", end):
        symbols = end + (3 if text.startswith("->*", end) else 2)
    return symbols


def _top_level_parts(text: str) -> list[tuple[str, str]]:
    """``text`` split at depth 0 into name text and bracketed groups: ``[("name", ...), ("(", "(int)")]``."""
    parts: list[tuple[str, str]] = []
    group_start, opener = -1, ""
    name = []
    for pos, depth in _scan(text):
        char = text[pos]
        if depth == 0 and group_start < 0 and char in _OPENERS and not _in_operator(text, pos):
            if name:
                parts.append(("name", "".join(name)))
                name = []
            group_start, opener = pos, char
        elif group_start >= 0:
            if depth == 0 and char == _OPENERS[opener]:
                parts.append((opener, text[group_start : pos + 1]))
                group_start = -1
        else:
            name.append(char)
    if group_start >= 0:
        raise ValueError("unbalanced brackets")
    if name:
        parts.append(("name", "".join(name)))
    return parts


def _in_operator(text: str, pos: int) -> bool:
    start = text.rfind("operator", 0, pos + 1)
    return start >= 0 and _operator_end(text, start) > pos


def _declared_name(parts: list[tuple[str, str]]) -> str:
    """The qualified name (with its template arguments) before the last top-level parameter list, its
    return type dropped (``void ns::f<int>(int)`` -> ``ns::f<int>``)."""
    has_parameters = bool(parts) and parts[-1][0] == "("  # else a name such as cutlass::Kernel2<T>
    declared = "".join(text for _, text in (parts[:-1] if has_parameters else parts)).strip()
    words: list[str] = []
    for word in _split_top_level(declared, " "):
        if word.startswith("<") and words:
            words[-1] += " " + word  # operator< <int>: the template arguments of an operator
        elif word:
            words.append(word)
    if not words:
        raise ValueError("no name")
    return words[-1]


def _split_top_level(text: str, separator: str) -> list[str]:
    pieces, start = [], 0
    marks = _scan(text)
    pos = 0
    depths = {p: d for p, d in marks}
    while pos < len(text):
        if depths.get(pos, 1) == 0 and text.startswith(separator, pos) and not _in_operator(text, pos):
            pieces.append(text[start:pos])
            pos += len(separator)
            start = pos
        else:
            pos += 1
    pieces.append(text[start:])
    return pieces


def _components(name: str) -> list[str]:
    return [component for component in _split_top_level(name, "::") if component]


def _is_local(component: str) -> bool:
    """A lambda or unnamed type (``{lambda(int)#1}``, ``{unnamed type#1}``): named only by where it is."""
    return component.startswith("{")


def _bare(component: str) -> str:
    """``name<args>(params)`` -> ``name``: what lies outside every bracket of one name component."""
    return "".join(text for kind, text in _top_level_parts(component) if kind == "name").strip()
