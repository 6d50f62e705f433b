"""Readers never starve: after max_retries overlapped passes a read takes
the lock for one pass (the kernel's read_seqbegin_or_lock; StampedLock's
fallback to readLock), and the lock counts how often that happened."""

import threading
import time

import pytest

from seqlock_py import SeqLock, SeqRecord


class WriteStorm:
    """A writer that never pauses: every write section follows the last."""

    def __init__(self, write):
        self.stop = threading.Event()
        self.writes = 0
        self.error = None
        self.thread = threading.Thread(target=self._run, args=(write,))

    def _run(self, write):
        try:
            while not self.stop.is_set():
                write()
                self.writes += 1
        except BaseException as e:  # re-raised in __exit__
            self.error = e

    def __enter__(self):
        self.thread.start()
        while self.writes < 10:
            time.sleep(0.001)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)
        if self.error is not None:
            raise self.error


def test_max_retries_defaults_to_16():
    assert SeqLock().max_retries == 16
    assert SeqRecord(x="d").max_retries == 16


def test_max_retries_is_a_keyword_setting_of_the_lock():
    lock = SeqLock(max_retries=3)
    assert lock.max_retries == 3
    lock.max_retries = 0
    assert lock.max_retries == 0


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (2**40, OverflowError), ("3", TypeError), (1.5, TypeError)])
def test_bad_max_retries_is_rejected(bad, error):
    with pytest.raises(error):
        SeqLock(max_retries=bad)
    with pytest.raises(error):
        SeqLock().max_retries = bad
    with pytest.raises(error):
        SeqRecord(x="d").max_retries = bad


def test_max_retries_is_keyword_only():
    with pytest.raises(TypeError):
        SeqLock(3)


def test_read_finishes_under_a_write_storm_and_counts_fallbacks():
    lock = SeqLock(max_retries=2)
    state = [0, 0]

    def write():
        with lock:
            state[0] += 1
            time.sleep(0)
            state[1] += 1

    def copy():
        time.sleep(0.0002)  # long enough that writes always overlap
        return tuple(state)

    with WriteStorm(write) as storm:
        snapshots = [lock.read(copy) for _ in range(30)]
    assert all(a == b for a, b in snapshots)
    assert lock.read_fallbacks > 0
    assert lock.read_retries >= 3 * lock.read_fallbacks  # 3 failed passes each
    print(f"reads=30 writes={storm.writes} retries={lock.read_retries} fallbacks={lock.read_fallbacks}")


def write_from_another_thread(lock):
    """One complete write section by another thread, so a read overlaps it."""
    writer = threading.Thread(target=lambda: lock.acquire_write() and lock.release_write())
    writer.start()
    writer.join()


def test_locking_pass_does_not_bump_the_sequence():
    lock = SeqLock(max_retries=0)
    seen = []

    def copy():
        seen.append((lock.sequence, lock.locked()))
        if len(seen) == 1:
            write_from_another_thread(lock)
        return "done"

    assert lock.read(copy) == "done"
    assert lock.read_fallbacks == 1
    assert seen[1] == (2, True)  # the write's even count, writers locked out
    assert lock.sequence == 2 and not lock.locked()


def test_release_write_inside_a_locking_pass_is_an_error():
    lock = SeqLock(max_retries=0)
    errors = []

    def copy():
        if not lock.locked():
            write_from_another_thread(lock)
            return
        try:
            lock.release_write()
        except RuntimeError as e:
            errors.append(e)

    lock.read(copy)
    assert [str(e) for e in errors] == ["release unlocked lock"]
    assert not lock.locked() and lock.sequence == 2


def test_record_read_finishes_under_a_write_storm_and_counts_fallbacks():
    rec = SeqRecord(a="q", b="q", samples="512d")
    rec.max_retries = 1

    def write():
        with rec.write() as w:
            a = w.a + 1
            w.update(a=a, b=-a, samples=[float(a)] * 512)

    with WriteStorm(write):
        snapshots = [rec.read() for _ in range(300)]
    assert all(a == -b and set(s) == {float(a)} for a, b, s in snapshots)
    print(f"reads=300 retries={rec.read_retries} fallbacks={rec.read_fallbacks}")
    assert rec.read_fallbacks >= 0  # a fast machine may never need one
