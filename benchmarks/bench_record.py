"""Benchmark SeqRecord reads against the usual alternatives, in one run.

    python -P benchmarks/bench_record.py [--seconds 0.5] [--repeats 5]
                                         [--json PATH] [--sections ...]

Four measurements, each the median over --repeats rounds (contenders are
interleaved within a round, so machine noise hits them alike):

threads   one writer thread updates a 4-float record ~1000 times a second
          (time.sleep(0.001) between writes) while 1 or 2 reader threads
          call rec.read() for --seconds; compared with thread-local work of
          the same loop shape, with a threading.Lock around four float
          attributes, and with copy-on-write (the writer assigns a new tuple
          to state.snap, readers load it).
single    rec.read_into(buf) against near-empty C calls on one thread.
procs     2 reader processes ("spawn") on a SharedMemory record with one
          writer process, against a multiprocessing.Lock around four doubles
          in SharedMemory read with struct.unpack_from.

Results are ratios measured in the same run; the machine is shared and
noisy, so absolute numbers mean little.  A missed target is reported, never
an error: the exit status is non-zero only if something broke.
Stdlib only; runs on the GIL build and on free-threaded CPython.
"""

import argparse
import array
import json
import multiprocessing
import os
import statistics
import struct
import sys
import threading
import time
from multiprocessing import shared_memory

from seqlock_py import SeqRecord

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (UNROLL, attach_shm, calibrate, call_loop,  # noqa: E402
                     fmt_rate, interpreter_info, loadavg, run_phase)

FIELDS = {"a": "d", "b": "d", "c": "d", "d": "d"}
CHUNK = 256          # reads between two clock checks
WRITE_PERIOD = 0.001  # the writer sleeps this long between writes

# The targets: (ratio name, comparison, bound).
TARGETS = {
    "record_scaling/local_scaling": (">=", 0.85),
    "read/Lock (2 threads)": (">=", 4.0),
    "read/copy-on-write (2 threads)": (">", 1.0),
    "read_into/locked() time": ("<=", 1.2),
    "read/mp.Lock (2 processes)": (">=", 10.0),
}


# ---- threads: readers, writers, local work -------------------------------
#
# Each reader is one function run by every thread; everything it touches in
# its loop is a local it made itself (a per-thread bound method, its own
# range), because on 3.13t loading a shared object bumps the shared object's
# reference count.  Only what a contender shares by design is shared.

class Box:
    """Four float attributes (Lock contender) or one tuple (copy-on-write)."""

    def __init__(self):
        self.a = self.b = self.c = self.d = 0.0
        self.snap = (0.0, 0.0, 0.0, 0.0)


def reader_record(rec, lock, box, seconds):
    read = rec.read
    rng = range(CHUNK)
    clock = time.perf_counter
    n = 0
    yield  # the barrier
    t0 = clock()
    deadline = t0 + seconds
    while True:
        for _ in rng:
            read()
        n += CHUNK
        if clock() >= deadline:
            break
    yield n, clock() - t0


def reader_record_into(rec, lock, box, seconds):
    into = rec.read_into
    buf = bytearray(rec.nbytes)  # this thread's own buffer
    rng = range(CHUNK)
    clock = time.perf_counter
    n = 0
    yield
    t0 = clock()
    deadline = t0 + seconds
    while True:
        for _ in rng:
            into(buf)
        n += CHUNK
        if clock() >= deadline:
            break
    yield n, clock() - t0


def reader_lock(rec, lock, box, seconds):
    acquire = lock.acquire
    release = lock.release
    rng = range(CHUNK)
    clock = time.perf_counter
    n = 0
    yield
    t0 = clock()
    deadline = t0 + seconds
    while True:
        for _ in rng:
            acquire()
            s = (box.a, box.b, box.c, box.d)
            release()
        n += CHUNK
        if clock() >= deadline:
            break
    del s
    yield n, clock() - t0


def reader_cow(rec, lock, box, seconds):
    rng = range(CHUNK)
    clock = time.perf_counter
    n = 0
    yield
    t0 = clock()
    deadline = t0 + seconds
    while True:
        for _ in rng:
            s = box.snap
        n += CHUNK
        if clock() >= deadline:
            break
    del s
    yield n, clock() - t0


def reader_local(rec, lock, box, seconds):
    # The same loop shape; each iteration makes a 4-tuple of new floats from
    # floats this thread owns, as read() does from the record.
    x = float(threading.get_ident() % 7) + 0.5
    y, z, w = x + 1.0, x + 2.0, x + 3.0
    rng = range(CHUNK)
    clock = time.perf_counter
    n = 0
    yield
    t0 = clock()
    deadline = t0 + seconds
    while True:
        for _ in rng:
            s = (x * y, y * z, z * w, w * x)
        n += CHUNK
        if clock() >= deadline:
            break
    del s
    yield n, clock() - t0


def writer_record(rec, lock, box, stop):
    update = rec.update
    sleep = time.sleep
    is_set = stop.is_set
    v = 0.0
    n = 0
    while not is_set():
        update(a=v, b=v + 1.0, c=v + 2.0, d=v + 3.0)
        v += 1.0
        n += 1
        sleep(WRITE_PERIOD)
    return n


def writer_lock(rec, lock, box, stop):
    acquire = lock.acquire
    release = lock.release
    sleep = time.sleep
    is_set = stop.is_set
    v = 0.0
    n = 0
    while not is_set():
        acquire()
        box.a = v
        box.b = v + 1.0
        box.c = v + 2.0
        box.d = v + 3.0
        release()
        v += 1.0
        n += 1
        sleep(WRITE_PERIOD)
    return n


def writer_cow(rec, lock, box, stop):
    sleep = time.sleep
    is_set = stop.is_set
    v = 0.0
    n = 0
    while not is_set():
        box.snap = (v, v + 1.0, v + 2.0, v + 3.0)
        v += 1.0
        n += 1
        sleep(WRITE_PERIOD)
    return n


THREAD_CONTENDERS = {
    # name: (reader, writer)
    "local": (reader_local, writer_record),  # the record writer as load
    "rec.read": (reader_record, writer_record),
    "rec.read_into": (reader_record_into, writer_record),
    "Lock": (reader_lock, writer_lock),
    "copy-on-write": (reader_cow, writer_cow),
}


def run_threads(name, nthreads, seconds):
    """Reads/s over nthreads readers, and the writer's writes/s (the
    harness's run_phase, with this file's readers and writers adapted)."""
    reader, writer = THREAD_CONTENDERS[name]
    rec, lock, box = SeqRecord(**FIELDS), threading.Lock(), Box()

    def timed_reader(secs):
        gen = reader(rec, lock, box, secs)
        next(gen)
        yield
        start = time.perf_counter()
        n, elapsed = next(gen)
        yield n, start, start + elapsed

    def paced_writer(stop, latencies, pause):
        return writer(rec, lock, box, stop)

    rate, writes_per_s, _, _ = run_phase(timed_reader, paced_writer, nthreads, seconds, None)
    return rate, writes_per_s


THREAD_CONFIGS = [
    ("local", 1), ("local", 2),
    ("rec.read", 1), ("rec.read", 2),
    ("rec.read_into", 1), ("rec.read_into", 2),
    ("Lock", 1), ("Lock", 2),
    ("copy-on-write", 1), ("copy-on-write", 2),
]


def bench_threads(args, out):
    samples = {f"{n} x{k}": [] for n, k in THREAD_CONFIGS}
    writes = {f"{n} x{k}": [] for n, k in THREAD_CONFIGS}
    scaling = {name: [] for name in THREAD_CONTENDERS}
    for _ in range(args.repeats):
        this_round = {}
        for name, k in THREAD_CONFIGS:
            rate, wps = run_threads(name, k, args.seconds)
            key = f"{name} x{k}"
            samples[key].append(rate)
            writes[key].append(wps)
            this_round[key] = rate
        # Scaling per round (both thread counts under the same noise),
        # then the median of those.
        for name in scaling:
            scaling[name].append(this_round[f"{name} x2"]
                                 / this_round[f"{name} x1"])
    med = {k: statistics.median(v) for k, v in samples.items()}
    sc = {k: statistics.median(v) for k, v in scaling.items()}
    rel_rounds = [r / l for r, l in zip(scaling["rec.read"],
                                        scaling["local"])]
    rel = statistics.median(rel_rounds)
    out["threads"] = {
        "reads_per_s": med,
        "writes_per_s": {k: statistics.median(v) for k, v in writes.items()},
        "scaling": sc,
        "scaling_rounds": scaling,
        "record_scaling/local_scaling rounds": rel_rounds,
        "samples": samples,
    }
    out["ratios"]["record_scaling"] = sc["rec.read"]
    out["ratios"]["local_scaling"] = sc["local"]
    out["ratios"]["record_scaling/local_scaling"] = rel
    out["ratios"]["read/Lock (2 threads)"] = (med["rec.read x2"]
                                              / med["Lock x2"])
    out["ratios"]["read/copy-on-write (2 threads)"] = (
        med["rec.read x2"] / med["copy-on-write x2"])
    out["ratios"]["read_into/Lock (2 threads)"] = (
        med["rec.read_into x2"] / med["Lock x2"])
    out["ratios"]["read_into/copy-on-write (2 threads)"] = (
        med["rec.read_into x2"] / med["copy-on-write x2"])


# ---- single thread: read_into against near-empty C calls -----------------

def single_variants():
    rec = SeqRecord(**FIELDS)
    # A record some writer has used: its sequence is past CPython's cached
    # small ints (<= 256), as it is in any real use.
    for i in range(1000):
        rec.update(a=float(i), b=1.0, c=2.0, d=3.0)
    fresh = SeqRecord(**FIELDS)
    fresh.update(a=1.0, b=2.0, c=3.0, d=4.0)  # sequence 2: a cached int
    ba = bytearray(rec.nbytes)
    arr = array.array("d", bytes(rec.nbytes))
    assert len(arr) == 4
    # name: (fn, arg, what it is)
    return {
        "rec.locked()": (
            rec.locked, None,
            "baseline: METH_NOARGS on the record, one load, returns a bool"),
        "callable(ba)": (
            callable, ba,
            "METH_O builtin function (not on the record), returns a bool"),
        "rec.get('nope')": (
            rec.get, "nope",
            "METH_FASTCALL on the record: a dict miss, returns None"),
        "rec.read_into(bytearray)": (
            rec.read_into, ba,
            "METH_O: buffer export + snapshot + int(sequence)"),
        "rec.read_into(array('d'))": (
            rec.read_into, arr, "the same into an array('d')"),
        "fresh.read_into(bytearray)": (
            fresh.read_into, ba,
            "the same, sequence 2 (a cached small int)"),
        "rec.read()": (
            rec.read, None,
            "METH_NOARGS: snapshot + a tuple of 4 new floats"),
    }


def bench_single(args, out):
    variants = single_variants()
    sizes = {name: calibrate(lambda n: call_loop(fn, arg, n), args.seconds)
             for name, (fn, arg, _) in variants.items()}
    samples = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, (fn, arg, _) in variants.items():
            n = sizes[name]
            t = call_loop(fn, arg, n)
            samples[name].append(t / (n * UNROLL) * 1e9)
    med = {k: statistics.median(v) for k, v in samples.items()}
    out["single"] = {
        "ns_per_call": med,
        "what": {k: v[2] for k, v in variants.items()},
        "samples": samples,
    }
    base = med["rec.locked()"]
    out["ratios"]["read_into/locked() time"] = (
        med["rec.read_into(bytearray)"] / base)
    out["ratios"]["read_into(array)/locked() time"] = (
        med["rec.read_into(array('d'))"] / base)
    out["ratios"]["read_into/callable() time"] = (
        med["rec.read_into(bytearray)"] / med["callable(ba)"])
    out["ratios"]["read_into seq<=256/locked() time"] = (
        med["fresh.read_into(bytearray)"] / base)
    # How much of the read_into budget passing one argument already spends.
    out["ratios"]["callable()/locked() time"] = med["callable(ba)"] / base


# ---- processes: SharedMemory record against multiprocessing.Lock --------
#
# The worker processes live for the whole measurement: every phase (one
# contender, one round) starts with all of them and the main process behind
# one Barrier and lasts --seconds.

PROC_CONTENDERS = ["rec.read", "rec.read_into", "mp.Lock"]
DOUBLES = struct.Struct("4d")


def proc_reader(rec_name, raw_name, lock, barrier, results, plan, seconds):
    rec_shm = attach_shm(rec_name)
    raw_shm = attach_shm(raw_name)
    rec = SeqRecord.attach(rec_shm.buf, **FIELDS)
    try:
        for rnd, name in plan:
            if name == "rec.read":
                count = _proc_read_record(rec, barrier, seconds)
            elif name == "rec.read_into":
                count = _proc_read_record_into(rec, barrier, seconds)
            else:
                count = _proc_read_lock(raw_shm.buf, lock, barrier, seconds)
            results.put((rnd, name, count))
    finally:
        del rec
        rec_shm.close()
        raw_shm.close()


def _proc_read_record(rec, barrier, seconds):
    read = rec.read
    rng = range(CHUNK)
    clock = time.perf_counter
    n = 0
    barrier.wait()
    t0 = clock()
    deadline = t0 + seconds
    while True:
        for _ in rng:
            read()
        n += CHUNK
        if clock() >= deadline:
            break
    return n / (clock() - t0)


def _proc_read_record_into(rec, barrier, seconds):
    into = rec.read_into
    buf = bytearray(rec.nbytes)
    rng = range(CHUNK)
    clock = time.perf_counter
    n = 0
    barrier.wait()
    t0 = clock()
    deadline = t0 + seconds
    while True:
        for _ in rng:
            into(buf)
        n += CHUNK
        if clock() >= deadline:
            break
    return n / (clock() - t0)


def _proc_read_lock(buf, lock, barrier, seconds):
    acquire = lock.acquire
    release = lock.release
    unpack_from = DOUBLES.unpack_from
    rng = range(CHUNK)
    clock = time.perf_counter
    n = 0
    barrier.wait()
    t0 = clock()
    deadline = t0 + seconds
    while True:
        for _ in rng:
            acquire()
            unpack_from(buf)
            release()
        n += CHUNK
        if clock() >= deadline:
            break
    return n / (clock() - t0)


def proc_writer(rec_name, raw_name, lock, barrier, results, plan, seconds):
    rec_shm = attach_shm(rec_name)
    raw_shm = attach_shm(raw_name)
    rec = SeqRecord.attach(rec_shm.buf, **FIELDS)
    buf = raw_shm.buf
    pack_into = DOUBLES.pack_into
    update = rec.update
    acquire = lock.acquire
    release = lock.release
    sleep = time.sleep
    clock = time.perf_counter
    v = 0.0
    try:
        for rnd, name in plan:
            n = 0
            barrier.wait()
            t0 = clock()
            deadline = t0 + seconds
            while clock() < deadline:
                if name != "mp.Lock":
                    update(a=v, b=v + 1.0, c=v + 2.0, d=v + 3.0)
                else:
                    acquire()
                    pack_into(buf, 0, v, v + 1.0, v + 2.0, v + 3.0)
                    release()
                v += 1.0
                n += 1
                sleep(WRITE_PERIOD)
            results.put((rnd, "writer " + name, n / (clock() - t0)))
    finally:
        del rec, update, buf
        rec_shm.close()
        raw_shm.close()


def bench_procs(args, out, nreaders=2):
    ctx = multiprocessing.get_context("spawn")
    plan = [(rnd, name) for rnd in range(args.repeats)
            for name in PROC_CONTENDERS]
    size = SeqRecord.buffer_size(**FIELDS)
    rec_shm = shared_memory.SharedMemory(create=True, size=size)
    raw_shm = shared_memory.SharedMemory(create=True, size=DOUBLES.size)
    procs = []
    try:
        rec = SeqRecord.create(rec_shm.buf, **FIELDS)
        DOUBLES.pack_into(raw_shm.buf, 0, 0.0, 0.0, 0.0, 0.0)
        lock = ctx.Lock()
        barrier = ctx.Barrier(nreaders + 2)  # readers, writer, this process
        results = ctx.Queue()
        common = (rec_shm.name, raw_shm.name, lock, barrier, results, plan,
                  args.seconds)
        procs.append(ctx.Process(target=proc_writer, args=common))
        procs += [ctx.Process(target=proc_reader, args=common)
                  for _ in range(nreaders)]
        for p in procs:
            p.start()
        # Each phase: everyone starts together; collect what it reported.
        got = {}
        timeout = 120 + 10 * args.seconds
        for _ in plan:
            barrier.wait(timeout=timeout)
            for _ in range(nreaders + 1):
                rnd, name, value = results.get(timeout=timeout)
                got.setdefault((rnd, name), []).append(value)
        for p in procs:
            p.join(timeout=timeout)
        bad = [p.exitcode for p in procs if p.exitcode != 0]
        if bad:
            raise RuntimeError(f"a benchmark process failed: exit codes {bad}")
        del rec
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        rec_shm.close()
        raw_shm.close()
        rec_shm.unlink()
        raw_shm.unlink()
    samples = {name: [sum(got[rnd, name]) for rnd in range(args.repeats)]
               for name in PROC_CONTENDERS}
    writes = {name: [got[rnd, "writer " + name][0]
                     for rnd in range(args.repeats)]
              for name in PROC_CONTENDERS}
    med = {k: statistics.median(v) for k, v in samples.items()}
    out["procs"] = {
        "reads_per_s": {f"{k} x{nreaders}": v for k, v in med.items()},
        "writes_per_s": {k: statistics.median(v) for k, v in writes.items()},
        "samples": samples,
    }
    out["ratios"]["read/mp.Lock (2 processes)"] = med["rec.read"] / med["mp.Lock"]
    out["ratios"]["read_into/mp.Lock (2 processes)"] = (
        med["rec.read_into"] / med["mp.Lock"])


# ---- report --------------------------------------------------------------

def verdict(name, value):
    op, bound = TARGETS[name]
    ok = {">=": value >= bound, ">": value > bound, "<=": value <= bound}[op]
    return f"target {op} {bound:g}: " + ("PASS" if ok else "below target")


def report(out):
    info = out["interpreter"]
    print(f"# bench_record  Python {info['python']} "
          f"({'free-threaded' if info['free_threaded'] else 'GIL build'}, "
          f"GIL {'enabled' if info['gil_enabled'] else 'disabled'})  "
          f"os.cpu_count()={info['cpu_count']}  "
          f"--seconds {out['seconds']:g} --repeats {out['repeats']}  "
          "(medians)")
    print(f"# 1-minute load average {out['load_before']:.2f} before, "
          f"{out['load_after']:.2f} after (other work on a shared machine "
          "skews scaling)")
    if "threads" in out:
        t = out["threads"]
        print("\nthreads: reads/s, one writer at ~1 kHz")
        print(f"  {'contender':<16}{'1 reader':>14}{'2 readers':>14}"
              f"{'scaling':>9}{'writes/s (2r)':>15}")
        for name in THREAD_CONTENDERS:
            print(f"  {name:<16}{fmt_rate(t['reads_per_s'][name + ' x1']):>14}"
                  f"{fmt_rate(t['reads_per_s'][name + ' x2']):>14}"
                  f"{t['scaling'][name]:>8.2f}x"
                  f"{t['writes_per_s'][name + ' x2']:>15.0f}")
        rounds = t["record_scaling/local_scaling rounds"]
        print("  record_scaling/local_scaling per round: "
              + " ".join(f"{r:.2f}" for r in rounds))
        if t["scaling"]["local"] < 1.5:
            print(f"  WARNING: thread-local work scaled only "
                  f"{t['scaling']['local']:.2f}x with 2 threads: the second "
                  "core was mostly busy, so the scaling ratios say little")
    if "single" in out:
        s = out["single"]
        print("\nsingle thread: ns per call (method bound to a local, "
              f"{UNROLL} calls per loop iteration)")
        for name, ns in s["ns_per_call"].items():
            print(f"  {name:<28}{ns:8.1f} ns   {s['what'][name]}")
    if "procs" in out:
        p = out["procs"]
        print("\nprocesses (spawn): reads/s summed over 2 readers, "
              "one writer process at ~1 kHz")
        for name, rate in p["reads_per_s"].items():
            base = name.rsplit(" ", 1)[0]
            print(f"  {name:<16}{fmt_rate(rate):>14}"
                  f"   writer {p['writes_per_s'][base]:.0f} writes/s")
    print()
    for name, value in out["ratios"].items():
        tail = f"   {verdict(name, value)}" if name in TARGETS else ""
        print(f"ratio {name:<38}{value:8.2f}{tail}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=0.5,
                        help="length of one measurement (default 0.5)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="rounds; medians are reported (default 5)")
    parser.add_argument("--json", metavar="PATH",
                        help="also write every sample and ratio here")
    parser.add_argument("--sections", default="threads,single,procs",
                        help="comma-separated subset of threads,single,procs")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.repeats < 1:
        parser.error("--seconds must be positive and --repeats at least 1")
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - {"threads", "single", "procs"}
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")

    out = {"interpreter": interpreter_info(), "seconds": args.seconds,
           "repeats": args.repeats, "targets": TARGETS, "ratios": {},
           "load_before": loadavg()}
    if "threads" in sections:
        bench_threads(args, out)
    if "single" in sections:
        bench_single(args, out)
    if "procs" in sections:
        bench_procs(args, out)
    out["load_after"] = loadavg()
    report(out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
