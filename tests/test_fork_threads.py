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
import gc
import warnings
from multiprocessing import shared_memory

import pytest

from process_helpers import assert_clean_exit, describe_exit, in_forked_child, run_isolated, wait_for_pid
from seqlock_py import SeqLock, SeqRecord
from workers import LONG, WOKEN, Call, join_in_time, start_daemon, start_in_thread

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


# ---- more threads at the fork ------------------------------------------------


@pytest.mark.parametrize("kind", ["seqlock", "private", "bytearray", "shared_mmap", "shared_memory"])
def test_fork_from_a_non_main_thread_while_others_hold_and_wait(kind):
    """Holds: the main thread holds the lock (a half-written section),
    three threads wait for it, and a fourth thread forks.  In the child the
    forker can write a private lock at once (and sees the pre-section
    state); a lock in shared memory stays the parent's (write(timeout=1)
    times out).  The parent's threads all finish."""
    keep = None
    if kind == "seqlock":
        obj = SeqLock()
    elif kind == "private":
        obj = SeqRecord(**FIELDS)
    elif kind == "bytearray":
        keep = bytearray(SeqRecord.buffer_size(**FIELDS))
        obj = SeqRecord.create(keep, **FIELDS)
    elif kind == "shared_mmap":
        keep = mmap.mmap(-1, SeqRecord.buffer_size(**FIELDS))
        obj = SeqRecord.create(keep, **FIELDS)
    else:
        keep = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**FIELDS))
        obj = SeqRecord.create(keep.buf, **FIELDS)
    private = kind in ("seqlock", "private", "bytearray")
    is_lock = isinstance(obj, SeqLock)
    if not is_lock:
        obj.update(a=1, b=2, total=3)

    if is_lock:
        obj.acquire_write()
    else:
        section = obj.write()
        w = section.__enter__()
        w.a = 10

    def wait_and_write():
        if is_lock:
            with obj:
                pass
        else:
            obj.update(a=100, b=200, total=300)

    waiters = [Call(wait_and_write) for _ in range(3)]
    time.sleep(0.1)

    def fork_and_write_in_child():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            code = 0
            try:
                if is_lock:
                    code = 0 if obj.acquire_write(timeout=1) else 3
                else:
                    try:
                        with obj.write(timeout=1) as cw:
                            cw.a = 7
                        code = 0 if obj.read() == (7, 2, 3) else 4
                    except TimeoutError:
                        code = 3
            finally:
                os._exit(code)
        return wait_for_pid(pid, 20)

    child_code = Call(fork_and_write_in_child).join(30)
    if is_lock:
        obj.release_write()
    else:
        w.b = 20
        w.total = 30
        section.__exit__(None, None, None)
    for waiter in waiters:
        waiter.join(10)
    assert child_code == (0 if private else 3)
    assert not obj.locked() and obj.sequence % 2 == 0
    if not is_lock:
        assert obj.read() == (100, 200, 300)
    if kind == "shared_memory":
        del obj, section, w
        keep.close()
        keep.unlink()


@pytest.mark.timeout(60)
def test_a_child_forked_while_another_thread_waits_can_wait_and_be_woken():
    """Held: fork() while a thread sleeps in wait(); the child (without
    that thread) waits on the same lock and is woken by its own writer;
    the parent's waiter is woken by the parent's write."""
    lock = SeqLock()
    seq = lock.sequence
    waiter, box = start_in_thread(lock.wait, seq, LONG)
    time.sleep(0.1)

    def child():
        timer = threading.Timer(0.1, lambda: lock.__enter__() and lock.__exit__(None, None, None))
        timer.start()
        start = time.monotonic()
        woken = lock.wait(seq, LONG)
        timer.join()
        return woken and time.monotonic() - start < 0.1 + WOKEN

    code, report = in_forked_child(child)
    assert code == 0, report
    assert not box
    with lock:
        pass
    waiter.join(LONG)
    assert box[0][:2] == ("ok", True)


def test_a_writer_left_open_by_a_thread_the_fork_dropped_cannot_close_the_childs_section():
    """In a fork's child, the writer of a parent thread that was inside its
    section (repaired by the atfork handler) rolled back and closed the
    child's own section when dropped."""
    rec = SeqRecord(x="d", history="4d")
    inside, leave = threading.Event(), threading.Event()
    box = []

    def hold():  # no local keeps the writer: the child's box has the last
        box.append(rec.write())
        box[0].__enter__()
        box[0].x = 1.0
        inside.set()
        leave.wait(30)
        box.pop().__exit__(None, None, None)

    t = start_daemon(hold)
    assert inside.wait(30)

    def check():
        stale = box.pop()
        with rec.write() as w:
            w.x = 5.0
            del stale
            gc.collect()
            w.x = 6.0
        return rec["x"] == 6.0 and not rec.locked()

    try:
        code, report = in_forked_child(check)
    finally:
        leave.set()
        join_in_time(t)
    assert code == 0, f"{describe_exit(code)}: {report}"


# ---- /proc/self/maps unreadable at create(): a bytearray's record is private --


BYTEARRAY_RECORD_WHILE_FDS_RUN_OUT = """
import os, threading, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads
from seqlock_py import SeqRecord

fields = dict(x="q")
buf = bytearray(SeqRecord.buffer_size(**fields))
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass  # EMFILE: /proc/self/maps cannot be opened now
rec = SeqRecord.create(buf, **fields)
for fd in fds:
    os.close(fd)

held, finish = threading.Event(), threading.Event()

def hold():
    with rec.write() as w:
        w.x = 1
        held.set()
        finish.wait(30)

t = threading.Thread(target=hold)
t.start()
held.wait(30)
pid = os.fork()
if pid == 0:
    try:
        with rec.write(timeout=2) as w:
            w.x = 5
    except TimeoutError:
        os._exit(3)
    os._exit(0 if rec.read() == (5,) else 4)
_, status = os.waitpid(pid, 0)
finish.set()
t.join()
code = os.waitstatus_to_exitcode(status)
assert code != 3, "the child waited for a thread of its parent (the record was taken as shared)"
assert code == 0, code
print("ok")
"""


def test_bytearray_record_is_private_across_fork_even_when_proc_maps_is_unreadable():
    """Seen: memory_is_shared() answers "don't know" (-1) when it cannot
    fopen /proc/self/maps (no free fd here; in a chroot or container without
    /proc always), and create() then treats a bytearray as shared memory:
    after fork() the child's write(timeout=2) times out waiting for the
    parent's thread, the defect issue 9 fixed for the normal case."""
    assert_clean_exit(run_isolated(BYTEARRAY_RECORD_WHILE_FDS_RUN_OUT), "fork with a bytearray record")
