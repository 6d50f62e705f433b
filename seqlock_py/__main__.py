"""python -m seqlock_py: watch readers share state with a writer.

One writer keeps four fields consistent (b == a + 1, c == 2 * a,
d == a + b + c) and updates them one field at a time inside a write
section, letting other threads run half-way through (as any write that
does I/O would), so a reader that looks at the wrong moment sees a mix
of old and new values.  Reader threads copy the fields through ``SeqLock.read``;
one more reader copies them with no synchronisation at all, to show what
the lock prevents.  At the end it prints what each side saw.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
import threading
import time
from dataclasses import dataclass

from . import SeqLock, __version__


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
    args = parser.parse_args(argv)
    if args.readers < 1:
        parser.error("--readers must be at least 1")
    if not 0 < args.duration <= 3600:
        parser.error("--duration must be in (0, 3600]")
    if args.write_pause < 0:
        parser.error("--write-pause must not be negative")

    lock, fields, stop = SeqLock(), Fields(), threading.Event()
    counts = [ReaderCount() for _ in range(args.readers)]
    control = ReaderCount()
    writes: list[int] = []
    threads = [threading.Thread(target=writer, args=(lock, fields, stop, args.write_pause, writes))]
    threads += [threading.Thread(target=seqlock_reader, args=(lock, fields, stop, c)) for c in counts]
    threads.append(threading.Thread(target=unsynchronised_reader, args=(fields, stop, control)))

    print(f"seqlock_py {__version__} on {interpreter()}")
    print(f"1 writer, {args.readers} SeqLock reader(s), 1 unsynchronised reader, {args.duration:g} s ...")
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
    print(f"SeqLock reads:              {reads:>12,} ({reads / elapsed:,.0f}/s)")
    print(f"  retries (overlapped):     {retries:>12,}")
    print(f"  torn snapshots:           {torn:>12,}")
    print(f"unsynchronised reads:       {control.reads:>12,}")
    print(f"  torn snapshots:           {control.torn:>12,}")
    if torn:
        print("FAILED: a SeqLock reader saw a torn snapshot", file=sys.stderr)
        return 1
    print("every SeqLock snapshot was consistent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
