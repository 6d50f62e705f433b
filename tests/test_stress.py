"""Readers and writers at full speed on shared multi-field Python state.

Writers change the state in several steps inside ``with lock:``, so that
between the steps it violates its invariants:

* ``cells``, a list of 4 ints, always sums to TOTAL;
* ``pair`` is always ``(a, a + K)``.

Readers copy the state with ``lock.read(fn)`` or a hand-written
read_begin/read_retry loop and assert the invariants on every snapshot they
accept: a seqlock must never let a torn copy through.  As a control each
reader also copies the state without the lock; those torn copies are
counted (they show that the test can see tearing at all) but not asserted
on, since whether they occur depends on the scheduler.  Each test runs for
a bounded time and reports its counts.
"""
from __future__ import annotations

import random
import sys
import threading
import time

import pytest

from conftest import report, run_threads
from workers import pin, stress_seconds
from seqlock_py import SeqLock

N_READERS = 4
N_WRITERS = 2
TOTAL = 1000
K = 7
RUN_SECONDS = stress_seconds(1.5)

pytestmark = pytest.mark.timeout(120 + 3 * RUN_SECONDS)


class TornRead(Exception):
    """A reader's fn found the state violating its invariant."""


class SharedState:
    def __init__(self):
        self.cells = [TOTAL // 4] * 4
        self.pair = [0, K]

    def update(self, rng):
        """One write, in steps that each break an invariant for a moment."""
        i, j = rng.sample(range(4), 2)
        delta = rng.randint(1, 50)
        self.cells[i] -= delta
        a = self.pair[0] + 1
        self.pair[0] = a
        if rng.random() < 0.05:
            time.sleep(0)  # on the GIL build, let a reader run mid-write
        self.cells[j] += delta
        self.pair[1] = a + K

    def snapshot(self):
        return tuple(self.cells), tuple(self.pair)

    def checked_snapshot(self):
        """A snapshot, or TornRead if it breaks an invariant."""
        snap = self.snapshot()
        if torn(snap):
            raise TornRead(snap)
        return snap


def torn(snap):
    cells, pair = snap
    return sum(cells) != TOTAL or pair[1] != pair[0] + K


@pytest.fixture(autouse=True)
def frequent_thread_switches():
    """On the GIL build, switch threads often so sections interleave."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(old)


class Counts:
    def __init__(self):
        self._mutex = threading.Lock()
        self.values = {}

    def add(self, **counts):
        with self._mutex:
            for key, n in counts.items():
                self.values[key] = self.values.get(key, 0) + n


def hand_written_read(lock, state):
    """read_begin/read_retry loop; returns (snapshot, retries)."""
    retries = 0
    while True:
        seq = lock.read_begin()
        assert seq % 2 == 0, f"read_begin returned an odd sequence {seq}"
        snap = state.snapshot()
        if not lock.read_retry(seq):
            return snap, retries
        retries += 1


def run_readers_and_writers(lock, state, reader, *, seconds=RUN_SECONDS):
    """Run N_WRITERS writers and N_READERS ``reader(i, deadline, counts)``."""
    counts = Counts()
    writes = [0] * N_WRITERS
    deadline_box = []

    def role(i):
        if not deadline_box:
            deadline_box.append(time.monotonic() + seconds)
        deadline = deadline_box[0]
        pin("writer" if i < N_WRITERS else "reader")
        if i < N_WRITERS:
            rng = random.Random(i)
            while time.monotonic() < deadline:
                with lock:
                    assert lock.sequence % 2 == 1
                    state.update(rng)
                writes[i] += 1
        else:
            reader(i - N_WRITERS, deadline, counts)

    run_threads(N_WRITERS + N_READERS, role, timeout=seconds + 30)
    return writes, counts.values


def assert_progress_and_report(lock, writes, values, record_property):
    report(record_property, writes=sum(writes),
           writes_per_writer=list(writes), **values)
    assert all(n > 0 for n in writes), f"a writer made no progress: {writes}"
    assert lock.sequence == 2 * sum(writes)
    assert not lock.locked()
    assert values.get("reads", 0) > 0, "no reader accepted a snapshot"


def test_readers_never_accept_a_torn_snapshot(record_property):
    lock = SeqLock()
    state = SharedState()

    def reader(i, deadline, counts):
        reads = retries = torn_accepted = control = control_torn = 0
        use_read_fn = i % 2 == 0
        calls = [0]

        def copy_state():
            calls[0] += 1
            return state.snapshot()

        while time.monotonic() < deadline:
            if use_read_fn:
                before = calls[0]
                snap = lock.read(copy_state)
                retries += calls[0] - before - 1
            else:
                snap, r = hand_written_read(lock, state)
                retries += r
            reads += 1
            if torn(snap):  # asserted below, after the counts are in
                torn_accepted += 1
            # The control: the same copy without the lock.
            control += 1
            control_torn += torn(state.snapshot())
        counts.add(reads=reads, retries=retries, torn_accepted=torn_accepted,
                   control_reads=control, control_torn=control_torn)
        assert torn_accepted == 0, f"reader {i} accepted {torn_accepted} torn snapshots"

    writes, values = run_readers_and_writers(lock, state, reader)
    assert_progress_and_report(lock, writes, values, record_property)
    assert values["torn_accepted"] == 0


def test_read_retries_exceptions_raised_by_torn_data_under_concurrent_writes(
    record_property,
):
    """fn raises on torn data; read() must retry those and never propagate."""
    lock = SeqLock()
    state = SharedState()

    def reader(i, deadline, counts):
        reads = raised = 0

        def copy_or_raise():
            nonlocal raised
            try:
                return state.checked_snapshot()
            except TornRead:
                raised += 1
                raise

        while time.monotonic() < deadline:
            snap = lock.read(copy_or_raise)  # a TornRead escaping fails the test
            assert not torn(snap), snap
            reads += 1
        counts.add(reads=reads, torn_exceptions_retried=raised)

    writes, values = run_readers_and_writers(lock, state, reader, seconds=stress_seconds(1.0))
    assert_progress_and_report(lock, writes, values, record_property)


def test_writers_using_every_write_api_exclude_each_other(record_property):
    """Read-modify-write increments under each write API lose no update."""
    lock = SeqLock()
    counter = [0]
    done = {"with": 0, "write_timeout": 0, "acquire_nonblocking": 0,
            "acquire_timeout": 0}
    timeouts = {"write_timeout": 0, "acquire_nonblocking": 0,
                "acquire_timeout": 0}
    mutex = threading.Lock()
    seconds = stress_seconds(1.0)

    def increment():
        value = counter[0]
        time.sleep(0)  # invite a switch between the read and the write
        counter[0] = value + 1

    def role(i):
        deadline = time.monotonic() + seconds
        ok = failed = 0
        kind = list(done)[i]
        while time.monotonic() < deadline:
            if kind == "with":
                with lock:
                    increment()
                ok += 1
            elif kind == "write_timeout":
                try:
                    with lock.write(timeout=0.001):
                        increment()
                    ok += 1
                except TimeoutError:
                    failed += 1
            else:
                if kind == "acquire_nonblocking":
                    taken = lock.acquire_write(blocking=False)
                else:
                    taken = lock.acquire_write(timeout=0.001)
                if taken:
                    try:
                        increment()
                    finally:
                        lock.release_write()
                    ok += 1
                else:
                    failed += 1
        with mutex:
            done[kind] += ok
            if kind in timeouts:
                timeouts[kind] += failed

    run_threads(len(done), role, timeout=seconds + 30)
    total = sum(done.values())
    report(record_property, writes=total, counter=counter[0],
           **{f"writes_{k}": v for k, v in done.items()},
           **{f"timed_out_{k}": v for k, v in timeouts.items()})
    assert counter[0] == total, "an increment was lost: two writers overlapped"
    assert lock.sequence == 2 * total
    assert done["with"] > 0, "the blocking writer made no progress"
