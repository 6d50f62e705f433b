"""Do reads scale from 1 to 2 reader threads, against the machine's own
scaling?  For the free-threaded build.

    python -P benchmarks/bench_scaling.py [--quick] [--seconds S]
        [--repeats N] [--writer-hz HZ] [--idioms a,b,...] [--json PATH]

Every idiom the documentation recommends (docs/free-threading.md,
docs/threads.md, docs/ring.md), each thread setting up its own (bound
method, buffer, ring reader) inside the thread, on a record of 5 floats
declared by keywords and on one declared by a typing.NamedTuple:

    read()            read = rec.read, then read()
    read_into(buf)    f = rec.read_into and a buffer of the thread's own
    reader_into()     into = rec.reader_into(buf), then into()
    snapshot attrs    s = read(), then s.x, s.y, s.z, s.u, s.v
    ring poll()       a reader of the thread's own: poll = reader.poll
    ring poll_one()   the same with poll_one = reader.poll_one
    unpack, shared    read_into(buf), then .unpack_from(buf) of one
                      struct.Struct all threads share, taken from a
                      module global each call
    unpack, own       the same with the thread's own struct.Struct

and the reference: pure local work, a Python loop that builds a tuple of
5 fresh floats from the thread's own locals (what read() makes, from
nothing shared).  Each is run on 1 and on 2 threads (started behind a
barrier, each counting its calls for --seconds); each round runs every
case, each beside a run of the reference of its own (local work on 1
thread, the case on 1 and on 2, local work on 2); ops/s are all the
threads' calls over the time from the first thread's start to the last
one's end.  A case's scaling is its 2-thread total over its 1-thread
total; "vs local" is that over its reference's scaling: 1.0 scales as
well as the machine does with nothing shared.  Medians over --repeats
rounds (default 5), the spread (min-max) beside them.

--writer-hz HZ adds a writer thread updating the record (and appending
to the ring) HZ times a second.  A benchmark, never a test: no figure
fails the run; on a GIL build nothing scales and the table says so.
"""

import os
import statistics
import struct
import sys
import threading
import time
from typing import NamedTuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (BenchParser, fmt_rate, parse_list, report_head,  # noqa: E402
                     result_head, result_tail, save_result)

from seqlock_py import SeqRecord, SeqRing  # noqa: E402

CHUNK = 1000  # calls between two looks at the clock
FIELDS = dict(x="d", y="d", z="d", u="d", v="d")


class Point(NamedTuple):
    x: float
    y: float
    z: float
    u: float
    v: float


# Each idiom runs in its thread: set-up first (the thread's own bound
# method, buffer or reader), then calls until the deadline (run_for()).
# Returns the calls made and the clock at the first and after the last.
# A chunk takes what it calls as default arguments: fast locals.

def run_for(seconds, chunk):
    """chunk() (CHUNK calls) again and again for seconds."""
    clock = time.perf_counter
    n, t0 = 0, clock()
    until = t0 + seconds
    while clock() < until:
        chunk()
        n += CHUNK
    return n, t0, clock()


def idiom_read(rec, ring, seconds):
    def chunk(read=rec.read, rng=range(CHUNK)):
        for _ in rng:
            read()
    return run_for(seconds, chunk)


def idiom_read_into(rec, ring, seconds):
    def chunk(f=rec.read_into, buf=bytearray(rec.nbytes), rng=range(CHUNK)):
        for _ in rng:
            f(buf)
    return run_for(seconds, chunk)


def idiom_reader_into(rec, ring, seconds):
    def chunk(into=rec.reader_into(bytearray(rec.nbytes)), rng=range(CHUNK)):
        for _ in rng:
            into()
    return run_for(seconds, chunk)


def idiom_snapshot_attrs(rec, ring, seconds):
    def chunk(read=rec.read, rng=range(CHUNK)):
        for _ in rng:
            s = read()
            s.x, s.y, s.z, s.u, s.v
    return run_for(seconds, chunk)


def idiom_ring_poll(rec, ring, seconds):
    def chunk(poll=ring.reader().poll, rng=range(CHUNK)):
        for _ in rng:
            poll()
    return run_for(seconds, chunk)


def idiom_ring_poll_one(rec, ring, seconds):
    def chunk(poll_one=ring.reader().poll_one, rng=range(CHUNK)):
        for _ in rng:
            poll_one()
    return run_for(seconds, chunk)


# A struct.Struct of the record's format every thread shares, as a module
# global: what docs/free-threading.md warns about.
SHARED = {}


def idiom_unpack_shared(rec, ring, seconds):
    def chunk(f=rec.read_into, buf=bytearray(rec.nbytes), fmt=rec.format,
              rng=range(CHUNK)):
        for _ in rng:
            f(buf)
            SHARED[fmt].unpack_from(buf)
    return run_for(seconds, chunk)


def idiom_unpack_own(rec, ring, seconds):
    def chunk(f=rec.read_into, buf=bytearray(rec.nbytes),
              unpack=struct.Struct(rec.format).unpack_from, rng=range(CHUNK)):
        for _ in rng:
            f(buf)
            unpack(buf)
    return run_for(seconds, chunk)


def local_work(rec, ring, seconds):
    def chunk(x=1.0, y=2.0, z=3.0, u=4.0, v=5.0, rng=range(CHUNK)):
        for _ in rng:
            (x + 1.0, y + 1.0, z + 1.0, u + 1.0, v + 1.0)
    return run_for(seconds, chunk)


IDIOMS = {
    "read()": idiom_read,
    "read_into(buf)": idiom_read_into,
    "reader_into()": idiom_reader_into,
    "snapshot attrs": idiom_snapshot_attrs,
    "ring poll()": idiom_ring_poll,
    "ring poll_one()": idiom_ring_poll_one,
    "unpack, shared": idiom_unpack_shared,
    "unpack, own": idiom_unpack_own,
}
LOCAL = "local work"
RECORDS = ("keywords", "NamedTuple")


def make_shared(record):
    if record == "keywords":
        rec, ring = SeqRecord(**FIELDS), SeqRing(256, **FIELDS)
    else:
        rec, ring = SeqRecord(Point), SeqRing(256, Point)
    SHARED[rec.format] = struct.Struct(rec.format)
    return rec, ring


def run_threads(fn, rec, ring, nthreads, seconds):
    """Total calls per second of nthreads threads running fn at once."""
    start = threading.Barrier(nthreads + 1)
    results = [None] * nthreads
    errors = []

    def body(i):
        try:
            start.wait()
            results[i] = fn(rec, ring, seconds)
        except BaseException as e:  # re-raised on join
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(nthreads)]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    # Over the whole phase, first start to last end: a thread that ran
    # while another waited (for the GIL, say) is not counted twice.
    calls = sum(n for n, _, _ in results)
    return calls / (max(t1 for _, _, t1 in results) - min(t0 for _, t0, _ in results))


class Writer:
    """A thread updating the records and appending to the rings hz times
    a second, until stopped."""

    def __init__(self, shared, hz):
        self.shared, self.pause = shared, 1.0 / hz
        self.stop = threading.Event()
        self.writes = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        i = 0.0
        while not self.stop.wait(self.pause):
            i += 1.0
            for rec, ring in self.shared.values():
                rec.update(x=i, y=i, z=i, u=i, v=i)
                ring.append(x=i, y=i, z=i, u=i, v=i)
            self.writes += 1

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def one_round(idioms, shared, seconds):
    """{case: (1-thread ops/s, 2-thread ops/s, the reference's on 1 and on
    2 threads)}: each case's own reference run beside it, local work on 1
    thread just before the case's 1-thread run, on 2 just after its
    2-thread run, so that a change in the machine's load between cases
    moves a case and its reference together."""
    out = {}
    for idiom in idioms:
        for record in RECORDS:
            rec, ring = shared[record]
            local1 = run_threads(local_work, rec, ring, 1, seconds)
            one = run_threads(IDIOMS[idiom], rec, ring, 1, seconds)
            two = run_threads(IDIOMS[idiom], rec, ring, 2, seconds)
            local2 = run_threads(local_work, rec, ring, 2, seconds)
            out[f"{idiom} | {record}"] = (one, two, local1, local2)
    return out


def spread(values):
    return [min(values), max(values)]


def measure(args, out, log=print):
    shared = {r: make_shared(r) for r in RECORDS}
    rounds = []
    writer = Writer(shared, args.writer_hz) if args.writer_hz else None
    if writer:
        writer.__enter__()
    try:
        one_round(args.idioms, shared, min(args.seconds, 0.05))  # warm-up
        for i in range(args.repeats):
            rounds.append(one_round(args.idioms, shared, args.seconds))
            log(f"# round {i + 1}/{args.repeats} done")
    finally:
        if writer:
            writer.__exit__(None, None, None)
            out["writes"] = writer.writes

    locals_ = [(r[k][2], r[k][3]) for r in rounds for k in r]
    local_scaling = [two / one for one, two in locals_]
    out["local"] = {"one": statistics.median(one for one, _ in locals_),
                    "two": statistics.median(two for _, two in locals_),
                    "scaling": statistics.median(local_scaling),
                    "scaling_spread": spread(local_scaling)}
    cases = []
    for idiom in args.idioms:
        for record in RECORDS:
            key = f"{idiom} | {record}"
            per = []
            for r in rounds:
                one, two, local1, local2 = r[key]
                per.append({"one": one, "two": two, "local_one": local1, "local_two": local2,
                            "scaling": two / one, "local_scaling": local2 / local1,
                            "vs_local": (two / one) / (local2 / local1)})
            cases.append({
                "idiom": idiom, "record": record, "rounds": per,
                "one": statistics.median(p["one"] for p in per),
                "two": statistics.median(p["two"] for p in per),
                "scaling": statistics.median(p["scaling"] for p in per),
                "vs_local": statistics.median(p["vs_local"] for p in per),
                "vs_local_spread": spread([p["vs_local"] for p in per]),
            })
    out["cases"] = cases


def table(out):
    loc = out["local"]
    lines = [
        f"Scaling 1 -> 2 reader threads, medians over {out['repeats']} rounds "
        f"of {out['seconds']:g} s"
        + (f", a writer at {out['writer_hz']:g} Hz" if out["writer_hz"] else ", no writer")
        + f"; local work scaled {loc['scaling']:.2f}x "
        f"({loc['scaling_spread'][0]:.2f}-{loc['scaling_spread'][1]:.2f})",
        "",
        "| idiom | record | ops/s, 1 thread | ops/s, 2 threads | scaling | vs local work | spread |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines.append(f"| {LOCAL} | - | {fmt_rate(loc['one']).strip()} | "
                 f"{fmt_rate(loc['two']).strip()} | "
                 f"{loc['scaling']:.2f}x | 1.00x | |")
    for c in out["cases"]:
        lo, hi = c["vs_local_spread"]
        lines.append(f"| {c['idiom']} | {c['record']} | {fmt_rate(c['one']).strip()} | "
                     f"{fmt_rate(c['two']).strip()} | {c['scaling']:.2f}x | "
                     f"{c['vs_local']:.2f}x | {lo:.2f}-{hi:.2f} |")
    if out["interpreter"]["gil_enabled"]:
        lines.append("\n(the GIL is enabled: threads take turns, nothing scales here)")
    return "\n".join(lines)


def main(argv=None):
    p = BenchParser(__doc__, "scaling_")
    p.add_seconds(full=0.3, quick=0.02)
    p.add_repeats(full=5, quick=1)
    p.add_argument("--writer-hz", type=float, default=0.0,
                   help="a writer thread updating at this rate (default: none)")
    p.add_argument("--idioms", type=parse_list, default=list(IDIOMS),
                   help="comma-separated subset of: " + ", ".join(IDIOMS))
    p.add_label()
    args = p.parse_args(argv)
    unknown = set(args.idioms) - set(IDIOMS)
    if unknown:
        p.error(f"unknown idioms: {', '.join(sorted(unknown))}")
    out = result_head({"seconds": args.seconds, "repeats": args.repeats,
                       "writer_hz": args.writer_hz, "label": args.label})
    measure(args, out)
    result_tail(out)
    print(report_head("bench_scaling", out,
                      f"--seconds {args.seconds:g} --repeats {args.repeats}"))
    print(table(out))
    out["table"] = table(out)
    save_result(args, out, "scaling_")
    return 0


if __name__ == "__main__":
    sys.exit(main())
