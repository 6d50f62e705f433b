"""SeqRecord under concurrency: threads, processes, and a writer process
that dies inside its write section.

Writers publish only states that satisfy the invariant in record_helpers
(b == a + 1, c == 2a, flag == a odd, arr a permutation of 1..16); write()
sections move there one field and one element at a time.  Every read is
checked; a torn snapshot is counted and the count must be zero.  Counts are
printed (pytest -s shows them); no timing is asserted except a generous
bound on dead-writer recovery.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from multiprocessing import shared_memory

import pytest

from record_helpers import (
    ARRAY_SUM,
    ARRAY_VALUES,
    INVARIANT_FIELDS,
    holds_for_dict,
    holds_for_flat,
    holds_for_tuple,
    invariant_state,
    process_die_in_write_section,
    write_until,
    process_hold_a_section,
    read_counting_open_sections,
    process_reader,
    process_writer,
    run_threads,
    write_section_step,
)
from seqlock_py import SeqRecord
from workers import Call, pin, stress_seconds

DURATION = stress_seconds(1.0)  # seconds of reading and writing per stress test

pytestmark = pytest.mark.timeout(120 + 3 * DURATION)


def new_invariant_record(buffer=None):
    if buffer is None:
        rec = SeqRecord(**INVARIANT_FIELDS)
    else:
        rec = SeqRecord.create(buffer, **INVARIANT_FIELDS)
    rec.update(**invariant_state(0))  # all zero breaks b == a + 1
    return rec


@pytest.fixture
def shm():
    block = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**INVARIANT_FIELDS))
    yield block
    block.close()
    block.unlink()


# A section's pause between its steps: 0 (flat out), or slow enough that
# most reads land inside an open section, which a latch answers at once.
SLOW = 0.0005


@pytest.mark.parametrize("pause", [0.0, SLOW], ids=["flat-out", "slow-sections"])
def test_threads_never_see_a_torn_snapshot(pause):
    rec = new_invariant_record()
    stop = threading.Event()
    start_seq = rec.sequence

    def reader(kind):
        # A per-thread bound method: calls through a shared one would bump
        # the record's reference count on every read (3.13t).
        read, read_dict, read_into = rec.read, rec.read_dict, rec.read_into
        fmt = rec.format
        pin("reader")
        raw = bytearray(rec.nbytes)
        reads = torn = inside = 0
        first_torn = None
        last_seq = 0
        while not stop.is_set():
            if kind == "read":
                snap, was_inside = read_counting_open_sections(rec, read)
                inside += was_inside
                ok = holds_for_tuple(snap)
            elif kind == "read_dict":
                snap = read_dict()
                ok = holds_for_dict(snap)
            elif kind == "read_into":
                seq = read_into(raw)
                ok = seq % 2 == 0 and seq >= last_seq and holds_for_flat(fmt, raw)
                last_seq, snap = seq, bytes(raw)
            else:  # one array field on its own is a consistent snapshot too
                snap = rec["arr"]
                ok = sum(snap) == ARRAY_SUM and sorted(snap) == list(ARRAY_VALUES)
            reads += 1
            if not ok:
                torn += 1
                first_torn = first_torn or snap
        return {"kind": kind, "reads": reads, "torn": torn, "inside_sections": inside, "first_torn": first_torn}

    def writer(use_sections, start_k):
        pin("writer")
        try:
            writes = write_until(rec, time.monotonic() + DURATION, use_sections, start_k, pause)
        finally:
            stop.set()  # the first writer to finish ends the run
        return {"writer": "write()" if use_sections else "update()", "writes": writes}

    readers = [lambda kind=kind: reader(kind) for kind in ("read", "read_dict", "read_into", "field")]
    writers = [lambda: writer(False, 1), lambda: writer(True, 1_000_000)]
    results = run_threads(readers + writers)
    print()
    for r in results:
        print("   ", r)
    reader_results, writer_results = results[:4], results[4:]
    assert [r["torn"] for r in reader_results] == [0, 0, 0, 0], reader_results
    assert all(r["reads"] > 0 for r in reader_results), reader_results
    assert all(w["writes"] > 0 for w in writer_results), writer_results
    if pause:  # readers went on while a slow section was open: no waiting
        assert reader_results[0]["inside_sections"] > 0, reader_results
    total_writes = sum(w["writes"] for w in writer_results)
    assert rec.sequence == start_seq + 2 * total_writes
    assert holds_for_tuple(rec.read())


def test_writer_threads_serialise_their_sections():
    rec = SeqRecord(n="q", v="4q")
    per_thread = 2000

    def increment():
        for _ in range(per_thread):
            with rec.write() as w:
                w.n += 1
                for i in range(len(w.v)):
                    w.v[i] += 1
        return per_thread

    done = run_threads([increment] * 2 + [lambda: rec.update()] * 1)
    total = sum(d or 0 for d in done)
    assert rec.read() == (total, (total,) * 4)
    assert rec.sequence == 2 * (total + 1)


def _collect(queue, children, expected, timeout=90):
    """Gather one ("ok"/"error", role, payload) per child, then join them."""
    results = []
    deadline = time.monotonic() + timeout
    while len(results) < expected:
        status, role, payload = queue.get(timeout=max(1.0, deadline - time.monotonic()))
        if status != "ok":
            pytest.fail(f"{role} process failed:\n{payload}")
        results.append((role, payload))
    for child in children:
        child.join(30)
        assert child.exitcode == 0, (child.name, child.exitcode)
    return results


@pytest.mark.parametrize("pause", [0.0, SLOW], ids=["flat-out", "slow-sections"])
def test_processes_never_see_a_torn_snapshot(shm, pause):
    rec = new_invariant_record(shm.buf)
    start_seq = rec.sequence
    # spawn, not fork: forking a process that runs threads warns on 3.13t,
    # and warnings are errors here.
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    n_readers, writer_args = 2, [(1, False), (1_000_000, True)]
    barrier = ctx.Barrier(n_readers + len(writer_args))
    children = [
        ctx.Process(target=process_reader, args=(shm.name, barrier, DURATION, queue)) for _ in range(n_readers)
    ] + [
        ctx.Process(target=process_writer, args=(shm.name, barrier, DURATION, queue, k, sections, pause))
        for k, sections in writer_args
    ]
    for child in children:
        child.start()
    results = _collect(queue, children, len(children))
    print()
    for r in results:
        print("   ", r)
    readers = [p for role, p in results if role == "reader"]
    writers = [p for role, p in results if role == "writer"]
    assert [r["torn"] for r in readers] == [0] * n_readers, readers
    assert all(r["reads"] > 0 for r in readers), readers
    assert all(w["writes"] > 0 for w in writers), writers
    if pause:  # readers in other processes did not wait for open sections
        assert all(r["inside_sections"] > 0 for r in readers), readers
    assert rec.sequence == start_seq + 2 * sum(w["writes"] for w in writers)
    assert holds_for_tuple(rec.read())
    assert rec.recoveries == 0
    del rec


def test_reader_gets_the_last_committed_snapshot_during_another_process_open_section(shm):
    rec = new_invariant_record(shm.buf)
    rec.update(**invariant_state(1))
    ctx = multiprocessing.get_context("spawn")
    inside, finish = ctx.Event(), ctx.Event()
    child = ctx.Process(target=process_hold_a_section, args=(shm.name, inside, finish))
    child.start()
    try:
        assert inside.wait(60), "the writer never opened its section"
        # The section stays open until finish is set: a reader that waited
        # for it would never return (Call turns that into a failure).
        snaps = Call(lambda: [rec.read() for _ in range(1000)]).join(10)
        assert snaps == [tuple(invariant_state(1).values())] * 1000
        assert rec.locked() and rec.sequence % 2 == 1
    finally:
        finish.set()
        child.join(60)
    assert child.exitcode == 0
    assert rec.read() == tuple(invariant_state(2).values())
    del rec


def record_whose_writer_process_died_in_its_section(shm):
    """A new invariant record in ``shm`` whose writer, a spawned process
    (process_die_in_write_section), died inside a half-written section."""
    rec = new_invariant_record(shm.buf)
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=process_die_in_write_section, args=(shm.name,))
    child.start()
    child.join(60)  # reap it first: a zombie still counts as alive
    assert child.exitcode == 0
    return rec


def test_readers_are_unaffected_by_a_writer_process_that_died_in_its_section(shm):
    rec = record_whose_writer_process_died_in_its_section(shm)
    assert rec.locked()  # the dead writer's section is still open
    assert rec.sequence % 2 == 1

    t0 = time.monotonic()
    snap = rec.read()
    elapsed = time.monotonic() - t0
    print(f"\n    read() beside a dead writer's section in {elapsed * 1e6:.0f} us")
    assert snap == tuple(invariant_state(1).values())  # the last complete write
    assert rec.recoveries == 0 and rec.locked()  # readers repair nothing

    rec.update(**invariant_state(2))  # the next writer discards the dead section
    assert rec.recoveries == 1 and not rec.locked() and rec.sequence % 2 == 0
    write_section_step(rec, 3)
    assert rec.read() == tuple(invariant_state(3).values())
    del rec


def test_dead_writer_is_recovered_by_the_next_writer(shm):
    rec = record_whose_writer_process_died_in_its_section(shm)

    t0 = time.monotonic()
    with rec.write(timeout=30) as w:
        # The half-done write was undone before this section began.
        assert (w.a, w.arr[0]) == (1, invariant_state(1)["arr"][0])
        w.update(**invariant_state(2))
    elapsed = time.monotonic() - t0
    print(f"\n    dead writer recovered by write() in {elapsed * 1000:.1f} ms")

    assert elapsed < 5.0
    assert rec.read() == tuple(invariant_state(2).values())
    assert rec.recoveries == 1
    assert not rec.locked()
    del rec


def test_readers_are_unaffected_by_a_writer_thread_that_died_in_its_section():
    # The same within one process: a thread that ends with its section
    # open (no __exit__; the writer kept alive elsewhere, else its
    # deallocation would undo the section) dies holding the lock.
    rec = new_invariant_record()
    rec.update(**invariant_state(1))
    writers = []

    def die_in_section():
        w = rec.write().__enter__()
        writers.append(w)
        w.a = 999
        w.arr[0] = -1.0

    t = threading.Thread(target=die_in_section)
    t.start()
    t.join()
    assert rec.locked()

    assert rec.read() == tuple(invariant_state(1).values())  # at once
    assert rec.recoveries == 0
    rec.update(**invariant_state(2))  # the next writer discards the section
    assert rec.recoveries == 1
    assert not rec.locked()
    assert rec.read() == tuple(invariant_state(2).values())
