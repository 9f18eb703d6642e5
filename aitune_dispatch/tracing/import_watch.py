"""Runs a callback once a watched module is loaded, at once or the moment the profiled code imports
it, so the compiler stack is observed without our importing it (``docs/design.md``, "torch.compile
and CUDA graphs")."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType, TracebackType
from typing import Any

AfterImport = Callable[[ModuleType], None]


class _Announcing(importlib.abc.Loader):
    """The real loader of one watched module, calling ``after(module)`` once its code has run."""

    def __init__(self, loader: Any, after: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._after = after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._after(module)

    def __getattr__(self, name: str) -> Any:  # is_package, get_code, resource readers: the real loader's
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Answers only for the watched names, with the spec the other finders give and an announcing loader."""

    def __init__(self, watch: ImportWatch) -> None:
        self._watch = watch

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._watch.pending:
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Announcing(spec.loader, self._watch.imported)
                return spec
        return None


class ImportWatch:
    """Context manager: ``callbacks[name](module)`` once module ``name`` is loaded; single-use.

    A callback that raises is recorded in :attr:`errors`: a user's import never fails because of us.

    Parameters
    ----------
    callbacks:
        ``{"torch._inductor.debug": attach, ...}``: what to run with each module.
    """

    def __init__(self, callbacks: Mapping[str, AfterImport]) -> None:
        self.pending: dict[str, AfterImport] = dict(callbacks)
        self.errors: list[str] = []
        self._finder = _Finder(self)
        # held while a callback runs and while the watch closes: a callback of another thread's
        # import never runs after exit (re-entrant: a callback may import another watched module)
        self._lock = threading.RLock()
        self._entered = False
        self._closed = False

    def __enter__(self) -> ImportWatch:
        if self._entered:
            raise RuntimeError("an ImportWatch is single-use; create a new one")
        self._entered = True
        for name in list(self.pending):
            module = sys.modules.get(name)
            if module is not None:
                self.imported(module)
        with self._lock:
            if self.pending:
                sys.meta_path.insert(0, self._finder)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with self._lock:
            self._closed = True
            self.pending.clear()
            self._unhook()

    def imported(self, module: ModuleType) -> None:
        """``module`` has been loaded: run its callback once (the finder's loader calls this)."""
        with self._lock:
            callback = None if self._closed else self.pending.pop(module.__name__, None)
            if callback is None:
                return
            try:
                callback(module)
            except Exception as error:  # noqa: BLE001 - observation must never break the user's import
                self.errors.append(f"{module.__name__}: {type(error).__name__}: {error}")
            if not self.pending:
                self._unhook()

    def _unhook(self) -> None:
        try:
            sys.meta_path.remove(self._finder)
        except ValueError:  # not (or no longer) there
            pass
