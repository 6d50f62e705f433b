"""The SeqLock contract, one behaviour per test.

Each test is named after the behaviour it checks; together they read as
the specification of ``seqlock_py.SeqLock``.
"""
from __future__ import annotations

import _thread
import gc
import inspect
import os
import signal
import threading
import time

import pytest

from conftest import (
    held_by_another_thread,
    in_thread,
    run_in_fresh_interpreter,
    run_threads,
)
from common_lock_tests import WriteLockTests
from seqlock_py import SeqLock

#: "Returns promptly": generous, because the machine is noisy.
PROMPT = 5.0


def write_in_another_thread(lock, fn=lambda: None):
    """Run one complete write section in another thread and wait for it."""

    def writer():
        with lock:
            fn()

    in_thread(writer)


# ---- construction ---------------------------------------------------------


@pytest.mark.parametrize(
    "args, kwargs", [((1,), {}), ((None,), {}), ((), {"x": 1})]
)
def test_seqlock_takes_no_positional_or_unknown_arguments(args, kwargs):
    with pytest.raises(TypeError):
        SeqLock(*args, **kwargs)


# ---- the write lock (shared with SeqRecord: tests/common_lock_tests.py) --


class TestWriteLock(WriteLockTests):
    """A SeqLock's write lock: ``with lock:``, ``with lock.write():`` and
    ``with lock.write(timeout):`` each open a write section, binding the
    lock itself."""

    def make(self):
        return SeqLock()

    def sections(self, lock):
        return [lambda: lock, lock.write, lambda: lock.write(timeout=1)]

    def binds(self, lock, target):
        return target is lock


# ---- acquire_write / release_write ----------------------------------------


def test_acquire_write_returns_true_and_release_write_releases(lock):
    assert lock.acquire_write() is True
    assert lock.locked() and lock.sequence == 1
    assert lock.release_write() is None
    assert not lock.locked() and lock.sequence == 2


def test_acquire_write_non_blocking_returns_true_when_the_lock_is_free(lock):
    assert lock.acquire_write(blocking=False) is True
    lock.release_write()


def test_acquire_write_non_blocking_returns_false_while_another_thread_writes(lock):
    with held_by_another_thread(lock):
        assert lock.acquire_write(blocking=False) is False
        assert lock.acquire_write(False) is False
        assert lock.sequence == 1


def test_acquire_write_with_a_timeout_returns_false_while_another_thread_writes(lock):
    with held_by_another_thread(lock):
        start = time.monotonic()
        assert lock.acquire_write(timeout=0.05) is False
        assert time.monotonic() - start < PROMPT
        assert lock.acquire_write(True, 0) is False
        assert lock.sequence == 1
    assert lock.sequence == 2


def test_acquire_write_waits_until_the_other_writer_finishes(lock):
    results = []

    def acquire():
        results.append(lock.acquire_write(timeout=PROMPT * 4))
        lock.release_write()

    with held_by_another_thread(lock):
        waiter = threading.Thread(target=acquire)
        waiter.start()
        time.sleep(0.1)
        assert waiter.is_alive(), "the second writer did not wait"
    waiter.join(PROMPT)
    assert results == [True]
    assert lock.sequence == 4


@pytest.mark.parametrize("timeout", [0, 0.5, 10])
def test_acquire_write_non_blocking_with_a_timeout_raises_value_error(lock, timeout):
    with pytest.raises(ValueError):
        lock.acquire_write(blocking=False, timeout=timeout)
    assert not lock.locked()


def test_acquire_write_non_blocking_accepts_timeout_minus_one(lock):
    assert lock.acquire_write(blocking=False, timeout=-1) is True
    lock.release_write()


@pytest.mark.parametrize("timeout", [-0.5, -2, -1.0001])
def test_acquire_write_negative_timeout_other_than_minus_one_raises_value_error(
    lock, timeout
):
    with pytest.raises(ValueError, match="timeout value must be positive"):
        lock.acquire_write(timeout=timeout)
    assert not lock.locked()


@pytest.mark.parametrize(
    "timeout", [float("inf"), 1e300, 10.0 * threading.TIMEOUT_MAX, 10**400]
)
def test_acquire_write_too_large_timeout_raises_overflow_error(lock, timeout):
    with pytest.raises(OverflowError):
        lock.acquire_write(timeout=timeout)
    assert not lock.locked()


def test_acquire_write_nan_timeout_raises_value_error(lock):
    with pytest.raises(ValueError):
        lock.acquire_write(timeout=float("nan"))


def test_acquire_write_non_number_timeout_raises_type_error(lock):
    with pytest.raises(TypeError):
        lock.acquire_write(timeout="1")


# ---- misuse ---------------------------------------------------------------


@pytest.mark.parametrize(
    "nested",
    [
        lambda lock: lock.acquire_write(),
        lambda lock: lock.acquire_write(blocking=False),
        lambda lock: lock.acquire_write(timeout=0.05),
        lambda lock: lock.write(timeout=0.05).__enter__(),
        lambda lock: lock.write().__enter__(),
    ],
    ids=["blocking", "non-blocking", "timeout", "write-timeout", "write"],
)
def test_nested_write_from_the_owning_thread_raises_runtime_error(lock, nested):
    assert lock.acquire_write()
    try:
        with pytest.raises(RuntimeError):
            nested(lock)
        assert lock.locked() and lock.sequence == 1
    finally:
        lock.release_write()
    assert lock.sequence == 2


def test_read_from_the_thread_holding_the_write_lock_raises_runtime_error(lock):
    calls = []
    with lock:
        with pytest.raises(RuntimeError):
            lock.read(calls.append, 1)
    assert calls == []


def test_read_begin_from_the_thread_holding_the_write_lock_raises_runtime_error(lock):
    with lock:
        with pytest.raises(RuntimeError):
            lock.read_begin()


def test_release_write_of_an_unlocked_lock_raises_runtime_error(lock):
    with pytest.raises(RuntimeError):
        lock.release_write()
    assert lock.sequence == 0


def test_release_write_by_a_thread_that_does_not_hold_it_raises_runtime_error(lock):
    with held_by_another_thread(lock):
        with pytest.raises(RuntimeError):
            lock.release_write()
        assert lock.locked() and lock.sequence == 1
    assert lock.sequence == 2


def test_exit_by_a_thread_that_does_not_hold_it_raises_runtime_error(lock):
    with held_by_another_thread(lock):
        with pytest.raises(RuntimeError):
            lock.__exit__(None, None, None)
        assert lock.locked()


@pytest.mark.parametrize("fn", [None, 1, "f", object()])
def test_read_with_a_non_callable_fn_raises_type_error(lock, fn):
    with pytest.raises(TypeError):
        lock.read(fn)


def test_read_without_fn_raises_type_error(lock):
    with pytest.raises(TypeError):
        lock.read()


@pytest.mark.parametrize(
    "name",
    [
        "acquire_write",
        "release_write",
        "write",
        "read",
        "read_begin",
        "read_retry",
        "locked",
        "__enter__",
        "__exit__",
        "__reduce__",
    ],
)
def test_inspect_signature_works_on_every_method(lock, name):
    assert inspect.signature(getattr(SeqLock, name)).parameters
    inspect.signature(getattr(lock, name))


def test_inspect_signature_shows_the_documented_parameters():
    sig = lambda name: str(inspect.signature(getattr(SeqLock, name)))
    assert sig("acquire_write") == "(self, /, blocking=True, timeout=-1)"
    assert sig("write") == "(self, /, timeout=None)"
    assert sig("read") == "(self, fn, /, *args, **kwargs)"
    assert sig("read_retry") == "(self, seq, /)"
    assert str(inspect.signature(SeqLock)) == "(*, max_retries=16)"


def test_inspect_signature_works_on_the_write_context(lock):
    section = lock.write()
    inspect.signature(section.__enter__)
    inspect.signature(section.__exit__)


# ---- read(fn) -------------------------------------------------------------


def test_read_returns_the_result_of_fn(lock):
    marker = object()
    assert lock.read(lambda: marker) is marker


def test_read_passes_positional_and_keyword_arguments_to_fn(lock):
    def fn(*args, **kwargs):
        return args, kwargs

    # fn is positional-only, so even a keyword called "fn" goes to fn.
    assert lock.read(fn, 1, 2, a=3, fn=4) == ((1, 2), {"a": 3, "fn": 4})


def test_read_calls_fn_once_when_no_write_overlaps(lock):
    calls = []
    assert lock.read(lambda: calls.append(None) or len(calls)) == 1
    assert len(calls) == 1


def test_read_retries_when_a_write_overlapped_and_returns_the_clean_result(lock):
    state = {"value": "old"}
    calls = []

    def fn():
        calls.append(None)
        seen = state["value"]
        if len(calls) == 1:
            write_in_another_thread(lock, lambda: state.update(value="new"))
        return seen

    assert lock.read(fn) == "new"
    assert len(calls) == 2


def test_read_retries_an_exception_raised_during_an_overlapping_write(lock):
    calls = []

    def fn():
        calls.append(None)
        if len(calls) == 1:
            write_in_another_thread(lock)
            raise IndexError("torn data")
        return "clean"

    assert lock.read(fn) == "clean"
    assert len(calls) == 2


def test_read_propagates_an_exception_when_no_write_overlapped(lock):
    calls = []

    def fn():
        calls.append(None)
        raise IndexError("a real bug")

    with pytest.raises(IndexError, match="a real bug"):
        lock.read(fn)
    assert len(calls) == 1


class CustomBaseException(BaseException):
    pass


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit, CustomBaseException])
def test_keyboard_interrupt_is_never_retried(lock, exc_type):
    calls = []

    def fn():
        calls.append(None)
        write_in_another_thread(lock)  # the run overlapped a write...
        raise exc_type()  # ...but a BaseException still propagates

    with pytest.raises(exc_type):
        lock.read(fn)
    assert len(calls) == 1


def test_read_waits_for_an_active_writer_before_calling_fn(lock):
    calls = []

    def fn():
        calls.append(lock.sequence)
        return lock.sequence

    results = []
    with held_by_another_thread(lock):
        reader = threading.Thread(target=lambda: results.append(lock.read(fn)))
        reader.start()
        time.sleep(0.1)
        assert reader.is_alive() and calls == [], "read did not wait for the writer"
    reader.join(PROMPT)
    assert results == [2] and calls == [2]


# ---- read_begin / read_retry ----------------------------------------------


def test_read_begin_returns_the_current_even_sequence(lock):
    assert lock.read_begin() == 0
    with lock:
        pass
    seq = lock.read_begin()
    assert isinstance(seq, int) and seq == lock.sequence == 2


def test_read_retry_is_false_when_no_write_happened_since_read_begin(lock):
    seq = lock.read_begin()
    assert lock.read_retry(seq) is False


def test_read_retry_is_true_after_a_write_completed_since_read_begin(lock):
    seq = lock.read_begin()
    write_in_another_thread(lock)
    assert lock.read_retry(seq) is True


def test_read_retry_is_true_while_a_write_is_in_progress(lock):
    seq = lock.read_begin()
    with held_by_another_thread(lock):
        assert lock.read_retry(seq) is True


def test_read_begin_waits_until_the_writer_finishes(lock):
    results = []
    with held_by_another_thread(lock):
        reader = threading.Thread(target=lambda: results.append(lock.read_begin()))
        reader.start()
        time.sleep(0.1)
        assert reader.is_alive(), "read_begin did not wait for the writer"
    reader.join(PROMPT)
    assert results == [2]


@pytest.mark.parametrize("seq", [0.0, "0", None, b"0"])
def test_read_retry_rejects_a_non_int_with_type_error(lock, seq):
    with pytest.raises(TypeError):
        lock.read_retry(seq)


@pytest.mark.parametrize("seq", [0.0, "0", None])
def test_read_retry_type_error_names_the_method_and_the_type_given(lock, seq):
    """As CPython's own methods do: "read_retry() argument 'seq' must be
    int, not str" (every call taking a sequence number says it so)."""
    with pytest.raises(TypeError, match=rf"^read_retry\(\) argument 'seq' must be int, not {type(seq).__name__}$"):
        lock.read_retry(seq)


@pytest.mark.parametrize("seq", [-1, -(2**40)])
def test_read_retry_rejects_a_negative_value_with_value_error(lock, seq):
    with pytest.raises(ValueError, match="0 or more"):
        lock.read_retry(seq)


@pytest.mark.parametrize("seq", [2**64, 2**200])
def test_read_retry_rejects_a_value_of_2_to_the_64_or_more_with_overflow_error(lock, seq):
    with pytest.raises(OverflowError, match=r"below 2\*\*64"):
        lock.read_retry(seq)


def test_read_retry_accepts_every_64_bit_value(lock):
    assert lock.read_retry(0) is False
    assert lock.read_retry(2**32) is True
    assert lock.read_retry(2**64 - 1) is True


# ---- waiting releases the GIL (detaches on 3.13t) -------------------------


def waiting_readers_let_the_writer_run_python_code():
    """Readers wait inside the write section; the writer must still run."""
    lock = SeqLock()
    n_readers = 3
    taken = threading.Event()
    iterations = []

    def role(i):
        if i == 0:
            with lock:
                taken.set()
                end = time.monotonic() + 0.2
                n = 0
                while time.monotonic() < end:  # Python bytecode: needs the GIL
                    n += 1
                iterations.append(n)
            return None
        assert taken.wait(PROMPT)
        if i % 2:
            return lock.read(lambda: lock.sequence)
        return lock.read_begin()

    results = run_threads(1 + n_readers, role, timeout=20)
    assert iterations and iterations[0] > 0
    assert results[1:] == [2] * n_readers


def test_waiting_readers_let_the_writer_run_python_code(tmp_path):
    run_in_fresh_interpreter(
        "test_seqlock", "waiting_readers_let_the_writer_run_python_code",
        tmp_path=tmp_path,
    )


def gc_collect_inside_a_write_section_with_waiting_readers():
    lock = SeqLock()
    n_readers = 4
    taken = threading.Event()
    state = [0, 0]
    collected = []

    class Cycle:
        def __init__(self):
            self.me = self

    def role(i):
        if i == 0:
            with lock:
                taken.set()
                time.sleep(0.1)  # let the readers start waiting
                for _ in range(100):
                    Cycle()
                state[0] = state[1] = 1
                collected.append(gc.collect())  # stop-the-world on 3.13t
            return None
        assert taken.wait(PROMPT)
        if i % 2:
            return lock.read(lambda: tuple(state))
        while True:
            seq = lock.read_begin()
            snapshot = tuple(state)
            if not lock.read_retry(seq):
                return snapshot

    results = run_threads(1 + n_readers, role, timeout=20)
    assert collected, "the writer never collected"
    assert results[1:] == [(1, 1)] * n_readers


def test_gc_collect_inside_a_write_section_does_not_deadlock_against_waiting_readers(
    tmp_path,
):
    # In a fresh interpreter: if the waiting readers stayed attached, the
    # collection's stop-the-world pause would hang this very process.
    run_in_fresh_interpreter(
        "test_seqlock", "gc_collect_inside_a_write_section_with_waiting_readers",
        tmp_path=tmp_path,
    )


# ---- Ctrl-C ---------------------------------------------------------------

WAITS = {
    "with": lambda lock: lock.__enter__(),
    "write-timeout": lambda lock: lock.write(timeout=60).__enter__(),
    "acquire_write": lambda lock: lock.acquire_write(),
    "acquire_write-timeout": lambda lock: lock.acquire_write(timeout=60),
    "read_begin": lambda lock: lock.read_begin(),
    "read": lambda lock: lock.read(lambda: None),
}


def send_sigint():
    os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("interrupt", [_thread.interrupt_main, send_sigint],
                         ids=["interrupt_main", "kill-SIGINT"])
@pytest.mark.parametrize("wait", list(WAITS.values()), ids=list(WAITS))
def test_ctrl_c_interrupts_the_main_thread_waiting_on_a_lock_another_thread_holds(
    lock, wait, interrupt
):
    assert threading.current_thread() is threading.main_thread()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with held_by_another_thread(lock):
        timer = threading.Timer(0.2, interrupt)
        start = time.monotonic()
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                wait(lock)
                pytest.fail("the wait returned although the lock was held")
            elapsed = time.monotonic() - start
        finally:
            timer.join()
        assert elapsed < PROMPT
        assert lock.locked() and lock.sequence == 1
    # The lock is still usable after the interrupted wait.
    assert not lock.locked() and lock.sequence == 2
    with lock.write(timeout=PROMPT):
        pass
    assert lock.read(lambda: lock.sequence) == 4


# ---- a writer thread that exited inside its write section -----------------


def leave_locked(lock):
    """Take the write lock in a thread that then exits without releasing it."""
    t = threading.Thread(target=lock.acquire_write)
    t.start()
    t.join(PROMPT)
    assert lock.locked() and lock.sequence == 1


def test_read_raises_runtime_error_when_the_writer_thread_exited_inside_a_write_section(
    lock,
):
    leave_locked(lock)
    with pytest.raises(RuntimeError):
        lock.read(lambda: None)
    with pytest.raises(RuntimeError):
        lock.read_begin()


def test_a_writer_takes_over_a_lock_whose_owner_exited_with_a_runtime_warning(lock):
    leave_locked(lock)
    with pytest.warns(RuntimeWarning, match="owner thread exited"):
        assert lock.acquire_write(timeout=PROMPT) is True
    assert lock.locked() and lock.sequence == 1
    lock.release_write()
    assert not lock.locked() and lock.sequence == 2


def test_acquire_write_rejects_a_none_timeout_as_threading_does(lock):
    with pytest.raises(TypeError):
        lock.acquire_write(timeout=None)
    assert not lock.locked()
