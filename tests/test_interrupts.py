"""Ctrl-C during profile(): it reaches the user's code at once, never our setup or teardown half-way.

SIGINT is raised with ``signal.raise_signal``, as a terminal's Ctrl-C is: the handler in place
decides, so these tests exercise what a user's Ctrl-C does (``tests/test_restoration.py`` raises
KeyboardInterrupt from the model itself).
"""

from __future__ import annotations

import random
import signal
import sys
import threading
import time

import pytest
import torch
from test_restoration import global_state, module_state
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, interrupts
from aitune_dispatch.capture import _process_lock
from aitune_dispatch.tracing import samples
from aitune_dispatch.tracing.unseen import unseen

pytestmark = pytest.mark.skipif(
    signal.getsignal(signal.SIGINT) is not signal.default_int_handler, reason="needs Python's own SIGINT handler"
)


def assert_nothing_left(model: nn.Module, before: tuple, context: object = None) -> None:
    """Hooks, modes, gates, the module's attributes, the process lock and SIGINT's handler as before."""
    assert (global_state(), module_state(model)) == before, context
    assert torch._C._len_torch_function_stack() == 0 and not _process_lock.locked(), context
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, context

def test_sigint_is_held_in_our_code_and_delivered_in_the_users():
    order = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts.held():
            signal.raise_signal(signal.SIGINT)  # in our code: noted, not raised
            order.append("held")
            with pytest.raises(KeyboardInterrupt):
                with interrupts.delivered():  # the user's code: the noted one is raised on entry
                    order.append("never")
            order.append("delivered")
            with interrupts.delivered():
                order.append("user")
            signal.raise_signal(signal.SIGINT)
            order.append("cleanup")
    # raised at the end of the held block, after its own code ran
    assert order == ["held", "delivered", "user", "cleanup"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_off_the_main_thread_both_are_no_ops():
    seen = []

    def worker() -> None:
        with interrupts.held(), interrupts.delivered():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [signal.default_int_handler]


@pytest.mark.parametrize("phase", ["warmup", "pass", "decode", "join"])
def test_ctrl_c_while_our_code_runs_leaves_nothing_installed(cpu_profiler, phase):
    model = nn.Sequential(nn.Linear(8, 8), nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)).eval()
    x = torch.randn(2, 3, 8)
    before = global_state(), module_state(model)
    reached = []

    def on_progress(step) -> None:  # noqa: ANN001  (capture.Step): called from our own code
        if step.phase == phase and step.done == 0 and not reached:
            reached.append(step.phase)
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        cpu_profiler.profile_result(model, [((x,), {})] * 2, warmup_iterations=1, on_progress=on_progress)
    assert reached == [phase]
    assert_nothing_left(model, before)
    profiling_df, _ = cpu_profiler.profile(model, [((x,), {})], warmup_iterations=0)  # and the next one works
    assert "linear" in set(profiling_df["function_name"])


def test_ctrl_c_inside_the_users_function_is_raised_there(cpu_profiler):
    model = nn.Linear(4, 4)
    caught = []

    def function(x: torch.Tensor) -> torch.Tensor:
        try:
            signal.raise_signal(signal.SIGINT)
            time.sleep(0)  # the handler runs at the next bytecode
        except KeyboardInterrupt:
            caught.append("in the function")
        return model(x)

    cpu_profiler.profile(function, [((torch.randn(2, 4),), {})], module=model, warmup_iterations=1)
    assert caught == ["in the function", "in the function"]  # the warm-up call and the recorded one


def test_ctrl_c_at_random_moments_never_leaves_the_profiler_installed(tracing_backend):
    model = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    samples = [((x,), {})] * 20
    before = global_state(), module_state(model)
    ModuleFunctionKernelProfiler(device="cpu").profile(model, samples, warmup_iterations=1)  # cold
    took = []
    for _ in range(3):  # alarms spread over a warm run's length, however slow the first one was
        start = time.perf_counter()
        ModuleFunctionKernelProfiler(device="cpu").profile(model, samples, warmup_iterations=1)
        took.append(time.perf_counter() - start)
    took = sorted(took)[1]
    previous = signal.signal(signal.SIGALRM, lambda *_: signal.raise_signal(signal.SIGINT))  # a Ctrl-C
    rng = random.Random(0)
    interrupted = 0
    try:
        for attempt in range(40):
            # the first alarm lands early in a pass, so at least one profile() is interrupted
            signal.setitimer(signal.ITIMER_REAL, 1e-4 if attempt == 0 else rng.uniform(1e-4, took))
            try:
                ModuleFunctionKernelProfiler(device="cpu").profile(model, samples, warmup_iterations=1)
                signal.setitimer(signal.ITIMER_REAL, 0)
            except KeyboardInterrupt:
                interrupted += 1
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            assert_nothing_left(model, before)
    except KeyboardInterrupt:
        pass  # an alarm that fired after its profile() returned, between two asserts
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert_nothing_left(model, before)
    assert interrupted > 0


def _profile_with_sigint_at(
    event_index: int | None, model: nn.Module, x: torch.Tensor, where: str = ""
) -> tuple[int, bool]:
    """One profile() with SIGINT raised at its ``event_index``-th traced line (None: count them),
    counting the lines of files whose path ends with ``where`` only."""
    seen = 0
    fired = False

    def trace(frame, event, arg):  # noqa: ANN001, ANN202
        nonlocal seen, fired
        if event == "line" and frame.f_code.co_filename.endswith(where):
            seen += 1
            if seen == event_index and not fired:
                fired = True
                signal.raise_signal(signal.SIGINT)  # a Ctrl-C arriving at this line
        return trace

    profiler = ModuleFunctionKernelProfiler(device="cpu")
    interrupted = False
    sys.settrace(trace)
    try:
        profiler.profile(model, [((x,), {})], warmup_iterations=1)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        sys.settrace(None)
    return seen, interrupted


def test_ctrl_c_at_any_line_of_profile_leaves_nothing_installed(tracing_backend):
    model = nn.Sequential(nn.Linear(16, 16), nn.TransformerEncoderLayer(16, 4, 32, batch_first=True)).eval()
    x = torch.randn(2, 5, 16)
    before = global_state(), module_state(model)
    lines, _ = _profile_with_sigint_at(None, model, x)
    step = max(1, lines // 400)
    interrupted = 0
    for index in range(1, lines + 1, step):
        _, was = _profile_with_sigint_at(index, model, x)
        interrupted += was
        assert_nothing_left(model, before, index)
    assert interrupted > 0
    profiling_df, _ = ModuleFunctionKernelProfiler(device="cpu").profile(model, [((x,), {})], warmup_iterations=0)
    assert "linear" in set(profiling_df["function_name"])


@pytest.mark.single_backend
def test_ctrl_c_at_any_line_of_our_code_run_unseen_leaves_torch_functions_enabled():
    # our code inside the user's (sample keys) runs under DisableTorchFunction; a Ctrl-C on the line
    # event between its block and its __exit__ skipped the exit and left every mode unseen afterwards.
    # The Python tracer keys every sample in Python (the native one only values of types it does not know)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
    x = torch.randn(2, 16)
    ours = {unseen.__code__, samples._pair_key.__code__, samples.sample_pair_key.__code__}
    events = 0
    for target in range(1, 60):
        seen = 0

        def trace(frame, event, arg, target=target):  # noqa: ANN001, ANN202
            nonlocal seen
            if event == "line" and frame.f_code in ours:
                seen += 1
                if seen == target:
                    signal.raise_signal(signal.SIGINT)
            return trace

        before = global_state(), module_state(model)
        sys.settrace(trace)
        try:
            ModuleFunctionKernelProfiler(device="cpu", op_tracer="python").profile(
                model, [((x,), {})], warmup_iterations=0
            )
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        assert_nothing_left(model, before, target)
        assert torch._C._is_torch_function_enabled(), target
        if seen < target:  # every line of ours had its Ctrl-C
            break
        events += 1
    assert events > 3  # the lines of unseen() and of the keyer were reached
    profiling_df, _ = ModuleFunctionKernelProfiler(device="cpu", op_tracer="python").profile(model, [((x,), {})])
    assert {"linear", "relu"} <= set(profiling_df["function_name"])


def test_ctrl_c_at_every_line_of_the_fast_path_gate_leaves_the_mode_stack_whole(tracing_backend):
    # the gates run inside the user's forward (where Ctrl-C is delivered) and take our mode off the
    # stack and put it back: a critical section, or a Ctrl-C there tears the stack
    model = nn.Sequential(nn.Linear(16, 16), nn.TransformerEncoderLayer(16, 4, 32, batch_first=True)).eval()
    x = torch.randn(2, 5, 16)
    before = global_state(), module_state(model)
    where = "aitune_dispatch/tracing/gates.py"
    lines, _ = _profile_with_sigint_at(None, model, x, where)
    assert lines > 0
    for index in range(1, lines + 1):
        _, interrupted = _profile_with_sigint_at(index, model, x, where)
        assert interrupted, index  # delivered in the user's forward, once the stack is whole
        assert_nothing_left(model, before, index)


def test_a_sigint_handler_the_users_code_installs_during_the_pass_is_kept(cpu_profiler):
    model = nn.Linear(4, 4)
    received = []

    def mine(signum: int, frame: object) -> None:
        received.append(signum)

    def function(x: torch.Tensor) -> torch.Tensor:
        signal.signal(signal.SIGINT, mine)  # as the user's code may, with or without the profiler
        return model(x)

    try:
        cpu_profiler.profile(function, [((torch.randn(2, 4),), {})], module=model, warmup_iterations=1)
        assert signal.getsignal(signal.SIGINT) is mine  # as bare: only our handler was removed
        signal.raise_signal(signal.SIGINT)
        assert received == [signal.SIGINT]
        assert torch._C._len_torch_function_stack() == 0 and not _process_lock.locked()
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_a_users_handler_chaining_to_ours_after_the_block_reaches_the_original():
    chained = []

    def mine(signum: int, frame: object) -> None:
        chained.append(signum)
        previous(signum, frame)  # a handler that calls the one it replaced: ours, once the block ends

    try:
        with interrupts.held():
            with interrupts.delivered():
                previous = signal.signal(signal.SIGINT, mine)
        assert signal.getsignal(signal.SIGINT) is mine
        with pytest.raises(KeyboardInterrupt):  # not swallowed as a signal held for a block long gone
            signal.raise_signal(signal.SIGINT)
        assert chained == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
