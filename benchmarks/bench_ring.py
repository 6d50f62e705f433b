"""A ring that delivers every change: a SeqRing's append and per-entry read
costs against a SeqRecord's, one writer and two reader processes against
the rings of PyPI peers, and the wake-up of a reader asleep in wait().

    python -P benchmarks/bench_ring.py [--quick] [--repeats N] [--seconds S]
        [--peer-seconds S] [--rate R] [--writes N]
        [--parts append,entry,peers,bound,wake] [--label TEXT] [--json PATH]

append  ns per ring.append() of 5 scalar fields (a, b: float64, c, d:
        int64, e: float64) against rec.update() of the same 5 fields, in
        this process's memory, then both in multiprocessing.shared_memory
        (SeqRing.create / SeqRecord.create); appends/s and the rate ratio
        (update's ns over append's, per round; target >= 0.8).
entry   A reader's cost per entry delivered, the same 5-field record: a
        ring of capacity 4096, 1,000 entries appended (not timed), then one
        reader.poll() (timed) returning them as (sequence, snapshot) pairs;
        the same with one entry per poll (each poll timed on its own: the
        clock's own cost is in it); ring.read_last(1000, out=preallocated)
        per row; against rec.read_into(out) of the record into a
        preallocated np.empty((), rec.dtype) (the baseline; target for
        poll <= 1.5x) and rec.read().
peers   One writer process and two reader processes on the same work: a
        tick {t: int64, price, bid, ask: float64, size: int64}, t being
        time.perf_counter_ns() (CLOCK_MONOTONIC: one clock for every
        process) taken as the entry is published.  Two loads of --peer-seconds
        each: "paced" (--rate entries/s: the writer catches up on its
        schedule after each sleep of 1/rate) and "flat out".  Per reader:
        entries/s delivered (delivered over the time from the writer's
        start to the reader's sight of the last entry), missed, latency
        p50/p99/max (the reader's clock as the entry is handed to it, minus
        t), CPU seconds; the writer's entries/s.  Each reader checks that
        delivered + missed = appended ("accounted").  Contenders:
          seqlock_py SeqRing  capacity 4096 in multiprocessing.shared_memory;
              readers loop reader.wait(), reader.poll() (futex wait),
              missed from reader.missed.
          zerochannel         BytesWriter/BytesReader, entry_count 4096, the
              tick packed with struct ("<qdddq", 40 bytes: the same layout);
              the writer writes bytes, readers read(out=uint8 array) until
              None and unpack it; no wait: a reader naps POLL_NAP when
              nothing is new; missed from gaps in entry_seq.
          safe-shm            CyclicBufferWriterStampedF64: its binding's one
              ring, capacity 64 (fixed at its build), entries
              {timestamp_ns, sequence, data: one float64}: the tick's t,
              its index, its price (the other fields do not fit); readers
              follow total_writes() and try_get(reverse_index), checking
              the sequence they get; no wait bound in Python: the same
              nap; missed from the sequences skipped.
        A peer not installed (they are installed for the benchmark only:
        benchmarks/run_all.sh, pip --only-binary=:all:) or without a wheel
        for this interpreter is skipped, the reason printed and kept in the
        JSON.  The contenders take turns within each round.
bound   peers' flat-out run of the SeqRing alone (one writer flat out, two
        reader processes, --peer-seconds a run), its readers taking at
        most max_entries a poll (None: up to the capacity, 4,096; then
        1024, 256, 64, 16), the bounds taking turns within each round: the
        age of each delivered entry when poll() hands it over
        (p50/p99/max), also in capacities' ages (a capacity's age:
        capacity entries at the writer's rate), the p99 against the
        unbounded readers' of the same round, entries per poll, missed,
        entries/s, and the collector's passes in the readers (gc.callbacks:
        how many, their seconds, the longest).
wake    Wake-up from an append in another process to a reader asleep in
        reader.wait(), beside rec.wait(seq) woken by rec.update() (both in
        shared memory, the writer a spawned process, the waiter this
        process's main thread), with bench_wait.py's latency harness: its
        writer (a write every 5-10 ms, uniformly random, so the waiter is
        asleep at each one; t = time.monotonic_ns() in the write), its
        rec.wait() waiter and its per-round figures.  --writes per
        contender and round; p50/p99/max per round, medians over rounds.

Each round times each contender of a part in turn, so the machine's noise
falls on all of them alike; ratios are taken per round, then the median
over rounds.  Absolute numbers depend on the (shared, noisy) machine.
"""

from __future__ import annotations

import array
import functools
import gc
import importlib.util
import multiprocessing
import os
import statistics
import struct
import sys
import time
import types
from multiprocessing import shared_memory

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_numpy import side_by_side  # noqa: E402
from bench_wait import (PAUSE, TIMEOUT, WAIT_TIMEOUT,  # noqa: E402
                        round_row, run_writer, wait_waiter)
from bench_wait import FIELDS as WAKE_FIELDS  # noqa: E402
from harness import (UNROLL, BenchParser, attach_shm, call_loop,  # noqa: E402
                     ns_per_op, report_head, result_head, run_parts)

import numpy as np  # noqa: E402

from seqlock_py import SeqRecord, SeqRing  # noqa: E402

RESULT = "ring_"
PARTS = ("append", "entry", "peers", "bound", "wake")
SMALL = {"a": "d", "b": "d", "c": "q", "d": "q", "e": "d"}
VALUES = {"a": 1.0, "b": 2.0, "c": 3, "d": 4, "e": 5.0}
CAPACITY = 4096
BATCH = 1000
TURNS = 5
TICK = {"t": "q", "price": "d", "bid": "d", "ask": "d", "size": "q"}
TICK_STRUCT = struct.Struct("<qdddq")  # the same fields for byte channels
POLL_NAP = 0.0001  # a peer's reader without a wait naps this long
LOADS = ("paced", "flat out")
RING = "seqlock_py SeqRing"
ZC = "zerochannel"
SAFE = "safe-shm"
CONTENDERS = (RING, ZC, SAFE)
# bound: poll()'s max_entries for the SeqRing's readers (None: capacity)
BOUNDS = (None, 1024, 256, 64, 16)


def bounded(max_entries):
    """The name of a SeqRing contender whose readers poll(max_entries)."""
    return RING if max_entries is None else f"{RING}, poll(max_entries={max_entries})"


RINGS = {bounded(m): m for m in BOUNDS}
# What benchmarks/run_all.sh installs (pip --only-binary=:all:), and where
# the wheels stop.
PEERS = {
    ZC: {"module": "zerochannel", "requirement": "zerochannel==0.1.2",
         "wheels": "cp311-abi3 manylinux_2_34 only (no free-threaded build "
                   "can load an abi3 wheel)"},
    SAFE: {"module": "safe_shm_py", "requirement": "safe-shm==0.1.1",
           "wheels": "cp311 only"},
}
SEMANTICS = {
    RING: "writer never waits for readers; readers sleep in reader.wait() "
          "(futex) and take every entry with reader.poll(); a lapped reader "
          "is told reader.missed; any number of readers; entries of any "
          "record layout",
    ZC: "writer never waits for readers; no wait for news (readers poll: "
        "a nap of POLL_NAP when read() returns None); missed not reported, "
        "derived from gaps in entry_seq; byte or float64 entries of a fixed "
        "length (the tick packed with struct)",
    SAFE: "writer never waits for readers; no wait bound in Python "
          "(readers poll total_writes(): a nap of POLL_NAP); missed not "
          "reported, derived from the sequence the writer stores; the "
          "binding's only ring holds {timestamp_ns, sequence, one float64}, "
          "64 entries (a C++ template parameter), addressed from the newest "
          "(try_get(reverse_index)): a reader takes every entry by checking "
          "each one's sequence",
}
END = -1  # size (or price) of the last entry: the writer is done


# ---- append ------------------------------------------------------------------

def part_append(args, out, log):
    size_ring = SeqRing.buffer_size(CAPACITY, **SMALL)
    size_rec = SeqRecord.buffer_size(**SMALL)
    shm_ring = shared_memory.SharedMemory(create=True, size=size_ring)
    shm_rec = shared_memory.SharedMemory(create=True, size=size_rec)
    try:
        rec = SeqRecord(**SMALL)
        ring = SeqRing(CAPACITY, **SMALL)
        srec = SeqRecord.create(shm_rec.buf, **SMALL)
        sring = SeqRing.create(shm_ring.buf, CAPACITY, **SMALL)
        update, append = rec.update, ring.append
        supdate, sappend = srec.update, sring.append
        base = "rec.update() of 5 fields"
        result = side_by_side(args, {
            base: lambda: update(a=1.0, b=2.0, c=3, d=4, e=5.0),
            "ring.append() of 5 fields": lambda: append(a=1.0, b=2.0, c=3, d=4, e=5.0),
            "shared memory: rec.update()": lambda: supdate(a=1.0, b=2.0, c=3, d=4, e=5.0),
            "shared memory: ring.append()": lambda: sappend(a=1.0, b=2.0, c=3, d=4, e=5.0),
        }, base)
        shared_base = result["shared memory: rec.update()"]["rounds_ns"]
        for name, cell in result.items():
            cell["per_s"] = 1e9 / cell["ns"]
            against = shared_base if name.startswith("shared") else result[base]["rounds_ns"]
            # the rate ratio: the update's time over this call's, per round
            cell["rate_vs_update"] = statistics.median(
                b / t for t, b in zip(cell["rounds_ns"], against))
        out["append"] = result
        out["append_target"] = ">= 0.8 (rate of ring.append() / rate of rec.update())"
        del rec, ring, srec, sring, update, append, supdate, sappend
    finally:
        for shm in (shm_ring, shm_rec):
            shm.close()
            shm.unlink()


# ---- entry -------------------------------------------------------------------

def poll_timer(ring, batch):
    """run(n): about n entries, `batch` appended (not timed) then taken by
    one poll (timed) at a time; the seconds the polls took, scaled to n
    entries."""
    append = ring.append
    reader = ring.reader()
    poll = reader.poll
    clock = time.perf_counter

    def run(n):
        k = max(1, round(n / batch))
        total = 0.0
        for _ in range(k):
            for _ in range(batch):
                append(a=1.0, b=2.0, c=3, d=4, e=5.0)
            t0 = clock()
            got = poll()
            total += clock() - t0
            if len(got) != batch:
                raise RuntimeError(f"poll() returned {len(got)} of {batch}")
        return total * n / (k * batch)
    return run


def read_last_timer(ring, rows):
    for _ in range(rows):
        ring.append(a=1.0, b=2.0, c=3, d=4, e=5.0)
    out = np.empty(rows, ring.dtype)
    read_last = ring.read_last
    clock = time.perf_counter

    def run(n):
        """about n rows, `rows` a call; the seconds, scaled to n rows"""
        k = max(1, round(n / rows))
        t0 = clock()
        for _ in range(k):
            first, got = read_last(rows, out=out)
        t = clock() - t0
        if len(got) != rows:
            raise RuntimeError(f"read_last() returned {len(got)} rows of {rows}")
        return t * n / (k * rows)
    return run


def part_entry(args, out, log):
    rec = SeqRecord(**SMALL)
    rec.update(**VALUES)
    buf = np.empty((), rec.dtype)
    read_into, read = rec.read_into, rec.read
    base = "rec.read_into(out)"
    timers = {
        base: lambda n: call_loop(read_into, buf, n) / UNROLL,
        "rec.read()": lambda n: call_loop(read, None, n) / UNROLL,
        f"reader.poll() of {BATCH}, per entry": poll_timer(SeqRing(CAPACITY, **SMALL), BATCH),
        "reader.poll() of 1 entry": poll_timer(SeqRing(CAPACITY, **SMALL), 1),
        f"ring.read_last({BATCH}, out=...), per row": read_last_timer(
            SeqRing(CAPACITY, **SMALL), BATCH),
    }
    ns = ns_per_op(timers, args.seconds / TURNS, args.repeats)
    out["entry"] = {
        name: {"ns": statistics.median(v), "rounds_ns": v,
               "ratio": statistics.median(a / b for a, b in zip(v, ns[base])),
               "ratio_to_read": statistics.median(
                   a / b for a, b in zip(v, ns["rec.read()"]))}
        for name, v in ns.items()}
    out["entry_target"] = f"reader.poll() of {BATCH}, per entry <= 1.5x rec.read_into(out)"


# ---- peers: one writer, two readers ------------------------------------------

def peer_missing(name):
    """Why a peer cannot run here, or None."""
    if name == RING:
        return None
    peer = PEERS[name]
    if importlib.util.find_spec(peer["module"]) is None:
        return (f"{peer['requirement']} is not installed for this interpreter "
                f"(its wheels: {peer['wheels']}; benchmarks/run_all.sh installs "
                "it where a wheel exists)")
    return None


def paced(rate):
    """pace(i): before entry i, sleep until it is due (rate entries/s;
    None: never sleeps).  Entries that fell due during a sleep are written
    at once: the writer keeps to its schedule."""
    if rate is None:
        return None
    clock, sleep = time.perf_counter, time.sleep
    period = 1.0 / rate
    t0 = clock()

    def pace(i):
        due = t0 + i * period
        now = clock()
        if now < due:
            sleep(max(due - now, period))
    return pace


def writer_main(name, shm_name, seconds, rate, barrier, results):
    """The writer process: publish ticks for `seconds`, then the last entry
    (size END); put (appended, t_start, t_end) on results."""
    clock = time.perf_counter_ns
    shm = ring = channel = None
    try:
        if name in RINGS:
            shm = attach_shm(shm_name)
            ring = SeqRing.attach(shm.buf)
            append = ring.append

            def publish(i, size):
                append(t=clock(), price=100.0, bid=99.5, ask=100.5, size=size)
        elif name == ZC:
            import zerochannel
            channel = zerochannel.BytesWriter(shm_name, entry_length=TICK_STRUCT.size,
                                              entry_count=CAPACITY)
            write, pack = channel.write, TICK_STRUCT.pack

            def publish(i, size):
                write(pack(clock(), 100.0, 99.5, 100.5, size))
        else:
            import safe_shm_py
            channel = safe_shm_py.CyclicBufferWriterStampedF64(shm_name)
            insert = channel.insert
            s = safe_shm_py.StampedF64()

            def publish(i, size):
                s.sequence = i
                s.data = 100.0 if size >= 0 else float(END)
                s.timestamp_ns = clock()
                insert(s)
        barrier.wait(timeout=TIMEOUT)  # the channel exists
        barrier.wait(timeout=TIMEOUT)  # the readers are attached
        pace = paced(rate)
        t_start = time.perf_counter()
        end = t_start + seconds
        i = 0
        if pace is None:
            now = time.perf_counter
            while now() < end:
                for _ in range(100):
                    publish(i, 1)
                    i += 1
        else:
            now = time.perf_counter
            while now() < end:
                pace(i)
                publish(i, 1)
                i += 1
        t_end = time.perf_counter()
        publish(i, END)
        results.put(("writer", i + 1, t_start, t_end))
        # zerochannel and safe-shm unlink their segment when the writer
        # goes: stay until the readers are done.
        barrier.wait(timeout=TIMEOUT + seconds)
    except BaseException:
        barrier.abort()
        raise
    finally:
        ring = append = None  # noqa: F841 (they hold the buffer)
        if shm is not None:
            shm.close()


class GcTally:
    """The collector's passes while installed: count per generation, the
    seconds they took, the longest (gc.callbacks)."""

    def __init__(self):
        self.counts = [0, 0, 0]
        self.seconds = self.longest = 0.0
        self._t0 = None

    def __call__(self, phase, info):
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            took = time.perf_counter() - self._t0
            self.counts[info["generation"]] += 1
            self.seconds += took
            self.longest = max(self.longest, took)
            self._t0 = None

    def report(self):
        return {"gc_passes": self.counts, "gc_s": self.seconds,
                "gc_longest_ms": self.longest * 1e3}


def ring_consume(shm_name, deadline, max_entries=None, polls=None):
    """A SeqRing reader: wait(), then poll() (poll(max_entries) if given);
    each entry's age is taken when its poll returns.  polls, if given (a
    list), gets the number of polls that returned something, then the
    collector's passes meanwhile (GcTally.report())."""
    shm = attach_shm(shm_name)
    ring = SeqRing.attach(shm.buf)
    reader = ring.reader()
    wait = reader.wait
    poll = reader.poll if max_entries is None else functools.partial(reader.poll, max_entries)
    clock = time.perf_counter_ns
    lat = array.array("q")
    add = lat.append
    gc_tally = GcTally()
    yield
    gc.callbacks.append(gc_tally)
    delivered = calls = 0
    while True:
        if not wait(WAIT_TIMEOUT):
            if time.perf_counter() > deadline:
                raise RuntimeError("no end entry before the deadline")
            continue
        batch = poll()
        now = clock()
        for _, e in batch:
            add(now - e.t)
        delivered += len(batch)
        calls += bool(batch)
        if batch and batch[-1][1].size == END:
            break
    gc.callbacks.remove(gc_tally)
    if polls is not None:
        polls += [calls, gc_tally.report()]
    yield lat, delivered, reader.missed
    del reader, wait, poll, ring, batch, e  # they hold the buffer
    shm.close()


def zc_consume(name, deadline):
    import zerochannel
    channel = zerochannel.BytesReader(name)
    read = channel.read
    out = np.empty(TICK_STRUCT.size, np.uint8)
    unpack = TICK_STRUCT.unpack_from
    clock = time.perf_counter_ns
    sleep = time.sleep
    lat = array.array("q")
    add = lat.append
    yield
    delivered = missed = 0
    expect = 1  # entry_seq counts from 1
    while True:
        got = read(out=out)
        if got is None:
            sleep(POLL_NAP)
            if time.perf_counter() > deadline:
                raise RuntimeError("no end entry before the deadline")
            continue
        now = clock()
        seq = got[0]
        t, _, _, _, size = unpack(out)
        add(now - t)
        delivered += 1
        missed += seq - expect
        expect = seq + 1
        if size == END:
            break
    yield lat, delivered, missed


def safe_consume(name, deadline):
    import safe_shm_py
    channel = safe_shm_py.CyclicBufferReaderStampedF64(name)
    total_writes, try_get = channel.total_writes, channel.try_get
    cap = channel.capacity
    clock = time.perf_counter_ns
    sleep = time.sleep
    lat = array.array("q")
    add = lat.append
    nxt = total_writes()
    yield
    delivered = missed = 0
    done = False
    while not done:
        tw = total_writes()
        if tw == nxt:
            sleep(POLL_NAP)
            if time.perf_counter() > deadline:
                raise RuntimeError("no end entry before the deadline")
            continue
        if tw - nxt > cap - 1:  # the oldest slot may be the one being written
            missed += tw - (cap - 1) - nxt
            nxt = tw - (cap - 1)
        for k in range(nxt, tw):
            e = try_get(tw - 1 - k)
            if e is None or e.sequence != k:
                break  # overwritten or moved on since total_writes(): again
            add(clock() - e.timestamp_ns)
            delivered += 1
            nxt = k + 1
            if e.data == END:
                done = True
                break
    yield lat, delivered, missed


CONSUMERS = {ZC: zc_consume, SAFE: safe_consume}
CONSUMERS.update({name: functools.partial(ring_consume, max_entries=m)
                  for name, m in RINGS.items()})


def reader_main(name, shm_name, seconds, barrier, results, index):
    try:
        barrier.wait(timeout=TIMEOUT)  # the channel exists
        polls = []
        gen = CONSUMERS[name](shm_name, time.perf_counter() + seconds + TIMEOUT,
                              **({"polls": polls} if name in RINGS else {}))
        next(gen)
        cpu0 = os.times()
        barrier.wait(timeout=TIMEOUT)
        lat, delivered, missed = next(gen)
        t_done = time.perf_counter()
        cpu1 = os.times()
        next(gen, None)  # its clean-up
        a = np.frombuffer(lat, np.int64)
        p50, p99 = np.percentile(a, (50, 99)) / 1e3 if len(a) else (float("nan"),) * 2
        results.put((index, {
            "delivered": delivered, "missed": missed, "t_done": t_done,
            "p50_us": float(p50), "p99_us": float(p99),
            "max_us": float(a.max()) / 1e3 if len(a) else float("nan"),
            "cpu_s": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
            **({"polls": polls[0], **polls[1]} if polls else {})}))
        barrier.wait(timeout=TIMEOUT)  # the writer may go
    except BaseException:
        barrier.abort()
        raise


def one_run(ctx, name, seconds, rate):
    """One writer and two readers of contender `name` for `seconds`; the
    round's figures."""
    shm = None
    if name in RINGS:
        shm = shared_memory.SharedMemory(
            create=True, size=SeqRing.buffer_size(CAPACITY, **TICK))
        SeqRing.create(shm.buf, CAPACITY, **TICK).close()
        chan = shm.name
    elif name == ZC:
        chan = f"/seqlock_bench_ring_{os.getpid()}"
    else:
        chan = f"seqlock_bench_ring_{os.getpid()}"
    barrier = ctx.Barrier(3)
    results = ctx.Queue()
    procs = [ctx.Process(target=writer_main, args=(name, chan, seconds, rate, barrier, results))]
    procs += [ctx.Process(target=reader_main, args=(name, chan, seconds, barrier, results, i))
              for i in range(2)]
    try:
        for p in procs:
            p.start()
        got = [results.get(timeout=seconds + 2 * TIMEOUT) for _ in procs]
        for p in procs:
            p.join(TIMEOUT)
            if p.exitcode != 0:
                raise RuntimeError(f"{name}: a process exited with {p.exitcode}")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        if shm is not None:
            shm.close()
            shm.unlink()
        elif name == ZC:
            import zerochannel
            zerochannel.unlink(chan)
        elif name == SAFE:
            import safe_shm_py
            safe_shm_py.shm_remove(chan)
    (_, appended, t_start, t_end), = [g for g in got if g[0] == "writer"]
    readers = [r for i, r in sorted(g for g in got if g[0] != "writer")]
    for r in readers:
        r["per_s"] = r["delivered"] / (r.pop("t_done") - t_start)
        r["accounted"] = r["delivered"] + r["missed"] == appended
    return {"appended": appended, "writer_per_s": (appended - 1) / (t_end - t_start),
            "readers": readers}


def part_peers(args, out, log):
    ctx = multiprocessing.get_context("spawn")
    skipped = {name: why for name in CONTENDERS if (why := peer_missing(name))}
    for name, why in skipped.items():
        log(f"# peers: {name} skipped: {why}")
    runs = {(name, load): [] for name in CONTENDERS if name not in skipped
            for load in LOADS}
    for rnd in range(args.repeats):
        t0 = time.perf_counter()
        for name, load in runs:
            runs[name, load].append(one_run(ctx, name, args.peer_seconds,
                                            args.rate if load == "paced" else None))
        log(f"# peers round {rnd + 1}/{args.repeats}: {time.perf_counter() - t0:.1f} s")
    cells = []
    for (name, load), rows in runs.items():
        def med(key, rows=rows):
            return statistics.median(statistics.mean(r[key] for r in row["readers"])
                                     for row in rows)
        cells.append({
            "contender": name, "load": load,
            "rate": args.rate if load == "paced" else None,
            "writer_per_s": statistics.median(r["writer_per_s"] for r in rows),
            "reader_per_s": med("per_s"),
            "missed_fraction": statistics.median(
                sum(r["missed"] for r in row["readers"])
                / (2 * row["appended"]) for row in rows),
            "p50_us": med("p50_us"), "p99_us": med("p99_us"),
            "reader_cpu_s": med("cpu_s"),
            "accounted": all(r["accounted"] for row in rows for r in row["readers"]),
            "rounds": rows})
    out["peers"] = {
        "seconds": args.peer_seconds, "rate": args.rate, "capacity": CAPACITY,
        "poll_nap_s": POLL_NAP, "cells": cells, "skipped": skipped,
        "semantics": {k: v.replace("POLL_NAP", f"{POLL_NAP * 1e6:.0f} us")
                      for k, v in SEMANTICS.items()},
        "payload": {RING: "the 5-field tick", ZC: "the 5-field tick, 40 bytes",
                    SAFE: "t, index, price (StampedF64)"},
    }


# ---- bound: a flat-out run's readers with poll(max_entries) -------------------

def part_bound(args, out, log):
    ctx = multiprocessing.get_context("spawn")
    runs = {m: [] for m in BOUNDS}
    for rnd in range(args.repeats):
        t0 = time.perf_counter()
        for m in BOUNDS:
            runs[m].append(one_run(ctx, bounded(m), args.peer_seconds, None))
        log(f"# bound round {rnd + 1}/{args.repeats}: {time.perf_counter() - t0:.1f} s")

    def mean_of(row, key):
        return statistics.mean(r[key] for r in row["readers"])

    def age_us(row):
        """a capacity's age in this run: capacity entries at its writer's rate"""
        return CAPACITY / row["writer_per_s"] * 1e6

    cells = []
    for m, rows in runs.items():
        cells.append({
            "max_entries": m,
            "writer_per_s": statistics.median(r["writer_per_s"] for r in rows),
            "reader_per_s": statistics.median(mean_of(r, "per_s") for r in rows),
            "missed_fraction": statistics.median(
                sum(x["missed"] for x in r["readers"]) / (2 * r["appended"]) for r in rows),
            **{k: statistics.median(mean_of(r, k) for r in rows)
               for k in ("p50_us", "p99_us", "max_us")},
            "entries_per_poll": statistics.median(
                sum(x["delivered"] for x in r["readers"])
                / max(1, sum(x["polls"] for x in r["readers"])) for r in rows),
            "capacity_age_us": statistics.median(age_us(r) for r in rows),
            "p99_in_capacity_ages": statistics.median(
                mean_of(r, "p99_us") / age_us(r) for r in rows),
            "p50_in_capacity_ages": statistics.median(
                mean_of(r, "p50_us") / age_us(r) for r in rows),
            "p99_vs_unbounded": statistics.median(
                mean_of(r, "p99_us") / mean_of(u, "p99_us")
                for r, u in zip(rows, runs[None])),
            "p99_vs_unbounded_range": [f(mean_of(r, "p99_us") / mean_of(u, "p99_us")
                                         for r, u in zip(rows, runs[None]))
                                       for f in (min, max)],
            "gc_s": statistics.median(mean_of(r, "gc_s") for r in rows),
            "gc_passes": statistics.median(
                statistics.mean(sum(x["gc_passes"]) for x in r["readers"]) for r in rows),
            "gc_longest_ms": statistics.median(mean_of(r, "gc_longest_ms") for r in rows),
            "accounted": all(x["accounted"] for r in rows for x in r["readers"]),
            "rounds": rows})
    out["bound"] = {"seconds": args.peer_seconds, "capacity": CAPACITY, "cells": cells}


# ---- wake: bench_wait.py's harness, a ring beside a record --------------------

WAKE = ("rec.wait(seq), rec.update()", "reader.wait(), ring.append()")


class RingTally:
    """What bench_wait.round_row() reads: latencies, skipped, timeouts."""

    def __init__(self):
        self.lat = array.array("q")
        self.skipped = 0
        self.timeouts = 0


def ring_waiter(ring, barrier):
    """bench_wait.wait_waiter()'s twin: wait, take the clock, poll; one new
    entry is a sample (more: the waiter was not asleep, skipped)."""
    tally = RingTally()
    reader = ring.reader()
    wait, poll = reader.wait, reader.poll
    clock = time.monotonic_ns
    barrier.wait(timeout=TIMEOUT)
    while True:
        if not wait(WAIT_TIMEOUT):
            tally.timeouts += 1
            if tally.timeouts > 2:
                raise RuntimeError(f"no news for {WAIT_TIMEOUT} s, 3 times")
            continue
        now = clock()
        batch = poll()
        if not batch:
            continue
        if batch[-1][1].x < 0:
            return tally
        if len(batch) == 1:
            tally.lat.append(now - batch[0][1].t)
        else:
            tally.skipped += 1


def wake_writer(rec_shm, ring_shm, plan, barrier, results):
    """bench_wait.run_writer() for each item of plan, into the record or
    (append standing for update) the ring its contender names."""
    shms = [attach_shm(rec_shm), attach_shm(ring_shm)]
    rec = SeqRecord.attach(shms[0].buf, **WAKE_FIELDS)
    ring = SeqRing.attach(shms[1].buf)
    targets = dict(zip(WAKE, (rec, types.SimpleNamespace(update=ring.append))))
    try:
        for item in plan:
            run_writer(targets[item[1]], None, [item], barrier, results)
    finally:
        targets.clear()
        del rec, ring
        for shm in shms:
            shm.close()


def part_wake(args, out, log):
    ctx = multiprocessing.get_context("spawn")
    rec_shm = shared_memory.SharedMemory(create=True,
                                         size=SeqRecord.buffer_size(**WAKE_FIELDS))
    ring_shm = shared_memory.SharedMemory(
        create=True, size=SeqRing.buffer_size(CAPACITY, **WAKE_FIELDS))
    rec = SeqRecord.create(rec_shm.buf, **WAKE_FIELDS)
    ring = SeqRing.create(ring_shm.buf, CAPACITY, **WAKE_FIELDS)
    plan = [(rnd, name, "main", args.writes if rnd >= 0 else min(args.writes, 10))
            for rnd in range(-1, args.repeats) for name in WAKE]
    barrier, results = ctx.Barrier(2), ctx.Queue()
    proc = ctx.Process(target=wake_writer,
                       args=(rec_shm.name, ring_shm.name, plan, barrier, results))
    rounds = {name: [] for name in WAKE}
    try:
        proc.start()
        for item in plan:
            rnd, name, _, _ = item
            try:
                if name == WAKE[0]:
                    tally = wait_waiter(rec, None, barrier)
                else:
                    tally = ring_waiter(ring, barrier)
            except BaseException:
                barrier.abort()
                raise
            done = results.get(timeout=TIMEOUT)
            assert tuple(done) == item, (done, item)
            if rnd >= 0:
                rounds[name].append(round_row(tally))
            if name == WAKE[-1]:
                log(f"# wake {'warm-up' if rnd < 0 else f'round {rnd + 1}/{args.repeats}'}")
        proc.join(TIMEOUT)
        if proc.exitcode != 0:
            raise RuntimeError(f"writer process exit code {proc.exitcode}")
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
        rec = ring = None  # noqa: F841 (they hold the buffers)
        for shm in (rec_shm, ring_shm):
            shm.close()
            shm.unlink()
    out["wake"] = {
        "writes": args.writes, "pause_s": list(PAUSE),
        "cells": {name: {**{k: statistics.median(r[k] for r in rows)
                            for k in ("p50_us", "p90_us", "p99_us", "max_us")},
                         **{k: sum(r[k] for r in rows)
                            for k in ("samples", "skipped", "late", "timeouts")},
                         "rounds": rows}
                  for name, rows in rounds.items()}}


# ---- the report --------------------------------------------------------------

def report(out):
    print(report_head("bench_ring", out, f"--repeats {out['repeats']} --seconds "
                      f"{out['seconds']} --peer-seconds {out['peer_seconds']} "
                      f"--rate {out['rate']:g} --writes {out['writes']}"))
    for part in ("append", "entry"):
        if part in out:
            print(f"## {part} (target: {out[part + '_target']})")
            for name, c in out[part].items():
                extra = (f", {c['per_s']:,.0f}/s, rate {c['rate_vs_update']:.2f}x update's"
                         if "per_s" in c else f", {c['ratio_to_read']:.2f}x rec.read()")
                print(f"  {name}: {c['ns']:,.1f} ns, {c['ratio']:.2f}x{extra}")
    if "peers" in out:
        p = out["peers"]
        print(f"## peers: one writer, two reader processes, {p['seconds']:g} s a run")
        for c in p["cells"]:
            print(f"  {c['contender']}, {c['load']}: writer {c['writer_per_s']:,.0f}/s, "
                  f"each reader {c['reader_per_s']:,.0f}/s, missed "
                  f"{100 * c['missed_fraction']:.2f} %, latency p50 {c['p50_us']:,.1f} us, "
                  f"p99 {c['p99_us']:,.1f} us, reader CPU {c['reader_cpu_s']:.2f} s, "
                  f"accounted: {c['accounted']}")
        for name, why in p["skipped"].items():
            print(f"  {name}: skipped: {why}")
        for name, what in p["semantics"].items():
            if name not in p["skipped"]:
                print(f"  ({name}: {what}; payload: {p['payload'][name]})")
    if "bound" in out:
        b = out["bound"]
        print(f"## bound: a writer flat out, two reader processes taking at most "
              f"max_entries a poll, {b['seconds']:g} s a run, capacity {b['capacity']}")
        for c in b["cells"]:
            print(f"  max_entries={c['max_entries']}: writer {c['writer_per_s']:,.0f}/s "
                  f"(a capacity's age {c['capacity_age_us']:,.0f} us), each reader "
                  f"{c['reader_per_s']:,.0f}/s, {c['entries_per_poll']:,.1f} entries a poll, "
                  f"missed {100 * c['missed_fraction']:.1f} %, age p50 {c['p50_us']:,.0f} us "
                  f"({c['p50_in_capacity_ages']:.2f} capacity ages), p99 {c['p99_us']:,.0f} us "
                  f"({c['p99_in_capacity_ages']:.2f}), max {c['max_us']:,.0f} us; p99 "
                  f"{c['p99_vs_unbounded']:.2f}x the unbounded readers' (rounds "
                  f"{c['p99_vs_unbounded_range'][0]:.2f}-{c['p99_vs_unbounded_range'][1]:.2f}x); "
                  f"collector: {c['gc_passes']:g} passes, {c['gc_s'] * 1e3:.1f} ms, the "
                  f"longest {c['gc_longest_ms']:.1f} ms; accounted: {c['accounted']}")
    if "wake" in out:
        print("## wake: append/update in another process to a sleeping waiter")
        for name, c in out["wake"]["cells"].items():
            print(f"  {name}: p50 {c['p50_us']:.1f} us, p99 {c['p99_us']:.1f} us, "
                  f"max {c['max_us']:.1f} us; {c['samples']} samples, "
                  f"{c['skipped']} skipped, {c['timeouts']} timeouts")


def main(argv=None):
    parser = BenchParser(__doc__, RESULT)
    parser.add_seconds(0.5, 0.01, help="one contender's timing per round (append, "
                       "entry), in seconds")
    parser.add_setting("--peer-seconds", full=2.0, quick=0.2,
                       help="one peers run (one contender, one load), in seconds")
    parser.add_setting("--rate", full=10_000, quick=2_000,
                       help="the paced writer's entries per second (peers)")
    parser.add_setting("--writes", full=400, quick=20, type=int,
                       help="writes per contender and round (wake)")
    parser.add_repeats()
    parser.add_parts(PARTS)
    parser.add_label()
    args = parser.parse_args(argv)
    if (args.seconds <= 0 or args.peer_seconds <= 0 or args.rate <= 0
            or args.writes < 1 or args.repeats < 1 or set(args.parts) - set(PARTS)):
        parser.error("--seconds, --peer-seconds, --rate positive, --writes and "
                     "--repeats at least 1, --parts from " + ",".join(PARTS))
    out = result_head({"label": args.label, "seconds": args.seconds,
                       "peer_seconds": args.peer_seconds, "rate": args.rate,
                       "writes": args.writes, "repeats": args.repeats, "turns": TURNS,
                       "clock": time.get_clock_info("perf_counter").implementation})
    parts = {"append": part_append, "entry": part_entry, "peers": part_peers,
             "bound": part_bound, "wake": part_wake}
    return run_parts(args, out, parts, report, RESULT)


if __name__ == "__main__":
    sys.exit(main())
