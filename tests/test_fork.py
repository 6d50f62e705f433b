"""fork() while a write lock is held leaves the child a usable lock.

As CPython does for its own locks: a lock that another thread held at the
fork is released in the child (that thread does not exist there); a lock
the forking thread held stays held by it, so it can finish its section. The
half-done section of another thread is discarded in a private record; in a
SeqLock, whose Python objects cannot be put back, it is left as a dead
writer's: readers raise RuntimeError, the next writer takes it over with a
RuntimeWarning. A record in shared memory is not reset: its holder is a
live thread of the parent.
"""

import os
import threading
import warnings
from multiprocessing import shared_memory

import pytest

from seqlock_py import SeqLock, SeqRecord

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")


def in_child(check):
    """Run check() in a forked child; its exit status is the result."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # forking with threads
        pid = os.fork()
    if pid == 0:
        try:
            os._exit(0 if check() else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


class HeldByAnotherThread:
    """Hold a write section open in another thread for the with block."""

    def __init__(self, enter, leave):
        self.enter, self.leave = enter, leave
        self.held, self.done = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self):
        self.enter()
        self.held.set()
        self.done.wait()
        self.leave()

    def __enter__(self):
        self.thread.start()
        assert self.held.wait(10)
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(10)


def test_child_takes_over_with_a_warning_a_seqlock_another_thread_held_at_fork():
    lock = SeqLock()

    def take_over():
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            taken = lock.acquire_write(timeout=5)
        lock.release_write()
        return taken and lock.sequence == 2 and "took over" in str(seen[0].message)

    with HeldByAnotherThread(lock.acquire_write, lock.release_write):
        assert lock.sequence == 1
        code = in_child(take_over)
    assert code == 0
    assert lock.sequence == 2  # the parent's lock was never touched


def test_child_reader_of_a_seqlock_another_thread_was_writing_at_fork_gets_an_error():
    lock = SeqLock()

    def read_raises():
        try:
            lock.read(lambda: "half a write")
        except RuntimeError as exc:
            return "exited inside a write section" in str(exc)
        return False

    with HeldByAnotherThread(lock.acquire_write, lock.release_write):
        code = in_child(read_raises)
    assert code == 0


def test_forking_thread_keeps_the_lock_it_held():
    lock = SeqLock()
    lock.acquire_write()
    try:
        code = in_child(lambda: lock.locked() and lock.release_write() is None and lock.sequence == 2)
    finally:
        lock.release_write()
    assert code == 0


def test_forking_thread_can_finish_a_private_record_write_section():
    rec = SeqRecord(x="d", y="d")
    with rec.write() as w:
        w.x = 1.0

        def finish():
            w.y = 2.0
            w.__exit__(None, None, None)
            return rec.read() == (1.0, 2.0)

        code = in_child(finish)
    assert code == 0


def test_child_can_read_a_private_record_another_thread_was_writing():
    rec = SeqRecord(x="q")
    section = rec.write()
    with HeldByAnotherThread(section.__enter__, lambda: section.__exit__(None, None, None)):
        code = in_child(lambda: rec.read() == (0,) and rec.update(x=5) is None and rec["x"] == 5)
    assert code == 0


def test_shared_record_held_by_a_live_parent_thread_is_not_reset_in_the_child():
    fields = dict(x="q")
    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**fields))
    try:
        rec = SeqRecord.create(shm.buf, **fields)
        section = rec.write(timeout=0.2)
        with HeldByAnotherThread(section.__enter__, lambda: section.__exit__(None, None, None)):

            def child_times_out():
                try:
                    with rec.write(timeout=0.2):
                        return False
                except TimeoutError:
                    return True

            code = in_child(child_times_out)
        assert code == 0
        assert not rec.locked()
        del rec, section
    finally:
        shm.close()
        shm.unlink()
