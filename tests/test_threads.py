"""Threads: the profiled function's own worker threads are reported, other threads stay out.

``profile()`` records functional calls and aten ops on the thread that calls it (modes and the
native tracer's callback are thread-local). Module forwards on a thread the profiled function
started (in a warm-up pass too) are recorded, and a warning names the thread and says what was not
recorded; forwards on threads that were already running when profile() began never enter the
result. Both op tracers.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler
from aitune_dispatch.tracing.buffers import still_running


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()  # 3 forwards per call: root and 2 children


def _profiler(op_tracer: str) -> ModuleFunctionKernelProfiler:
    return ModuleFunctionKernelProfiler(device="cpu", op_tracer=op_tracer)


def _on_a_new_thread(model: nn.Module, x: torch.Tensor, name: str) -> None:
    """Run ``model(x)`` on a thread of that name, started here, and wait for it."""
    worker = threading.Thread(target=model, args=(x,), name=name)
    worker.start()
    worker.join()


def test_a_worker_thread_of_the_profiled_function_is_named_in_a_warning(op_tracer):
    model = _model()

    def pipeline(x: torch.Tensor) -> None:
        model(x)  # on the profiling thread: attributed
        _on_a_new_thread(model, x, "worker-7")

    profiler = _profiler(op_tracer)
    with pytest.warns(RuntimeWarning, match=r"3 forward\(s\) of the profiled modules ran on thread\(s\) 'worker-7'"):
        profiling_df, _ = profiler.profile(pipeline, [((torch.randn(2, 4),), {})], module=model, warmup_iterations=0)
    result = profiler.last_result
    assert any("'worker-7'" in message and "not recorded" in message for message in result.warnings)
    # the worker's forwards are in the trace (3), on their own thread; its ops are not
    threads = result.module_calls.column("thread").to_pylist()
    assert sorted(threads) == [0, 0, 0, 1, 1, 1]
    assert set(result.ops.column("thread").to_pylist()) == {0}
    assert sorted(profiling_df["function_name"]) == ["linear", "linear", "relu"]  # t + addmm, relu


def test_only_worker_forwards_is_not_a_silent_empty_table(op_tracer):
    model = _model()

    def pipeline(x: torch.Tensor) -> None:
        _on_a_new_thread(model, x, "only-worker")

    profiler = _profiler(op_tracer)
    with pytest.warns(RuntimeWarning, match="'only-worker'") as record:
        profiling_df, _ = profiler.profile(pipeline, [((torch.randn(2, 4),), {})], module=model, warmup_iterations=0)
    assert profiling_df.empty and len(profiler.last_result.module_calls) == 3
    assert not any("never ran" in str(w.message) for w in record)  # it ran, on the worker


def test_a_worker_started_in_a_warm_up_pass_is_the_profiled_functions(op_tracer):
    # a pipeline that creates its pool lazily: the pool's thread starts in the first warm-up pass and
    # serves the recorded pass; the profiled function started it, so it is not a foreign thread
    model = _model()
    pools: list[ThreadPoolExecutor] = []

    def pipeline(x: torch.Tensor) -> None:
        if not pools:
            pools.append(ThreadPoolExecutor(1, thread_name_prefix="lazy"))
        pools[0].submit(model, x).result()

    profiler = _profiler(op_tracer)
    try:
        with pytest.warns(RuntimeWarning) as record:
            profiler.profile(pipeline, [((torch.randn(2, 4),), {})], module=model, warmup_iterations=2)
    finally:
        pools[0].shutdown()
    messages = [str(w.message) for w in record]
    assert any("ran on thread(s) 'lazy_0', started by the profiled function" in m for m in messages), messages
    assert not any("already running" in m or "never ran" in m for m in messages), messages
    assert profiler.last_result.module_calls.column("thread").to_pylist() == [1, 1, 1]  # its 3 forwards


def test_threads_of_one_name_are_named_once(op_tracer):
    model = _model()

    def pipeline(x: torch.Tensor) -> None:
        _on_a_new_thread(model, x, "per-call")

    profiler = _profiler(op_tracer)
    samples = [((torch.randn(2, 4),), {})] * 3  # a new thread of the same name per call
    message = r"9 forward\(s\) of the profiled modules ran on thread\(s\) 'per-call', started"
    with pytest.warns(RuntimeWarning, match=message):
        profiler.profile(pipeline, samples, module=model, warmup_iterations=0)
    assert sorted(set(profiler.last_result.module_calls.column("thread").to_pylist())) == [1, 2, 3]


def test_an_ident_reused_by_a_new_thread_is_not_a_thread_that_was_running():
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        assert still_running({thread.ident: thread}) == {thread.ident: thread}
        assert still_running({thread.ident: None}) == {thread.ident: thread}  # no Thread object then
        assert still_running({thread.ident: threading.Thread()}) == {}  # its ident, another thread's before
    finally:
        release.set()
        thread.join()
    assert still_running({thread.ident: thread}) == {}  # ended


class _Background:
    """A thread started before profile(); runs ``model`` once each time it is told to."""

    def __init__(self, model: nn.Module) -> None:
        self.go, self.done, self.stop = threading.Event(), threading.Event(), False
        self.model = model
        self.thread = threading.Thread(target=self._loop, name="background")
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self.go.wait()
            self.go.clear()
            if self.stop:
                return
            self.model(torch.randn(2, 4))
            self.done.set()

    def run_once(self) -> None:
        self.done.clear()
        self.go.set()
        assert self.done.wait(10)

    def close(self) -> None:
        self.stop = True
        self.go.set()
        self.thread.join()


def test_forwards_of_threads_running_before_the_pass_stay_out(op_tracer):
    model = _model()
    background = _Background(model)

    def pipeline(x: torch.Tensor) -> None:
        model(x)
        background.run_once()  # the same modules, on another thread, during the recorded pass

    try:
        profiler = _profiler(op_tracer)
        with pytest.warns(RuntimeWarning, match=r"3 forward\(s\).*'background', which were already running"):
            profiling_df, _ = profiler.profile(pipeline, [((torch.randn(2, 4),), {})], module=model)
    finally:
        background.close()
    result = profiler.last_result
    # one pass of the profiling thread: root and 2 children, nothing from the background thread
    assert result.module_calls.column("thread").to_pylist() == [0, 0, 0]
    assert set(result.ops.column("thread").to_pylist()) == {0}
    assert len(profiling_df) == 3  # t, addmm, relu


def test_a_thread_pool_started_before_the_pass_is_not_silent(op_tracer):
    model = _model()
    with ThreadPoolExecutor(1, thread_name_prefix="pool") as pool:
        pool.submit(lambda: None).result()  # its thread runs before profile()
        profiler = _profiler(op_tracer)
        with pytest.warns(RuntimeWarning) as record:
            profiling_df, _ = profiler.profile(
                lambda x: pool.submit(model, x).result(), [((torch.randn(2, 4),), {})], module=model
            )
    messages = [str(w.message) for w in record]
    assert any("'pool_0', which were already running" in m for m in messages), messages
    # the module did run, on the pool's thread: no "never ran, pass another module=" beside it
    assert not any("never ran" in m for m in messages), messages
    assert profiling_df.empty and len(profiler.last_result.module_calls) == 0


def test_each_thread_of_the_trace_carries_its_os_thread_id(op_tracer):
    # ThreadInfo.native_id is what threading.get_native_id() says on that thread (the id CUPTI's API
    # records carry): on the profiling thread, a worker the profiled function starts, and a thread that
    # was already running (untraced, but it reported a forward)
    from aitune_dispatch.collection.cpu import CpuOpTimer
    from aitune_dispatch.tracing import ModuleTracker, TraceSession, make_tracer

    model = _model()
    seen: dict[str, int] = {}

    def record_id_then_run(x: torch.Tensor) -> None:
        seen[threading.current_thread().name] = threading.get_native_id()
        model(x)

    background = _Background(model)
    try:
        modules = ModuleTracker(model)
        session = TraceSession(modules, make_tracer(op_tracer, modules.module_ids(), None, CpuOpTimer(), False))
        with torch.no_grad(), session:
            model(torch.randn(2, 4))
            worker = threading.Thread(target=record_id_then_run, args=(torch.randn(2, 4),), name="worker-ids")
            worker.start()
            worker.join()
            background.run_once()
    finally:
        background.close()
    threads = {thread.name: thread for thread in session.tables().threads}
    assert session.tables().threads[0].native_id == threading.get_native_id()
    assert threads["worker-ids"].traced and threads["worker-ids"].native_id == seen["worker-ids"]
    assert not threads["background"].traced
    assert threads["background"].native_id == background.thread.native_id
    assert len({thread.native_id for thread in threads.values()}) == 3
