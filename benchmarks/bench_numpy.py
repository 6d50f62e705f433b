"""Numeric state as numpy users hold it: array fields written from
ndarrays, a flat-out writer in shared memory, one field read into an
ndarray, and small update()s against an empty C call.

    python -P benchmarks/bench_numpy.py [--quick] [--repeats N]
        [--seconds S] [--parts copy,writer,field,small] [--label TEXT]
        [--json PATH]

copy    ns per write of 1,000 float64 from an ndarray: rec.update(state=a)
        and `with rec.write() as w: w.state = a`, against np.copyto(shared,
        a) under a threading.Lock (the idiom it replaces).
writer  writes/s of a flat-out writer of 512 floats into
        multiprocessing.shared_memory: rec.update(v=ndarray), and
        rec.update(v=list), against a multiprocessing.Lock around
        struct.pack_into("512d", shm.buf, 0, *values) (values a list).
field   ns per read of a 1,000-float field into a preallocated ndarray,
        rec.read_into(out, field="state"), against rec.read_into() of the
        whole record into np.empty((), rec.dtype).
small   ns per rec.update() of 5 scalar fields against an empty C call
        (().__sizeof__(), a METH_NOARGS builtin that does nothing).

Each round times each contender's calls as the best of 5 turns (preemption
only adds); the ratios are taken per round, then the median over rounds.
All contenders of a part run side by side in each round.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import struct
import sys
import threading
import time
from multiprocessing import shared_memory

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import BenchParser, report_head, result_head, run_parts  # noqa: E402

import numpy as np  # noqa: E402

from seqlock_py import SeqRecord  # noqa: E402

RESULT = "numpy_"
PARTS = ("copy", "writer", "field", "small")
TURNS = 5


def per_call_ns(call, seconds):
    """ns per call(): the best of TURNS turns of about seconds/TURNS each."""
    n = 1
    while True:  # calibrate: enough calls for a tenth of a turn
        t0 = time.perf_counter_ns()
        for _ in range(n):
            call()
        dt = time.perf_counter_ns() - t0
        if dt > seconds / TURNS * 1e8 or n >= 1 << 24:
            break
        n *= 4
    n = max(1, int(n * (seconds / TURNS * 1e9) / max(dt, 1)))
    best = float("inf")
    for _ in range(TURNS):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            call()
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def side_by_side(args, contenders, baseline):
    """{name: {"ns": median ns, "ratio": median of per-round ratios to
    baseline}} over args.repeats rounds, every contender in each round."""
    rounds = {name: [] for name in contenders}
    for _ in range(args.repeats):
        for name, call in contenders.items():
            rounds[name].append(per_call_ns(call, args.seconds))
    return {
        name: {
            "ns": statistics.median(times),
            "rounds_ns": times,
            "ratio": statistics.median(t / b for t, b in zip(times, rounds[baseline])),
        }
        for name, times in rounds.items()
    }


def part_copy(args, out, log):
    rec = SeqRecord(n="q", state="1000d")
    a = np.arange(1000.0)
    shared = np.zeros(1000)
    lock = threading.Lock()
    update = rec.update
    write = rec.write

    def section():
        with write() as w:
            w.state = a

    def locked_copyto():
        with lock:
            np.copyto(shared, a)

    out["copy"] = side_by_side(
        args,
        {"np.copyto under threading.Lock": locked_copyto,
         "rec.update(state=ndarray)": lambda: update(state=a),
         "w.state = ndarray in rec.write()": section},
        "np.copyto under threading.Lock",
    )


def part_writer(args, out, log):
    fmt = "512d"
    size = SeqRecord.buffer_size(v="512d")
    shm = shared_memory.SharedMemory(create=True, size=size)
    peer = shared_memory.SharedMemory(create=True, size=struct.calcsize(fmt))
    try:
        rec = SeqRecord.create(shm.buf, v="512d")
        arr = np.arange(512.0)
        values = arr.tolist()
        mlock = multiprocessing.Lock()
        update = rec.update
        pbuf = peer.buf
        pack_into = struct.pack_into

        def locked_pack():
            with mlock:
                pack_into(fmt, pbuf, 0, *values)

        result = side_by_side(
            args,
            {"SharedMemory + multiprocessing.Lock + pack_into": locked_pack,
             "rec.update(v=ndarray)": lambda: update(v=arr),
             "rec.update(v=list)": lambda: update(v=values)},
            "SharedMemory + multiprocessing.Lock + pack_into",
        )
        for cell in result.values():
            cell["writes_per_s"] = 1e9 / cell["ns"]
            cell["speed_vs_lock"] = 1 / cell["ratio"]
        out["writer"] = result
        del rec, update
    finally:
        del pbuf
        shm.close()
        shm.unlink()
        peer.close()
        peer.unlink()


def part_field(args, out, log):
    rec = SeqRecord(n="q", state="1000d")
    rec.update(n=1, state=np.arange(1000.0))
    one = np.empty(1000)
    whole = np.empty((), rec.dtype)
    read_into = rec.read_into
    out["field"] = side_by_side(
        args,
        {"rec.read_into(whole record)": lambda: read_into(whole),
         "rec.read_into(out, field='state')": lambda: read_into(one, field="state")},
        "rec.read_into(whole record)",
    )


def part_small(args, out, log):
    rec = SeqRecord(a="d", b="d", c="q", d="q", e="d", v="8d")
    update = rec.update
    empty = ().__sizeof__
    out["small"] = side_by_side(
        args,
        {"empty C call": lambda: empty(),
         "rec.update() of 5 fields": lambda: update(a=1.0, b=2.0, c=3, d=4, e=5.0)},
        "empty C call",
    )


def report(out):
    print(report_head("bench_numpy", out, f"--repeats {out['repeats']} --seconds {out['seconds']}"))
    for part in PARTS:
        if part not in out:
            continue
        print(f"## {part}")
        for name, cell in out[part].items():
            extra = f", {cell['writes_per_s']:,.0f} writes/s" if "writes_per_s" in cell else ""
            print(f"  {name}: {cell['ns']:,.0f} ns, {cell['ratio']:.2f}x{extra}")


def main(argv=None):
    parser = BenchParser(__doc__, RESULT)
    parser.add_seconds(0.5, 0.01, help="one contender's timing per round, in seconds")
    parser.add_repeats()
    parser.add_parts(PARTS)
    parser.add_label()
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.repeats < 1 or set(args.parts) - set(PARTS):
        parser.error("--seconds positive, --repeats at least 1, --parts from " + ",".join(PARTS))
    out = result_head({"label": args.label, "seconds": args.seconds, "repeats": args.repeats,
                       "turns": TURNS})
    parts = {"copy": part_copy, "writer": part_writer, "field": part_field, "small": part_small}
    return run_parts(args, out, parts, report, RESULT)


if __name__ == "__main__":
    sys.exit(main())
