"""The demo behind ``python -m seqlock_py``: readers share state with a writer.

One writer keeps four fields consistent (b == a + 1, c == 2 * a,
d == a + b + c) and updates them one field at a time inside a write
section, letting other threads run half-way through (as any write that
does I/O would), so a reader that looks at the wrong moment sees a mix
of old and new values.  Reader threads copy the fields through
``SeqLock.read``; one more reader copies them with no synchronisation at
all, to show what the lock prevents.  At the end it prints what each side
saw.

--record does the same with the fields held in C by a ``SeqRecord``
(readers call ``rec.read()``; the control reader reads the fields one at
a time).  --dead-writer shows a writer process dying inside a write
section of a shared-memory record: readers go on untouched, and the next
writer discards the dead section.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass

from . import SeqLock, SeqRecord, __version__


class Fields:
    """The shared state: four numbers with one invariant."""

    __slots__ = ("a", "b", "c", "d")

    def __init__(self) -> None:
        self.a, self.b, self.c, self.d = 0, 1, 0, 1

    def snapshot(self) -> tuple[int, int, int, int]:
        return (self.a, self.b, self.c, self.d)


def consistent(s: tuple[int, int, int, int]) -> bool:
    a, b, c, d = s
    return b == a + 1 and c == 2 * a and d == a + b + c


@dataclass
class ReaderCount:
    reads: int = 0
    calls: int = 0
    torn: int = 0


def writer(lock: SeqLock, fields: Fields, stop: threading.Event, pause: float, out: list[int]) -> None:
    writes = 0
    while not stop.is_set():
        with lock:
            a = fields.a + 1
            fields.a = a
            time.sleep(0)  # work that lets other threads run mid-write (I/O, say)
            fields.b = a + 1
            fields.c = 2 * a
            fields.d = a + (a + 1) + 2 * a
        writes += 1
        if pause:
            time.sleep(pause)
    out.append(writes)


def seqlock_reader(lock: SeqLock, fields: Fields, stop: threading.Event, count: ReaderCount) -> None:
    calls = 0

    def copy() -> tuple[int, int, int, int]:
        nonlocal calls
        calls += 1
        return fields.snapshot()

    read = lock.read  # a per-thread bound method: no shared refcount traffic
    while not stop.is_set():
        if not consistent(read(copy)):
            count.torn += 1
        count.reads += 1
    count.calls = calls


def unsynchronised_reader(fields: Fields, stop: threading.Event, count: ReaderCount) -> None:
    while not stop.is_set():
        if not consistent(fields.snapshot()):
            count.torn += 1
        count.reads += 1
    count.calls = count.reads


def record_writer(rec: SeqRecord, stop: threading.Event, pause: float, out: list[int]) -> None:
    writes = 0
    while not stop.is_set():
        with rec.write() as w:
            a = w.a + 1
            w.a = a
            time.sleep(0)  # let other threads run mid-write
            w.update(b=a + 1, c=2 * a, d=a + (a + 1) + 2 * a)
        writes += 1
        if pause:
            time.sleep(pause)
    out.append(writes)


def record_reader(rec: SeqRecord, stop: threading.Event, count: ReaderCount) -> None:
    read = rec.read  # a per-thread bound method: no shared refcount traffic
    while not stop.is_set():
        if not consistent(read()):
            count.torn += 1
        count.reads += 1
    count.calls = count.reads


def field_by_field_reader(rec: SeqRecord, stop: threading.Event, count: ReaderCount) -> None:
    while not stop.is_set():
        if not consistent((rec["a"], rec["b"], rec["c"], rec["d"])):
            count.torn += 1
        count.reads += 1
    count.calls = count.reads


def die_inside_a_write(name: str) -> None:
    """Child process: open a write section, change a field, die."""
    import os
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(name=name)
    assert shm.buf is not None  # None only once closed
    rec = SeqRecord.attach(shm.buf, **RECORD_FIELDS)
    section = rec.write()
    w = section.__enter__()
    w.a = -1  # half a write: b, c, d not updated
    os._exit(0)


RECORD_FIELDS = dict(a="q", b="q", c="q", d="q")


def dead_writer_demo() -> int:
    import multiprocessing
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**RECORD_FIELDS))
    assert shm.buf is not None  # None only once closed
    try:
        rec = SeqRecord.create(shm.buf, **RECORD_FIELDS)
        rec.update(a=1, b=2, c=2, d=5)
        print(f"shared record: {rec.read_dict()}, sequence {rec.sequence}")
        child = multiprocessing.get_context("spawn").Process(target=die_inside_a_write, args=(shm.name,))
        child.start()
        child.join()
        print(f"a writer process (pid {child.pid}) died inside a write section: "
              f"locked={rec.locked()}, sequence {rec.sequence} (odd: a write in progress)")
        started = time.perf_counter()
        snapshot = rec.read_dict()
        took = time.perf_counter() - started
        print(f"readers are untouched: read {snapshot} at once ({took * 1e6:.0f} us), "
              f"the dead section still open (locked={rec.locked()}, recoveries={rec.recoveries})")
        rec.update(a=2, b=3, c=4, d=9)
        print(f"the next writer discarded the dead section and wrote {rec.read_dict()}: "
              f"sequence {rec.sequence}, recoveries={rec.recoveries}, locked={rec.locked()}")
        ok = consistent(tuple(snapshot.values())) and rec.recoveries == 1
        del rec
    finally:
        shm.close()
        shm.unlink()
    return 0 if ok else 1


def interpreter() -> str:
    build = "free-threaded" if sysconfig.get_config_var("Py_GIL_DISABLED") else "default"
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    return f"CPython {sys.version.split()[0]} ({build} build, GIL {'enabled' if gil else 'disabled'})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seqlock_py", description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=2, help="seqlock reader threads (default 2)")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds to run (default 3)")
    parser.add_argument(
        "--write-pause", type=float, default=0.001, help="seconds the writer sleeps between writes (default 0.001; 0: flat out)"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--record", action="store_true", help="hold the fields in C in a SeqRecord")
    mode.add_argument(
        "--dead-writer", action="store_true", help="kill a writer process inside a write section of a shared record"
    )
    args = parser.parse_args(argv)
    if args.readers < 1:
        parser.error("--readers must be at least 1")
    if not 0 < args.duration <= 3600:
        parser.error("--duration must be in (0, 3600]")
    if args.write_pause < 0:
        parser.error("--write-pause must not be negative")

    print(f"seqlock_py {__version__} on {interpreter()}")
    if args.dead_writer:
        return dead_writer_demo()

    stop = threading.Event()
    counts = [ReaderCount() for _ in range(args.readers)]
    control = ReaderCount()
    writes: list[int] = []
    if args.record:
        rec = SeqRecord(**RECORD_FIELDS)
        rec.update(a=0, b=1, c=0, d=1)
        kind, control_kind = "SeqRecord", "field-by-field"
        threads = [threading.Thread(target=record_writer, args=(rec, stop, args.write_pause, writes))]
        threads += [threading.Thread(target=record_reader, args=(rec, stop, c)) for c in counts]
        threads.append(threading.Thread(target=field_by_field_reader, args=(rec, stop, control)))
    else:
        lock, fields = SeqLock(), Fields()
        kind, control_kind = "SeqLock", "unsynchronised"
        threads = [threading.Thread(target=writer, args=(lock, fields, stop, args.write_pause, writes))]
        threads += [threading.Thread(target=seqlock_reader, args=(lock, fields, stop, c)) for c in counts]
        threads.append(threading.Thread(target=unsynchronised_reader, args=(fields, stop, control)))

    print(f"1 writer, {args.readers} {kind} reader(s), 1 {control_kind} reader, {args.duration:g} s ...")
    started = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(args.duration)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started

    reads = sum(c.reads for c in counts)
    retries = sum(c.calls - c.reads for c in counts)
    torn = sum(c.torn for c in counts)
    print(f"writes:                     {writes[0]:>12,} ({writes[0] / elapsed:,.0f}/s)")
    if getattr(sys, "_is_gil_enabled", lambda: True)():
        print("  (GIL build: the writer waits for the GIL behind busy readers after each")
        print("   sleep; that, not the seqlock, sets its rate; readers never block it)")
    print(f"{kind + ' reads:':<28}{reads:>12,} ({reads / elapsed:,.0f}/s)")
    if not args.record:
        print(f"  retries (overlapped):     {retries:>12,}")
    print(f"  torn snapshots:           {torn:>12,}")
    print(f"{control_kind + ' reads:':<28}{control.reads:>12,}")
    print(f"  torn snapshots:           {control.torn:>12,}")
    if torn:
        print(f"FAILED: a {kind} reader saw a torn snapshot", file=sys.stderr)
        return 1
    print(f"every {kind} snapshot was consistent")
    return 0
