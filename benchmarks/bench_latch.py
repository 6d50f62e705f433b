"""SeqRecord as a latch: reader latency while a writer holds its section,
read cost against an empty C call, and write cost against record size.

    python -P benchmarks/bench_latch.py [--quick] [--seconds S] [--repeats N]
        [--parts latency,cost,write] [--holds 0.1,1,10] [--sizes 1,8,...]
        [--label TEXT] [--json PATH]
    python -P benchmarks/bench_latch.py --plot LATCH.json [...] [--outdir DIR]

benchmarks/run_all.sh runs it under both interpreters, then --plot draws
reader_latency.png and prints latch_table.md.

latency  A writer opens a section, sets 4 floats, holds the section for H
         (0.1, 1, 10 ms), closes it and sleeps 0.1 ms.  One reader, this
         process's main thread, sleeps 50 us between reads (about 100 us
         with Linux's timer slack), so most reads land inside a section, and
         times each read call with perf_counter_ns.  Holds under 0.5 ms are
         a busy wait (time.sleep overshoots them by tens of us); longer ones
         sleep, like a writer waiting for I/O or descheduled.  Contenders:
         SeqRecord.read() (`with rec.write() as w:`), SeqLock.read(fn) over a
         dict (`with lock:`), threading.Lock (`with lk:` on both sides).  The
         writer is a thread of this process, or another process (spawn): the
         record then lives in multiprocessing.shared_memory, and a
         multiprocessing.Lock around 4 doubles in shared memory is the lock
         contender (a SeqLock or threading.Lock cannot cross processes).
         p50, p99 and max per round, then medians over rounds.  A reader
         that waited resumes as the section ends, so its next read tends to
         fall in the writer's pause: a waiting contender's p50 can land on
         either side, its p99 and max show the wait.  On the GIL build a
         busy-waiting writer thread also holds the GIL: the reader's thread
         waits for it before its timed call, not inside it.
cost     rec.read() and rec.read_into(bytearray) of a 4-float record against
         rec.locked(), an empty METH_NOARGS call on the same record (and
         callable(buf), an empty one-argument call), one thread.  Each
         round's time of a call is the best of 5 turns (preemption only
         adds); ratios per round, then the median.
write    ns per write section, rec.update(x=v) and `with rec.write() as w:
         w.x = v`, for records of 1 to 4096 floats (x plus an array); the
         latch copies the record once per section, so the cost grows with
         size: the slope (least squares over the medians) in ns per float.
         Timed like cost: best of 5 turns per round, median over rounds.

Every round runs every case once, interleaved; the JSON keeps each round's
summary, the machine and the load average.  Absolute numbers depend on the
(shared, noisy) machine: compare within a run.
"""

import array
import functools
import multiprocessing
import os
import queue
import statistics
import struct
import sys
import threading
import time
from multiprocessing import shared_memory

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (BenchParser, attach_shm,  # noqa: E402
                     call_cost_table, call_costs, interpreter_label,
                     load_results, measured_on, ns_per_op, parse_list,
                     percentile, report_head, result_head,
                     rounds_beside_writers, run_parts, summary,
                     time_sections, time_updates)

from seqlock_py import SeqLock, SeqRecord  # noqa: E402

FIELDS = {"a": "d", "b": "d", "c": "d", "d": "d"}
DOUBLES = struct.Struct("4d")
HOLDS_MS = (0.1, 1.0, 10.0)
SIZES = (1, 8, 64, 512, 4096)
BUSY_BELOW = 0.0005     # shorter holds busy-wait, longer ones sleep
WRITER_PAUSE = 0.0001   # the writer sleeps this long between sections
READ_PAUSE = 0.00005    # the reader sleeps this long between reads
TIMEOUT = 120
THREADS_ONLY = ("SeqLock.read(fn), dict", "threading.Lock")


# ---- latency: contenders as (write(v, hold), read()) pairs ----------------

def record_pair(rec):
    def write(v, hold):
        with rec.write() as w:
            w.a = v
            w.b = v + 1.0
            w.c = v + 2.0
            w.d = v + 3.0
            hold()
    return write, rec.read


def seqlock_pair(lock, d):
    def write(v, hold):
        with lock:
            d["a"], d["b"], d["c"], d["d"] = v, v + 1.0, v + 2.0, v + 3.0
            hold()
    return write, functools.partial(
        lock.read, lambda: (d["a"], d["b"], d["c"], d["d"]))


def lock_pair(lock, d):
    def write(v, hold):
        with lock:
            d["a"], d["b"], d["c"], d["d"] = v, v + 1.0, v + 2.0, v + 3.0
            hold()

    def read():
        with lock:
            return (d["a"], d["b"], d["c"], d["d"])
    return write, read


def mp_lock_pair(lock, buf):
    def write(v, hold):
        with lock:
            DOUBLES.pack_into(buf, 0, v, v + 1.0, v + 2.0, v + 3.0)
            hold()

    def read():
        with lock:
            return DOUBLES.unpack_from(buf)
    return write, read


def thread_contenders():
    zeros = dict.fromkeys(FIELDS, 0.0)
    return {"SeqRecord.read()": record_pair(SeqRecord(**FIELDS)),
            "SeqLock.read(fn), dict": seqlock_pair(SeqLock(), dict(zeros)),
            "threading.Lock": lock_pair(threading.Lock(), dict(zeros))}


def process_contenders(rec_buf, raw_buf, lock):
    return {"SeqRecord.read()": record_pair(
                SeqRecord.attach(rec_buf, **FIELDS)),
            "multiprocessing.Lock": mp_lock_pair(lock, raw_buf)}


def holder(seconds):
    """hold(): sleep for seconds, or busy-wait if that is too short to
    sleep accurately."""
    if seconds >= BUSY_BELOW:
        return functools.partial(time.sleep, seconds)
    clock = time.perf_counter

    def hold():
        end = clock() + seconds
        while clock() < end:
            pass
    return hold


def run_writer(writes, plan, barrier, results):
    """For each (round, contender, hold_ms, seconds) in plan: start behind
    barrier, write sections until the reader is done, put (item, summary)
    on results."""
    clock = time.perf_counter
    sleep = time.sleep
    try:
        for item in plan:
            _, name, hold_ms, seconds = item
            write, hold = writes[name], holder(hold_ms / 1e3)
            held = array.array("d")
            v = 0.0
            barrier.wait(timeout=TIMEOUT)
            start = clock()
            end = start + seconds + 2 * hold_ms / 1e3 + 0.01  # outlast it
            while clock() < end:
                t0 = clock()
                write(v, hold)
                held.append(clock() - t0)
                v += 1.0
                sleep(WRITER_PAUSE)
            results.put((item, {
                "sections": len(held),
                "in_section": sum(held) / (clock() - start),
                "section_median_ms": statistics.median(held) * 1e3}))
    except BaseException:
        barrier.abort()  # the reader stops waiting
        raise


def process_writer(rec_name, raw_name, lock, plan, barrier, results):
    rec_shm, raw_shm = attach_shm(rec_name), attach_shm(raw_name)
    pairs = process_contenders(rec_shm.buf, raw_shm.buf, lock)
    run_writer({k: w for k, (w, _) in pairs.items()}, plan, barrier, results)
    del pairs  # they hold the buffers
    rec_shm.close()
    raw_shm.close()


def read_latencies(read, seconds):
    """Sorted ns taken by each read() call over `seconds`."""
    lat = array.array("q")
    append = lat.append
    clock = time.perf_counter_ns
    sleep = time.sleep
    end = clock() + int(seconds * 1e9)
    t1 = 0
    while t1 < end:
        t0 = clock()
        read()
        t1 = clock()
        append(t1 - t0)
        sleep(READ_PAUSE)
    return sorted(lat)


def latency_plan(names, holds, repeats, seconds):
    """A short warm-up round (-1), then every contender and hold per round."""
    return [(rnd, name, h, seconds if rnd >= 0 else min(seconds, 0.1))
            for rnd in range(-1, repeats) for name in names for h in holds]


def bench_latency(args, out, log):
    ctx = multiprocessing.get_context("spawn")
    rec_shm = shared_memory.SharedMemory(
        create=True, size=SeqRecord.buffer_size(**FIELDS))
    raw_shm = shared_memory.SharedMemory(create=True, size=DOUBLES.size)
    SeqRecord.create(rec_shm.buf, **FIELDS)
    mp_lock = ctx.Lock()
    sides = {}  # placement: (pairs, plan, barrier, results)
    for placement, pairs, barrier, results in (
            ("thread", thread_contenders(), threading.Barrier(2),
             queue.SimpleQueue()),
            ("process", process_contenders(rec_shm.buf, raw_shm.buf, mp_lock),
             ctx.Barrier(2), ctx.Queue())):
        plan = latency_plan(list(pairs), args.holds, args.repeats,
                            args.seconds)
        sides[placement] = (pairs, plan, barrier, results)
    writes = {k: w for k, (w, _) in sides["thread"][0].items()}
    tw = threading.Thread(target=run_writer, daemon=True,
                          args=(writes, *sides["thread"][1:]))
    pw = ctx.Process(target=process_writer,
                     args=(rec_shm.name, raw_shm.name, mp_lock,
                           *sides["process"][1:]))
    rounds = {}

    def one_round(rnd):
        try:
            for placement, (pairs, plan, barrier, results) in sides.items():
                for item in (i for i in plan if i[0] == rnd):
                    _, name, hold_ms, seconds = item
                    barrier.wait(timeout=TIMEOUT)
                    lat = read_latencies(pairs[name][1], seconds)
                    done, writer = results.get(timeout=TIMEOUT)
                    assert tuple(done) == item, (done, item)
                    if rnd >= 0:
                        row = {"reads": len(lat), "max_us": lat[-1] / 1e3}
                        for q in (50, 90, 99, 99.9):
                            row[f"p{q:g}_us"] = percentile(lat,
                                                           q / 100) / 1e3
                        rounds.setdefault((placement, name, hold_ms),
                                          []).append(row | writer)
        finally:  # an error's traceback keeps this frame: not the buffers
            pairs = None  # noqa: F841
    try:
        rounds_beside_writers(tw, pw, args.repeats, one_round, log, TIMEOUT)
    finally:
        sides.clear()  # the pairs hold the shared buffers
        pairs = None
        for shm in (rec_shm, raw_shm):
            shm.close()
            shm.unlink()
    cells = []
    for (placement, name, hold_ms), rows in rounds.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        cells.append({"placement": placement, "contender": name,
                      "hold_ms": hold_ms, **med,
                      "max_all_us": max(r["max_us"] for r in rows),
                      "rounds": rows})
    out["latency"] = cells
    out["latency_na"] = {name: "threads only (cannot cross processes)"
                         for name in THREADS_ONLY}


# ---- cost: reads against an empty C method call --------------------------

def bench_cost(args, out, log):
    rec = SeqRecord(**FIELDS)
    for i in range(1000):  # a sequence past the cached small ints, as in use
        rec.update(a=float(i))
    buf = bytearray(rec.nbytes)
    out["cost"] = call_costs({"rec.locked()": (rec.locked, None),
                              "callable(buf)": (callable, buf),
                              "rec.read()": (rec.read, None),
                              "rec.read_into(buf)": (rec.read_into, buf)},
                             args.call_seconds, args.repeats)


# ---- write: ns per section against record size ---------------------------

WRITES = {"rec.update(x=v)": time_updates,
          "with rec.write() as w: w.x = v": time_sections}


def bench_write(args, out, log):
    recs = {size: SeqRecord(x="d", **({"pad": f"{size - 1}d"} if size > 1
                                      else {}))
            for size in args.sizes}
    cases = [(kind, size) for size in args.sizes for kind in WRITES]
    ns = ns_per_op({(k, s): functools.partial(WRITES[k], recs[s])
                    for k, s in cases}, args.call_seconds, args.repeats)
    out["write"] = {"sizes": args.sizes, "kinds": list(WRITES),
                    "ns": [{"kind": k, "floats": s, **summary(ns[k, s])}
                           for k, s in cases], "slope": {}}
    if len(args.sizes) > 1:
        for kind in WRITES:
            fit = statistics.linear_regression(
                args.sizes, [statistics.median(ns[kind, s])
                             for s in args.sizes])
            out["write"]["slope"][kind] = {
                "ns_per_float": fit.slope, "intercept_ns": fit.intercept}


# ---- report, tables, plot ------------------------------------------------

def _cell(cells, placement, name, hold_ms):
    for c in cells:
        if (c["placement"], c["contender"], c["hold_ms"]) == (
                placement, name, hold_ms):
            return c
    return None


def _us(v):
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def latency_table(out):
    cells, holds = out["latency"], out["holds_ms"]
    rows = []
    for placement in ("thread", "process"):
        names = list(dict.fromkeys(c["contender"] for c in cells))
        for name in names:
            got = [_cell(cells, placement, name, h) for h in holds]
            if any(got):
                vals = [" / ".join(_us(c[k]) for k in ("p50_us", "p99_us",
                                                        "max_us"))
                        if c else "" for c in got]
            elif name in out["latency_na"]:
                vals = ["n/a (threads only)"] * len(holds)
            else:
                continue
            rows.append(f"| {name} | {placement} | " + " | ".join(vals) + " |")
    duty = [statistics.median(c["in_section"] for c in cells
                              if c["hold_ms"] == h) for h in holds]
    return "\n".join(
        [f"**{interpreter_label(out['interpreter'])}**: read latency in µs, "
         f"p50 / p99 / max (medians of {out['repeats']} rounds), while the "
         "writer holds each section for H:\n",
         "| contender | writer | " + " | ".join(
             f"H = {h:g} ms" for h in holds) + " |",
         "| --- | --- |" + " ---: |" * len(holds), *rows,
         "\nThe writer was inside a section "
         + ", ".join(f"{d:.0%}" for d in duty) + " of the time (H = "
         + ", ".join(f"{h:g}" for h in holds) + " ms).\n"])


def cost_table(outs):
    return call_cost_table(
        outs, "cost", "Read cost, 4-float record, one thread (medians of "
        "{repeats} rounds; ratios taken per round):\n")


def write_table(outs):
    outs = [o for o in outs if "write" in o]
    if not outs:
        return ""
    kinds = outs[0]["write"]["kinds"]
    lines = ["Write cost, ns per section (medians), against the floats in "
             "the record:\n",
             "| floats | " + " | ".join(
                 f"{interpreter_label(o['interpreter'])}: `{k}`"
                 for o in outs for k in kinds) + " |",
             "| ---: |" + " ---: |" * (len(outs) * len(kinds))]
    for size in outs[0]["write"]["sizes"]:
        vals = [e["median"] for o in outs for k in kinds
                for e in o["write"]["ns"] if (e["kind"], e["floats"]) ==
                (k, size)]
        lines.append(f"| {size} | " + " | ".join(f"{v:.0f}" for v in vals)
                     + " |")
    slopes = [f"{interpreter_label(o['interpreter'])} `{k}`: "
              f"{s['ns_per_float']:.2f} ns per float "
              f"({s['ns_per_float'] * 128:.0f} ns per KiB)"
              for o in outs for k, s in o["write"]["slope"].items()]
    if slopes:
        lines.append("\nSlope (least squares over the medians): "
                     + "; ".join(slopes) + ".")
    return "\n".join(lines) + "\n"


def report(out, log=print):
    log(report_head("bench_latch", out, f"--seconds {out['seconds']:g} "
                    f"--repeats {out['repeats']}"))
    if "latency" in out:
        log(latency_table(out))
    log(cost_table([out]))
    log(write_table([out]))


def plot(paths, outdir):
    outs = load_results(paths)
    print("\n".join(latency_table(o) for o in outs if "latency" in o))
    print(cost_table(outs))
    print(write_table(outs))
    print(measured_on(outs))
    outs = [o for o in outs if "latency" in o]
    try:
        import matplotlib
    except ImportError:
        print("# matplotlib not installed: no plot", file=sys.stderr)
        return 0
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(outs), squeeze=False, sharey=True,
                             figsize=(6 * len(outs), 4.5))
    for ax, out in zip(axes[0], outs):
        holds = out["holds_ms"]
        ax.plot(holds, [h * 1e3 for h in holds], ":", color="grey",
                label="H (section length)")
        names = list(dict.fromkeys(c["contender"] for c in out["latency"]))
        for placement, style in (("thread", "o-"), ("process", "s--")):
            for i, name in enumerate(names):
                got = [_cell(out["latency"], placement, name, h)
                       for h in holds]
                if all(got):
                    ax.plot(holds, [c["p99_us"] for c in got], style,
                            color=f"C{i}", label=f"{name}, {placement} writer")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(holds, [f"{h:g}" for h in holds])
        ax.set_xlabel("section held H (ms)")
        ax.set_ylabel("p99 read latency (µs)")
        ax.set_title(interpreter_label(out["interpreter"]), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(outdir, "reader_latency.png")
    os.makedirs(outdir, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    print(f"# wrote {path}", file=sys.stderr)
    return 0


PARTS = {"latency": bench_latency, "cost": bench_cost, "write": bench_write}


RESULT = "latch-"  # benchmarks/results/latch-<tag>.json


def main(argv=None):
    parser = BenchParser(__doc__, RESULT)
    parser.add_seconds(2.0, 0.05, help="reads per latency case, in seconds")
    parser.add_repeats()
    parser.add_parts(PARTS)
    parser.add_argument("--holds", type=lambda t: parse_list(t, float),
                        default=list(HOLDS_MS), help="section lengths, ms")
    parser.add_argument("--sizes", type=lambda t: parse_list(t, int),
                        default=list(SIZES), help="record sizes, floats")
    parser.add_label()
    parser.add_argument("--plot", nargs="+", metavar="JSON",
                        help="do not measure: draw reader_latency.png and "
                             "print the tables from these results")
    parser.add_outdir()
    args = parser.parse_args(argv)
    if args.plot:
        return plot(args.plot, args.outdir)
    args.call_seconds = min(0.04, args.seconds / 5)
    if (args.seconds <= 0 or args.repeats < 1 or set(args.parts) - set(PARTS)
            or min(args.sizes) < 1 or min(args.holds) < 0):
        parser.error("--seconds positive, --repeats and --sizes at least 1, "
                     "--holds not negative, --parts from " + ",".join(PARTS))

    out = result_head({"label": args.label, "seconds": args.seconds,
                       "repeats": args.repeats, "holds_ms": args.holds,
                       "writer_pause_s": WRITER_PAUSE,
                       "read_pause_s": READ_PAUSE,
                       "busy_wait_below_s": BUSY_BELOW})
    return run_parts(args, out, PARTS, report, RESULT)


if __name__ == "__main__":
    sys.exit(main())
