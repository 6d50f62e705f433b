"""fork() gives the child's threads a lock they can trust.

tests/test_fork.py checks the single-threaded child.  Here the child, or
the parent at the fork, has more threads:

- the forking thread keeps its open write section in the child, so a
  thread the child starts waits for it like any other writer;
- a lock that another thread took in C while waiting, but had not yet
  returned to Python with, is that thread's, not the forking thread's: the
  child releases it;
- a record in memory the child does not share with its parent (a
  bytearray, a MAP_PRIVATE map) is private like SeqRecord(): a section
  another parent thread held is undone in the child.  In memory it does
  share (a MAP_SHARED map) the holder is a live parent thread and keeps it.
"""
import mmap
import os
import sys
import threading
import time
import warnings

import pytest

from process_helpers import in_forked_child
from seqlock_py import SeqLock, SeqRecord
from workers import Call

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

FIELDS = dict(a="q", b="q", total="q")  # invariant: a + b == total


def assert_child_passed(outcome):
    code, report = outcome
    assert code == 0, f"the child failed (exit {code}):\n{report}"


# ---- the forking thread's open section, another thread in the child ----


def test_child_threads_keep_out_of_the_forking_threads_open_section():
    rec = SeqRecord(a="q", b="q")
    section = rec.write()
    w = section.__enter__()
    w.a = 1  # half a write

    def child():
        # A reader of the child: the last committed state, at once (a
        # record's readers never wait); a writer of the child: must wait.
        assert Call(rec.read).join(10) == (0, 0)
        writer = Call(lambda: rec.update(b=5))
        time.sleep(0.2)
        assert not writer.done(), "update() went ahead mid-section"
        w.b = 1
        section.__exit__(None, None, None)
        writer.join(10)
        assert rec.read() == (1, 5), rec.read()
        return True

    try:
        assert_child_passed(in_forked_child(child))
    finally:
        section.__exit__(None, None, None)


def test_child_thread_waits_for_the_forking_threads_held_seqlock():
    lock = SeqLock()
    state = [0, 0]
    lock.acquire_write()
    state[0] = 1  # half a write

    def child():
        reader = Call(lock.read, tuple, state)  # a thread of the child: must wait
        time.sleep(0.2)
        assert not reader.done(), f"read() returned {reader.join()} mid-section"
        state[1] = 1
        lock.release_write()
        snapshot = reader.join(10)
        assert snapshot == (1, 1), snapshot
        return True

    try:
        assert_child_passed(in_forked_child(child))
    finally:
        lock.release_write()


# ---- a lock taken in C by a thread that has not yet returned to Python ----


class LockWonInADetachedWait:
    """Set up the fork of test_lock_won_in_a_detached_wait_...:

    The main thread writes (it is the last holder), takes the lock, starts a
    thread T that waits for it, and releases.  T takes the lock in C while
    waiting detached; on the GIL build it then needs the GIL to return, and
    the main thread keeps the GIL (huge switch interval, busy-waiting) until
    it has forked.  The child's main thread must then be able to write: T,
    which holds the lock, does not exist there.

    ``take()`` / ``release()`` hold the lock in the main thread; ``wait``
    is T's call.  On the free-threaded build T does not need the GIL to
    return, so the fork may find the lock free again: nothing to check
    then but that the child can write.
    """

    def __init__(self, locked, take, release, wait):
        self.locked, self.take, self.release, self.wait = locked, take, release, wait

    def fork(self, child):
        saved = sys.getswitchinterval()
        self.take()
        sys.setswitchinterval(1000.0)  # the main thread keeps the GIL
        try:
            waiter = Call(self.wait)
            time.sleep(0.2)  # T runs until it waits for the lock, detached
            won_in_c = []

            def release_and_let_t_take_it():
                self.release()  # T takes the lock in C, then waits for the GIL
                deadline = time.monotonic() + 5
                while not self.locked() and not waiter.done() and time.monotonic() < deadline:
                    pass  # nothing here gives up the GIL
                won_in_c.append(self.locked() and not waiter.done())

            outcome = in_forked_child(child, before_fork=release_and_let_t_take_it)
        finally:
            sys.setswitchinterval(saved)
        waiter.join()
        gil = getattr(sys, "_is_gil_enabled", lambda: True)()
        if gil and not won_in_c[0]:
            pytest.skip("the waiting thread did not hold the lock at the fork")
        return outcome


def test_lock_won_in_a_detached_wait_is_not_given_to_the_forking_thread():
    rec = SeqRecord(x="q")
    rec.update(x=1)  # the main thread is the last holder
    section = rec.write()

    def wait():
        with rec.write() as w:
            w.x = 2
            time.sleep(0.1)

    def child():
        snapshot = rec.read()
        assert snapshot == (1,), snapshot  # T's section never began here
        with rec.write(timeout=2) as w:
            w.x = 5
        return rec.read() == (5,) and not rec.locked()

    scenario = LockWonInADetachedWait(
        rec.locked, section.__enter__, lambda: section.__exit__(None, None, None), wait
    )
    assert_child_passed(scenario.fork(child))
    assert rec.read() == (2,)


def test_seqlock_won_in_a_detached_wait_is_not_given_to_the_forking_thread():
    lock = SeqLock()
    with lock:  # the main thread is the last holder
        pass

    def wait():
        with lock:
            time.sleep(0.1)

    def child():
        # The thread that won the lock does not exist here; if it had opened
        # its section, that is taken over with a warning (on the GIL build
        # it waits for the GIL before opening it, so there is none).
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "took over", RuntimeWarning)
            assert lock.acquire_write(timeout=2)
        lock.release_write()
        return not lock.locked() and lock.sequence % 2 == 0

    scenario = LockWonInADetachedWait(lock.locked, lock.acquire_write, lock.release_write, wait)
    assert_child_passed(scenario.fork(child))
    assert not lock.locked()


# ---- records in caller-supplied memory ----


class SectionHeldByAnotherThread:
    """A thread holds a half-written section of rec (a=10 of a+b == total)
    for the with block, then completes it (b=20, total=30)."""

    def __init__(self, rec):
        self.rec = rec
        self.held, self.finish = threading.Event(), threading.Event()

    def _hold(self):
        with self.rec.write() as w:
            w.a = 10
            self.held.set()
            assert self.finish.wait(30), "never told to finish"
            w.b = 20
            w.total = 30

    def __enter__(self):
        self.call = Call(self._hold)
        assert self.held.wait(10), "the holder never opened its section"
        return self

    def __exit__(self, *exc):
        self.finish.set()
        self.call.join()


CHILD_TIMED_OUT = 3


def write_in_child_while_a_parent_thread_holds(buf):
    """Fork while another thread holds a half-written section of a record
    laid out in buf; return the child's outcome of writing with
    write(timeout=2) then reading: exit 0 if the write went through and the
    read shows the state before the parent thread's section,
    CHILD_TIMED_OUT if the write timed out."""
    rec = SeqRecord.create(buf, **FIELDS)
    rec.update(a=1, b=2, total=3)

    def child():
        try:
            with rec.write(timeout=2):
                pass
        except TimeoutError:
            os._exit(CHILD_TIMED_OUT)
        snapshot = rec.read()
        assert snapshot == (1, 2, 3), f"read {snapshot}: the half-write was not undone"
        return True

    with SectionHeldByAnotherThread(rec):
        outcome = in_forked_child(child)
    assert rec.read() == (10, 20, 30)  # the parent's thread was never disturbed
    return outcome


def assert_child_wrote(outcome):
    code, report = outcome
    assert code != CHILD_TIMED_OUT, (
        "the child's write(timeout=2) timed out: it waited for a thread of the parent"
    )
    assert code == 0, f"the child failed (exit {code}):\n{report}"


def test_record_created_on_a_bytearray_is_private_across_fork():
    buf = bytearray(SeqRecord.buffer_size(**FIELDS))
    assert_child_wrote(write_in_child_while_a_parent_thread_holds(buf))


def test_record_created_on_a_private_mmap_is_private_across_fork():
    buf = mmap.mmap(-1, SeqRecord.buffer_size(**FIELDS), flags=mmap.MAP_PRIVATE)
    assert_child_wrote(write_in_child_while_a_parent_thread_holds(buf))


def test_record_created_on_a_shared_mmap_stays_held_by_the_parent_thread_across_fork():
    buf = mmap.mmap(-1, SeqRecord.buffer_size(**FIELDS))  # MAP_SHARED
    code, report = write_in_child_while_a_parent_thread_holds(buf)
    assert code == CHILD_TIMED_OUT, f"the child did not time out (exit {code}):\n{report}"
