"""The activity source hands the native tracer the C functions it pushes and pops correlation ids with.

``CorrelationTarget.correlation_functions()`` gives ``(push, pop)`` addresses (CUPTI's
``cuptiActivityPush/PopExternalCorrelationId`` for the CUDA source), ``NativePass`` hands them to
``_tracer.start()``, and the C++ side calls them: the tracer links nothing of CUPTI's, so another
source brings its own. Checked on CPU with ctypes callbacks standing in for CUPTI, and with the
libcupti of the ``nvidia-cuda-cupti`` wheel loaded by hand (its push runs only where a driver is loaded).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch.tracing import ModuleTracker, TraceSession, make_tracer, native

if not native.available():
    if os.environ.get("CI"):
        native.load()  # fails with the build fix: CI must test the default tracer
    pytest.skip("native tracer not built (python setup.py build_ext --inplace)", allow_module_level=True)

pytestmark = pytest.mark.single_backend  # each test names the backends it runs

KIND = 7  # any kind >= 0: the functions below are no CUPTI, and the kind must reach them unchanged
PUSH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_uint64)
POP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64))


class HandedFunctions:
    """A correlation target whose push / pop are C callbacks keeping CUPTI's per-thread stack.

    ``log`` is in the log-pushes format (each pushed id, -1 for each pop); ``kinds`` the kinds they
    were called with; ``popped`` what each pop wrote to ``*last_id`` (the id on top).
    """

    correlation_kind = KIND

    def __init__(self) -> None:
        self.log: list[int] = []
        self.kinds: set[int] = set()
        self.stack: list[int] = []
        self.popped: list[int] = []
        self._push = PUSH(self._pushed)  # kept alive: the tracer holds only their addresses
        self._pop = POP(self._popped)

    def _pushed(self, kind: int, value: int) -> int:
        self.kinds.add(kind)
        self.log.append(value)
        self.stack.append(value)
        return 0

    def _popped(self, kind: int, last: Any) -> int:
        self.kinds.add(kind)
        self.log.append(-1)
        last[0] = self.stack.pop()
        self.popped.append(last[0])
        return 0

    def correlation_functions(self) -> tuple[int, int]:
        return ctypes.cast(self._push, ctypes.c_void_p).value, ctypes.cast(self._pop, ctypes.c_void_p).value

    # the pure-Python backend calls these instead, with the same ids
    def op_started(self, op_id: int, op: str) -> None:
        self._pushed(KIND, op_id)

    def op_finished(self, op_id: int) -> None:
        self._popped(KIND, (ctypes.c_uint64 * 1)())

    def scope_entered(self, context_id: int) -> None:
        self._pushed(KIND, native.SCOPE_BASE + context_id)

    def scope_exited(self) -> None:
        self._popped(KIND, (ctypes.c_uint64 * 1)())


class Logged:
    """A target whose native pass logs its pushes instead (``LOG_PUSHES``)."""

    correlation_kind = native.LOG_PUSHES


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.fc(x)).view(-1) + 1  # a view: recorded, never pushed


def _pass(backend: str, target: Any, net: nn.Module, x: torch.Tensor) -> TraceSession:
    modules = ModuleTracker(net)
    session = TraceSession(modules, make_tracer(backend, modules.module_ids(), None, target, False))
    with torch.no_grad(), session:
        net(x)
    return session


def test_the_native_tracer_pushes_and_pops_through_the_functions_it_was_handed():
    # what the log-pushes mode records is what the handed functions were called with, in order, under
    # the target's kind; the pops balance (each took the id on top) and the Python backend's callbacks
    # see the same sequence
    net, x = Net(), torch.randn(2, 4)
    handed = HandedFunctions()
    session = _pass("native", handed, net, x)
    logged = _pass("native", Logged(), net, x).tracer.push_log()
    assert handed.log == logged
    assert handed.kinds == {KIND}
    assert handed.stack == [] and len(handed.popped) == handed.log.count(-1) > 0
    tables = session.tables()
    scopes = [pushed for pushed in handed.log if pushed >= native.SCOPE_BASE]
    assert len(scopes) == tables.scopes_pushed == tables.contexts.num_rows
    assert len(handed.log) - len(scopes) - handed.log.count(-1) == tables.ops_pushed > 0
    assert session.tracer.push_log() == []  # nothing logged: the ids went to the handed functions
    python = HandedFunctions()
    _pass("python", python, net, x)
    assert python.log == handed.log


def _start_keywords(**changes: object) -> dict[str, object]:
    keywords = native.NativePass.stacks_only([]).keywords()
    keywords.update(changes)
    return keywords


def test_a_pass_that_pushes_without_push_and_pop_is_refused():
    tracer = native.load()
    push, pop = HandedFunctions().correlation_functions()
    # the C++ side refuses by keyword, naming what is missing
    with pytest.raises(ValueError, match="correlation_kind=3 pushes ids, so correlation_push must be the address"):
        tracer.start(**_start_keywords(correlation_kind=3))
    with pytest.raises(ValueError, match="correlation_pop must be the address"):
        tracer.start(**_start_keywords(correlation_kind=3, correlation_push=push))
    with pytest.raises(ValueError, match="correlation_push is for a pass that pushes"):
        tracer.start(**_start_keywords(correlation_push=push, correlation_pop=pop))
    with pytest.raises(TypeError, match="missing the keyword argument correlation_pop"):
        tracer.start(**{k: v for k, v in _start_keywords().items() if k != "correlation_pop"})
    assert not tracer.running()
    # NativePass refuses before it reaches C++
    with pytest.raises(ValueError, match="correlation_kind=3 pushes ids, so correlation_push must be the address"):
        native.NativePass(**_start_keywords(correlation_kind=3))
    # and a target that correlates but hands nothing fails its pass's start, leaving nothing installed

    class HandsNothing:
        correlation_kind = KIND

        def correlation_functions(self) -> None:
            return None

    with pytest.raises(ValueError, match="correlation_push must be the address"):
        _pass("native", HandsNothing(), Net(), torch.randn(2, 4))
    assert not tracer.running() and not torch._C._len_torch_function_stack()


def _wheel_libcupti() -> str | None:
    """The CUPTI wheel's libcupti of torch's CUDA major (of any supported major for a CPU torch)."""
    from aitune_dispatch.collection import libcupti

    return next(filter(None, (libcupti.wheel_libcupti(m) for m in libcupti.candidate_majors())), None)


def test_the_cupti_source_hands_over_the_libcupti_already_loaded():
    # in a fresh interpreter (a libcupti loaded here stays loaded): none loaded, the source refuses;
    # once one is, it hands that copy's push and pop (RTLD_NOLOAD: no second copy is mapped) and a
    # native pass pushes into it where a driver is loaded (CUPTI needs one: without it the source refuses)
    try:
        path = _wheel_libcupti()
    except ImportError:
        path = None
    if path is None:
        pytest.skip("no CUPTI wheel (nvidia-cuda-cupti, nvidia-cuda-cupti-cu12) here")
    script = textwrap.dedent(
        f"""
        import ctypes, types
        import torch
        from torch import nn
        from aitune_dispatch.collection import cupti_source
        from aitune_dispatch.tracing import ModuleTracker, TraceSession, make_tracer

        def mapped():
            return {{line.split()[-1] for line in open("/proc/self/maps") if "libcupti" in line}}

        if not mapped():  # torch with CUDA may have loaded one already
            try:
                cupti_source.libcupti_correlation_functions()
            except RuntimeError as error:
                assert "is loaded in this process" in str(error), error
            else:
                raise AssertionError("resolved a libcupti that is not loaded")
            library = ctypes.CDLL({str(path)!r})
        else:
            from aitune_dispatch.collection import libcupti
            library = ctypes.CDLL(libcupti.loaded_libcupti())
        before = mapped()
        address = lambda name: ctypes.cast(getattr(library, name), ctypes.c_void_p).value
        expected = (address("cuptiActivityPushExternalCorrelationId"), address("cuptiActivityPopExternalCorrelationId"))
        fake = types.SimpleNamespace(
            ExternalCorrelationKind=types.SimpleNamespace(CUSTOM2=1),
            activity_push_external_correlation_id=None,
            activity_pop_external_correlation_id=None,
        )
        assert cupti_source.libcupti_correlation_functions() == expected
        source = cupti_source.CuptiSource(sink=None, cupti=fake)
        if not cupti_source.cuda_driver_loaded():
            # without a driver libcupti 13.2 overflows its stack in every call: the source refuses to hand them
            try:
                source.correlation_functions()
            except RuntimeError as error:
                assert "no CUDA driver" in str(error), error
            else:
                raise AssertionError("handed libcupti's push and pop over without a driver")
            assert mapped() == before and len(before) == 1, (before, mapped())
            print("ok")
            raise SystemExit(0)
        assert source.correlation_functions() == expected, (source.correlation_functions(), expected)
        net = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        modules = ModuleTracker(net)
        session = TraceSession(modules, make_tracer("native", modules.module_ids(), None, source, False))
        with torch.no_grad(), session:
            net(torch.randn(2, 4))
        tables = session.tables()
        # 3 forwards and 2 functional calls pushed their scopes, the ops theirs
        assert tables.ops_pushed > 0 and tables.scopes_pushed == tables.contexts.num_rows == 5, tables
        assert mapped() == before and len(before) == 1, (before, mapped())
        print("ok")
        """
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr
