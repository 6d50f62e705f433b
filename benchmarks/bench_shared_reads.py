"""Cross-process reads of a record under a writer process: seqlock_py
against safe-shm's seqlock (issue 28, item 3).

    python -P benchmarks/bench_shared_reads.py [--quick] [--seconds S]
        [--repeats N] [--rate HZ] [--pin split|none] [--label TEXT]
        [--json PATH]

Cases (8 per contender): two records, two writers, 1 and 2 readers.

  small   one float64.  seqlock_py: SeqRecord.create_shared(name, v="d");
          safe-shm: SeqlockWriterF64 / SeqlockReaderF64.
  large   the largest payload safe-shm's Python binding offers, its
          StampedF64 {timestamp_ns: uint64, sequence: uint64, data:
          float64}; seqlock_py: a record of the same fields and types
          (timestamp_ns="Q", sequence="Q", data="d").

  flat out  the writer process stores as fast as it can (rec.update(...),
            writer.store(...)), looking at a stop flag every STOP_EVERY
            stores;
  1 kHz     it stores --rate times a second (it sleeps to its schedule).

One run is one contender's reader: a writer process and 1 or 2 reader
processes (multiprocessing, spawn), each on its own record or channel
object.  The writer creates the record (and owns its name), every process
sets up, then all pass a barrier; each reader reads flat out for
--seconds, CHUNK calls between two looks at the clock, what it calls
taken as default arguments (fast locals), and reports its reads, its
wall time and its CPU time; the writer stops when every reader is done.
The readers:

  seqlock_py read_into(buf)    f = rec.read_into, a bytearray of the
                               reader's own: f(buf) (the headline idiom)
  seqlock_py reader_into(buf)  into = rec.reader_into(buf): into()
  seqlock_py read()            read = rec.read: read()
  safe-shm load()              load = reader.load: load()

Figures, per reader process: reads/s (its reads over its own wall time
from the barrier), CPU ns per read (its CPU time over its reads), and for
seqlock_py the record's read_retries and read_fallbacks per read (safe-shm
exposes no retry count).  The headline, per case: seqlock_py read_into's
reads/s over safe-shm load()'s, the ratio taken within each round, median
over --repeats rounds with the spread (min-max); issue 28's goal is
>= 1.2x in the four flat-out cases.  Then each reader's cost per read
(CPU ns) under the flat-out writer over under the 1 kHz one, per round.

Every round runs every case, and in each case every reader; the order of
the readers is reversed every other round, read_into and load() next to
each other in both orders, so the machine's noise falls on both alike.

Placement (--pin): "split" (default) pins the writer to the first CPU
this process may use and the readers to the others, round robin; on 2
CPUs the readers of a 2-reader case share one CPU (each gets about half
of it: reads/s per reader halve, CPU ns per read do not) and the writer
always runs on the other, so every read is a cross-core one.  "none"
leaves placement to the scheduler (3 processes on 2 CPUs: a reader may
share the writer's CPU for a while).  Every contender gets the same.

safe-shm (PyPI safe-shm==0.1.1, module safe_shm_py, CPython 3.11 wheels
only) is installed for the benchmark only (benchmarks/run_all.sh), never a
dependency of the package: where it is missing (3.13t) seqlock_py's rows
run alone and the report says why.  A benchmark, never a test: no figure
fails the run.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import queue
import resource
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import (BenchParser, fmt_rate, loadavg, report_head,  # noqa: E402
                     result_head, result_tail, save_result)

from seqlock_py import SeqRecord  # noqa: E402

RESULT = "shared_reads_"
CHUNK = 1000  # reads between two looks at the clock
STOP_EVERY = 100  # flat-out stores between two looks at the stop flag
TIMEOUT = 60.0  # set-up and hand-over deadlines, seconds
GOAL = 1.2

SEQ = "seqlock_py"
SAFE = "safe-shm"
READ_INTO = "seqlock_py read_into(buf)"
READER_INTO = "seqlock_py reader_into(buf)"
READ = "seqlock_py read()"
LOAD = "safe-shm load()"
READERS = (READ_INTO, LOAD, READER_INTO, READ)  # a round's order (reversed every other)
CONTENDER = {READ_INTO: SEQ, READER_INTO: SEQ, READ: SEQ, LOAD: SAFE}
PEERS = {
    SAFE: {"module": "safe_shm_py", "requirement": "safe-shm==0.1.1",
           "wheels": "cp311 only"},
}

# What each contender's read and write do (seen in safe-shm 0.1.1: its
# store() under strace, its load() against a sequence word left odd).
SEMANTICS = {
    SEQ: "a latch (two copies): a read never waits for a writer, even one "
         "stopped inside its section; read_into/reader_into copy into the "
         "caller's buffer and return the sequence (an int); read() returns a "
         "named tuple of fresh values",
    SAFE: "one copy: load() retries while the sequence is odd, without "
          "releasing the GIL, so a writer stopped inside store() stops its "
          "readers (and every other thread of their processes); load() "
          "returns a fresh float (small) or a new StampedF64 (large) each "
          "call; store() makes a futex wake system call each time",
}
RECORDS = ("small", "large")
RECORD_LABEL = {"small": "1 float64",
                "large": "StampedF64's fields: 2 uint64, 1 float64"}
FIELDS = {"small": {"v": "d"},
          "large": {"timestamp_ns": "Q", "sequence": "Q", "data": "d"}}
WRITERS = ("flat out", "1 kHz")
READER_COUNTS = (1, 2)
CASES = [(rec, w, n) for rec in RECORDS for w in WRITERS for n in READER_COUNTS]


def peer_missing(name):
    """Why a peer cannot run here, or None."""
    if name == SEQ:
        return None
    peer = PEERS[name]
    if importlib.util.find_spec(peer["module"]) is None:
        return (f"{peer['requirement']} is not installed for this interpreter "
                f"(its wheels: {peer['wheels']}; benchmarks/run_all.sh installs "
                "it where a wheel exists)")
    return None


def pin(cpu):
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def placement(mode, nreaders):
    """(the writer's CPU, [each reader's CPU]); None: unpinned."""
    if mode == "none" or not hasattr(os, "sched_getaffinity"):
        return None, [None] * nreaders
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) == 1:
        return cpus[0], [cpus[0]] * nreaders
    rest = cpus[1:]
    return cpus[0], [rest[i % len(rest)] for i in range(nreaders)]


# ---- the writer process ---------------------------------------------------------

def open_writer(contender, record, name):
    """(publish(i, x), the writer object): the channel created under
    name, and a function storing one value (i for the integers, x for
    the float)."""
    if contender == SEQ:
        rec = SeqRecord.create_shared(name, **FIELDS[record])
        update = rec.update
        if record == "small":
            def publish(i, x):
                update(v=x)
        else:
            def publish(i, x):
                update(timestamp_ns=i, sequence=i, data=x)
        return publish, rec
    import safe_shm_py
    if record == "small":
        w = safe_shm_py.SeqlockWriterF64(name)
        store = w.store

        def publish(i, x):
            store(x)
    else:
        w = safe_shm_py.SeqlockWriterStampedF64(name)
        store, s = w.store, safe_shm_py.StampedF64()

        def publish(i, x):
            s.timestamp_ns = i
            s.sequence = i
            s.data = x
            store(s)
    return publish, w


def flat_out(contender, record, w, stop):
    """Store as fast as possible until stop is set; the stores made.  The
    loops are written out per contender and record, with what they call
    in fast locals, so that no wrapper's call slows the writer."""
    i, x = 0, 0.0
    if contender == SEQ:
        update = w.update
        if record == "small":
            while not stop.value:
                for _ in range(STOP_EVERY):
                    x += 1.0
                    update(v=x)
                i += STOP_EVERY
        else:
            while not stop.value:
                for _ in range(STOP_EVERY):
                    i += 1
                    x += 1.0
                    update(timestamp_ns=i, sequence=i, data=x)
        return i
    store = w.store
    if record == "small":
        while not stop.value:
            for _ in range(STOP_EVERY):
                x += 1.0
                store(x)
            i += STOP_EVERY
    else:
        import safe_shm_py
        s = safe_shm_py.StampedF64()
        while not stop.value:
            for _ in range(STOP_EVERY):
                i += 1
                x += 1.0
                s.timestamp_ns = i
                s.sequence = i
                s.data = x
                store(s)
    return i


def paced(publish, rate, stop):
    """One store per 1/rate s on a fixed schedule (a late store is made at
    once) until stop is set; the stores made."""
    clock, sleep = time.perf_counter, time.sleep
    period = 1.0 / rate
    t0 = clock()
    i = 0
    while not stop.value:
        i += 1
        due = t0 + i * period
        now = clock()
        if now < due:
            sleep(due - now)
        publish(i, float(i))
    return i


def writer_main(contender, record, name, rate, cpu, barrier, stop, results):
    pin(cpu)
    w = None
    try:
        publish, w = open_writer(contender, record, name)
        publish(0, 0.0)
        barrier.wait(timeout=TIMEOUT)  # the channel exists
        barrier.wait(timeout=TIMEOUT)  # every reader is set up: go
        t0 = time.perf_counter()
        if rate is None:
            n = flat_out(contender, record, w, stop)
        else:
            n = paced(publish, rate, stop)
        results.put(("writer", n, time.perf_counter() - t0))
    except BaseException:
        barrier.abort()
        raise
    finally:
        publish = None
        if contender == SEQ and w is not None:
            w.close()  # unlinks the name
        # safe-shm's writer unlinks its segment when it goes


# ---- the reader processes ---------------------------------------------------------

def run_for(seconds, chunk):
    """chunk() (CHUNK reads) again and again for seconds: its row (reads,
    wall and CPU seconds, context switches: voluntary ones are sleeps,
    involuntary ones preemptions, by another process on the CPU)."""
    clock, cpu = time.perf_counter, time.process_time
    n = 0
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    c0, t0 = cpu(), clock()
    until = t0 + seconds
    while clock() < until:
        chunk()
        n += CHUNK
    t1, c1 = clock(), cpu()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    return {"reads": n, "wall_s": t1 - t0, "cpu_s": c1 - c0,
            "voluntary_switches": ru1.ru_nvcsw - ru0.ru_nvcsw,
            "involuntary_switches": ru1.ru_nivcsw - ru0.ru_nivcsw}


def seq_chunk(reader, rec):
    buf = bytearray(rec.nbytes)
    if reader == READ_INTO:
        def chunk(f=rec.read_into, buf=buf, rng=range(CHUNK)):
            for _ in rng:
                f(buf)
    elif reader == READER_INTO:
        def chunk(into=rec.reader_into(buf), rng=range(CHUNK)):
            for _ in rng:
                into()
    else:
        def chunk(read=rec.read, rng=range(CHUNK)):
            for _ in rng:
                read()
    return chunk


def safe_chunk(record, name):
    import safe_shm_py
    cls = (safe_shm_py.SeqlockReaderF64 if record == "small"
           else safe_shm_py.SeqlockReaderStampedF64)
    r = cls(name)

    def chunk(load=r.load, rng=range(CHUNK)):
        for _ in rng:
            load()
    return chunk, r


def reader_main(reader, record, name, seconds, cpu, barrier, results, index):
    pin(cpu)
    rec = chunk = keep = None
    try:
        barrier.wait(timeout=TIMEOUT)  # the channel exists
        if CONTENDER[reader] == SEQ:
            rec = SeqRecord.attach_shared(name, **FIELDS[record])
            chunk = seq_chunk(reader, rec)
        else:
            chunk, keep = safe_chunk(record, name)
        chunk()  # warm-up: the interpreter specializes the loop
        barrier.wait(timeout=TIMEOUT)
        row = run_for(seconds, chunk)
        if rec is not None:
            row["retries"] = rec.read_retries
            row["fallbacks"] = rec.read_fallbacks
        results.put((index, row))
    except BaseException:
        barrier.abort()
        raise
    finally:
        chunk = keep = None
        if rec is not None:
            rec.close()


# ---- one run, one round ----------------------------------------------------------

def unlink_leftover(contender, name):
    """Remove the channel's name if its writer died before it could."""
    if contender == SAFE:
        import safe_shm_py
        if safe_shm_py.shm_exists(name):
            safe_shm_py.shm_remove(name)
    elif os.path.exists(os.path.join("/dev/shm", name)):
        os.unlink(os.path.join("/dev/shm", name))


def take(results, procs, timeout):
    """The next result; RuntimeError as soon as a process has failed (its
    traceback is on stderr) or at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return results.get(timeout=0.5)
        except queue.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if failed:
                raise RuntimeError(f"a process exited with {failed[0]}") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"no result in {timeout:g} s") from None


def one_run(ctx, reader, record, writer, nreaders, args):
    """One writer and nreaders readers of `reader` for --seconds: the
    readers' rows and the writer's stores/s."""
    contender = CONTENDER[reader]
    name = f"seqlock_bench_reads_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    rate = None if writer == "flat out" else args.rate
    wcpu, rcpus = placement(args.pin, nreaders)
    barrier = ctx.Barrier(nreaders + 1)
    stop = ctx.RawValue("b", 0)
    results = ctx.Queue()
    procs = [ctx.Process(target=writer_main, args=(
        contender, record, name, rate, wcpu, barrier, stop, results))]
    procs += [ctx.Process(target=reader_main, args=(
        reader, record, name, args.seconds, rcpus[i], barrier, results, i))
        for i in range(nreaders)]
    try:
        for p in procs:
            p.start()
        got = [take(results, procs, args.seconds + TIMEOUT) for _ in range(nreaders)]
        stop.value = 1
        got.append(take(results, procs, TIMEOUT))
        for p in procs:
            p.join(TIMEOUT)
            if p.exitcode != 0:
                raise RuntimeError(f"{reader}: a process exited with {p.exitcode}")
    finally:
        stop.value = 1
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        unlink_leftover(contender, name)
    (_, stores, wall), = [g for g in got if g[0] == "writer"]
    rows = [r for _, r in sorted(g for g in got if g[0] != "writer")]
    for r in rows:
        r["per_s"] = r["reads"] / r["wall_s"]
        r["cpu_ns"] = r["cpu_s"] / r["reads"] * 1e9
    run = {"readers": rows, "writer_per_s": stores / wall,
           "per_s": statistics.mean(r["per_s"] for r in rows),
           "cpu_ns": statistics.mean(r["cpu_ns"] for r in rows),
           "cpu_share": statistics.mean(r["cpu_s"] / r["wall_s"] for r in rows)}
    if contender == SEQ:
        reads = sum(r["reads"] for r in rows)
        run["retries_per_read"] = sum(r["retries"] for r in rows) / reads
        run["fallbacks"] = sum(r["fallbacks"] for r in rows)
    return run


def cpu_times():
    """(wall, machine busy CPU s, this process's and its reaped children's
    CPU s), to tell the load other processes put on the machine; None
    without /proc/stat."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    t = os.times()
    return (time.monotonic(), (sum(ticks) - ticks[3] - ticks[4]) / hz,
            t.user + t.system + t.children_user + t.children_system)


def others(before, after):
    if before is None or after is None:
        return float("nan")
    return max(0.0, ((after[1] - before[1]) - (after[2] - before[2]))
               / (after[0] - before[0]))


def measure(args, out, log=print):
    ctx = multiprocessing.get_context("spawn")
    readers = [r for r in READERS if r not in out["skipped_readers"]]
    rounds = []
    for rnd in range(args.repeats):
        t0, c0 = time.perf_counter(), cpu_times()
        order = readers if rnd % 2 == 0 else readers[::-1]
        runs = {}
        for case in CASES:
            record, writer, n = case
            for reader in order:
                runs[(*case, reader)] = one_run(ctx, reader, record, writer, n, args)
        rounds.append(runs)
        out["others_cpu_rounds"].append(others(c0, cpu_times()))
        out["load_rounds"].append(loadavg())
        log(f"# round {rnd + 1}/{args.repeats}: {time.perf_counter() - t0:.1f} s, "
            f"load average {out['load_rounds'][-1]:.2f}")
    out["cells"] = cells(rounds, readers)
    out["headline"] = headline(rounds, readers)
    out["flat_vs_paced"] = flat_vs_paced(rounds, readers)


def spread(values):
    return [min(values), max(values)]


def cells(rounds, readers):
    out = []
    for record, writer, n in CASES:
        for reader in readers:
            rows = [r[(record, writer, n, reader)] for r in rounds]
            cell = {"record": record, "writer": writer, "readers": n, "reader": reader,
                    "per_s": statistics.median(x["per_s"] for x in rows),
                    "cpu_ns": statistics.median(x["cpu_ns"] for x in rows),
                    "cpu_share": statistics.median(x["cpu_share"] for x in rows),
                    "writer_per_s": statistics.median(x["writer_per_s"] for x in rows),
                    "rounds": rows}
            if CONTENDER[reader] == SEQ:
                cell["retries_per_read"] = statistics.median(
                    x["retries_per_read"] for x in rows)
                cell["fallbacks"] = sum(x["fallbacks"] for x in rows)
            if LOAD in readers:
                vs = [x["per_s"] / r[(record, writer, n, LOAD)]["per_s"]
                      for x, r in zip(rows, rounds)]
                cell["vs_load"] = statistics.median(vs)
                cell["vs_load_spread"] = spread(vs)
            out.append(cell)
    return out


def headline(rounds, readers):
    """Per case: read_into's reads/s over load()'s, per round."""
    if LOAD not in readers:
        return []
    out = []
    for record, writer, n in CASES:
        pairs = [(r[(record, writer, n, READ_INTO)], r[(record, writer, n, LOAD)])
                 for r in rounds]
        ratios = [a["per_s"] / b["per_s"] for a, b in pairs]
        # the same on CPU time: what a read costs, whatever else ran on its CPU
        cpu_ratios = [b["cpu_ns"] / a["cpu_ns"] for a, b in pairs]
        med = statistics.median(ratios)
        out.append({"record": record, "writer": writer, "readers": n,
                    "read_into_per_s": statistics.median(a["per_s"] for a, _ in pairs),
                    "load_per_s": statistics.median(b["per_s"] for _, b in pairs),
                    "ratio": med, "spread": spread(ratios), "rounds": ratios,
                    "writer_per_s": {SEQ: statistics.median(a["writer_per_s"] for a, _ in pairs),
                                     SAFE: statistics.median(b["writer_per_s"] for _, b in pairs)},
                    "cpu_ratio": statistics.median(cpu_ratios),
                    "cpu_spread": spread(cpu_ratios),
                    "goal": GOAL if writer == "flat out" else None,
                    "met": med >= GOAL if writer == "flat out" else None})
    return out


def flat_vs_paced(rounds, readers):
    """Per reader, record and reader count: CPU ns per read under the
    flat-out writer over under the 1 kHz one, per round."""
    out = []
    for record in RECORDS:
        for n in READER_COUNTS:
            for reader in readers:
                flat = [r[(record, "flat out", n, reader)]["cpu_ns"] for r in rounds]
                slow = [r[(record, "1 kHz", n, reader)]["cpu_ns"] for r in rounds]
                ratios = [f / s for f, s in zip(flat, slow)]
                out.append({"record": record, "readers": n, "reader": reader,
                            "flat_ns": statistics.median(flat),
                            "paced_ns": statistics.median(slow),
                            "ratio": statistics.median(ratios), "spread": spread(ratios)})
    return out


# ---- the report -------------------------------------------------------------------

def rate(r):
    return fmt_rate(r).strip()


def pin_text(out):
    if out["pin"] == "none":
        return "placement: left to the scheduler (no pinning), for every contender alike"
    w, rs = out["placement"]["writer"], out["placement"]["readers"]
    shared = len(set(rs)) < len(rs) or w in rs
    return (f"placement: the writer pinned to CPU {w}, readers to CPU "
            f"{', '.join(map(str, sorted(set(rs))))}"
            + ("; the 2-reader cases share a CPU (each reader gets about half "
               "of it: its reads/s halve, its CPU ns per read do not)" if shared else "")
            + "; every contender alike")


def table(out):
    lines = []
    lines.append(f"Reads per reader process, medians over {out['repeats']} rounds of "
                 f"{out['seconds']:g} s; the 1 kHz writer at {out['rate']:g} stores/s; "
                 f"{pin_text(out)}.")
    for name, why in out["skipped"].items():
        lines.append(f"\n{name}: skipped: {why}")
    peer = bool(out["headline"])
    if peer:
        lines += ["", f"Headline: seqlock_py `read_into(buf)` reads/s over safe-shm "
                  f"`load()` reads/s, the ratio per round (goal >= {GOAL:g}x with the "
                  "flat-out writer):", "",
                  "| record | writer | readers | read_into(buf) | load() | ratio | spread "
                  "| goal | on CPU time | spread | writer stores/s: seqlock_py, safe-shm |",
                  "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |"]
        for h in out["headline"]:
            lo, hi = h["spread"]
            clo, chi = h["cpu_spread"]
            goal = "-" if h["goal"] is None else ("met" if h["met"] else "missed")
            lines.append(f"| {h['record']} | {h['writer']} | {h['readers']} | "
                         f"{rate(h['read_into_per_s'])} | {rate(h['load_per_s'])} | "
                         f"{h['ratio']:.2f}x | {lo:.2f}-{hi:.2f} | {goal} | "
                         f"{h['cpu_ratio']:.2f}x | {clo:.2f}-{chi:.2f} | "
                         f"{rate(h['writer_per_s'][SEQ])}, {rate(h['writer_per_s'][SAFE])} |")
        lines.append("\n(\"on CPU time\": load()'s CPU ns per read over read_into's, "
                     "per round: the same comparison, blind to time a reader spent "
                     "preempted by other processes.  A flat-out writer is each "
                     "contender's own: safe-shm's store() makes a futex wake system "
                     "call every time, so its writer stores less often.)")
    lines += ["", "Every reader (CPU share: a reader's CPU time over its wall time; "
              "retries: the record's read_retries per read, and its read_fallbacks "
              "summed over rounds; safe-shm counts none):", "",
              "| record | writer | readers | reader | reads/s | CPU ns/read | CPU share "
              "| retries/read | fallbacks | writer stores/s |" + (" vs load() |" if peer else ""),
              "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
              + (" ---: |" if peer else "")]
    for c in out["cells"]:
        retries = (f"{c['retries_per_read']:.4f}" if "retries_per_read" in c else "n/a")
        fallbacks = str(c["fallbacks"]) if "fallbacks" in c else "n/a"
        vs = f" {c['vs_load']:.2f}x |" if peer else ""
        lines.append(f"| {c['record']} | {c['writer']} | {c['readers']} | {c['reader']} | "
                     f"{rate(c['per_s'])} | {c['cpu_ns']:.1f} | {c['cpu_share']:.2f} | "
                     f"{retries} | {fallbacks} | "
                     f"{rate(c['writer_per_s'])} |{vs}")
    lines += ["", "Cost per read (CPU ns) under the flat-out writer over under the 1 kHz "
              "one, per round:", "",
              "| record | readers | reader | flat out ns | 1 kHz ns | ratio | spread |",
              "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for f in out["flat_vs_paced"]:
        lo, hi = f["spread"]
        lines.append(f"| {f['record']} | {f['readers']} | {f['reader']} | "
                     f"{f['flat_ns']:.1f} | {f['paced_ns']:.1f} | {f['ratio']:.2f}x | "
                     f"{lo:.2f}-{hi:.2f} |")
    lines += [f"\n({name}: {what})" for name, what in out["semantics"].items()]
    lines.append("\nRecords: " + "; ".join(f"{k}: {v}" for k, v in RECORD_LABEL.items())
                 + ". Other processes kept at most "
                 f"{max(out['others_cpu_rounds']):.2f} CPUs busy in a round.")
    return "\n".join(lines)


def main(argv=None):
    p = BenchParser(__doc__, RESULT)
    p.add_seconds(full=1.0, quick=0.05, help="each run's reading time, in seconds")
    p.add_repeats(full=5, quick=1)
    p.add_setting("--rate", full=1000, quick=1000,
                  help="the paced writer's stores per second")
    p.add_argument("--pin", choices=("split", "none"), default="split",
                   help="split: the writer on one CPU, the readers on the others "
                        "(default); none: the scheduler places them")
    p.add_label()
    args = p.parse_args(argv)
    if args.seconds <= 0 or args.rate <= 0 or args.repeats < 1:
        p.error("--seconds and --rate positive, --repeats at least 1")
    skipped = {name: why for name in PEERS if (why := peer_missing(name))}
    wcpu, rcpus = placement(args.pin, max(READER_COUNTS))
    out = result_head({"label": args.label, "seconds": args.seconds,
                       "repeats": args.repeats, "rate": args.rate, "pin": args.pin,
                       "placement": {"writer": wcpu, "readers": rcpus},
                       "chunk": CHUNK, "fields": FIELDS, "skipped": skipped,
                       "semantics": {k: v for k, v in SEMANTICS.items() if k not in skipped},
                       "skipped_readers": [r for r in READERS if CONTENDER[r] in skipped],
                       "others_cpu_rounds": [], "load_rounds": []})
    for name, why in skipped.items():
        print(f"# {name}: skipped: {why}")
    measure(args, out)
    result_tail(out)
    print(report_head("bench_shared_reads", out,
                      f"--seconds {args.seconds:g} --repeats {args.repeats} "
                      f"--rate {args.rate:g} --pin {args.pin}"))
    out["table"] = table(out)
    print(out["table"])
    save_result(args, out, RESULT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
