"""ImportWatch: a callback once a watched module has loaded, nothing of ours left on the module or sys.meta_path."""

from __future__ import annotations

import sys

import pytest

from aitune_dispatch.tracing.import_watch import ImportWatch

pytestmark = pytest.mark.single_backend  # imports only; no tracing backend involved


@pytest.fixture
def package(tmp_path, monkeypatch):
    """Two fresh modules on sys.path, each recording that its code ran; forgotten afterwards."""
    for name in ("watched_a", "watched_b"):
        (tmp_path / f"{name}.py").write_text("import sys\nsys.modules[__name__].ran = True\nVALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("watched_a", "watched_b"):
        sys.modules.pop(name, None)


def test_a_module_imported_while_watched_gets_its_callback_after_its_code_ran(package):
    seen = []
    meta_path = list(sys.meta_path)
    with ImportWatch({"watched_a": lambda m: seen.append((m.__name__, m.ran, m.VALUE))}) as watch:
        assert sys.meta_path[0] is not meta_path[0]  # the finder is first while something is pending
        import watched_a  # noqa: F401
        assert seen == [("watched_a", True, 1)]
        assert sys.meta_path == meta_path  # nothing left to watch: the finder is gone already
    module = sys.modules["watched_a"]
    assert type(module.__loader__).__module__ != "aitune_dispatch.tracing.import_watch"
    assert module.__spec__.loader is module.__loader__ and watch.errors == []


def test_a_module_already_loaded_gets_its_callback_at_once_and_a_missing_one_none(package):
    import watched_a  # noqa: F401

    seen = []
    meta_path = list(sys.meta_path)
    with ImportWatch({"watched_a": lambda m: seen.append(m.__name__), "watched_b": seen.append}):
        assert seen == ["watched_a"]
    assert sys.meta_path == meta_path  # removed on exit, watched_b never imported
    import watched_b  # noqa: F401 - after the watch: no callback

    assert seen == ["watched_a"]


def test_a_failing_callback_never_fails_the_import_and_is_recorded(package):
    def fails(module):
        raise KeyError("ours")

    with ImportWatch({"watched_a": fails}) as watch:
        import watched_a

        assert watched_a.VALUE == 1
    assert watch.errors == ["watched_a: KeyError: 'ours'"]


def test_the_finder_is_removed_on_an_exception(package):
    meta_path = list(sys.meta_path)
    with pytest.raises(RuntimeError), ImportWatch({"watched_b": lambda m: None}):
        raise RuntimeError("the profiled function failed")
    assert sys.meta_path == meta_path
