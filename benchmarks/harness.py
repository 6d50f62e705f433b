"""Shared benchmark harness: interpreter facts, summary statistics, and one
"readers against a writer" phase run on threads.

Used by compare.py, bench_latch.py and ab.py (each puts this folder on
sys.path itself, because they run under ``python -P``).  Stdlib only.

A phase: one writer thread writes (at a fixed pause, or in a tight loop) and
times each write; ``nthreads`` reader threads are started behind a
``threading.Barrier`` and read flat out for ``seconds``.  Readers and writers
are generator/plain functions the caller builds so that everything their
loop touches is a local of that thread, unless the caller shares a name on
purpose (on 3.13t each load of a shared object by a thread other than its
creator adds to its reference count with an atomic write).
"""

import array
import json
import os
import platform
import statistics
import sys
import sysconfig
import threading
import time


def interpreter_info():
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    is_gil_enabled = getattr(sys, "_is_gil_enabled", None)
    gil = True if is_gil_enabled is None else is_gil_enabled()
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "free_threaded": free_threaded,
        "gil_enabled": gil,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "tag": sys.implementation.cache_tag + ("t" if free_threaded else ""),
    }


def machine_info():
    """What the numbers were measured on (CPU model, cores, memory)."""
    info = {"platform": platform.platform(), "cpu_count": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        info["memory_gib"] = round(pages / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return info


def loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def cpu_snapshot():
    """(wall, machine busy CPU seconds, this process's CPU seconds), for
    others_cpu(); None where /proc/stat is missing (not Linux)."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    t = os.times()
    idle = ticks[3] + ticks[4]  # idle, iowait
    return time.monotonic(), (sum(ticks) - idle) / hz, t.user + t.system


def others_cpu(before, after):
    """CPUs other processes kept busy between two cpu_snapshot()s (0.5:
    half a core on average): the load a benchmark's own threads do not
    add, unlike the load average's.  NaN without /proc/stat."""
    if before is None or after is None or after[0] <= before[0]:
        return float("nan")
    busy = (after[1] - before[1]) - (after[2] - before[2])
    return max(0.0, busy / (after[0] - before[0]))


def interpreter_label(info):
    """'CPython 3.13.5 free-threaded' or 'CPython 3.11.7 (GIL)'."""
    return (f"CPython {info['python']}"
            + (" free-threaded" if info["free_threaded"] else " (GIL)"))


def measured_on(outs):
    """One line naming the machine and each result's interpreter, date and
    load average, for the tables under a plot."""
    m = outs[0]["machine"]
    return (f"Measured on {m.get('cpu', '?')}, {m['cpu_count']} logical CPUs, "
            f"{m.get('memory_gib', '?')} GiB, {m['platform']}; "
            + "; ".join(f"{interpreter_label(o['interpreter'])} on "
                        f"{o['date']}, load {o['load_before']:.2f}"
                        + (f", other processes at most "
                           f"{max(o['others_cpu_rounds']):.2f} CPUs"
                           if o.get("others_cpu_rounds") else "")
                        for o in outs))


def write_json(path, out):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"# wrote {path}")


def load_results(paths):
    """The JSON results at paths, the GIL build's first."""
    outs = []
    for p in paths:
        with open(p) as f:
            outs.append(json.load(f))
    return sorted(outs, key=lambda o: o["interpreter"]["free_threaded"])


def attach_shm(name):
    """Open an existing SharedMemory block without registering it with this
    process's resource tracker (its creator unlinks it)."""
    from multiprocessing import shared_memory
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    return shared_memory.SharedMemory(name=name)


def parse_list(text, conv=str):
    """'a, b,c' -> [conv('a'), conv('b'), conv('c')] (command-line lists)."""
    return [conv(x.strip()) for x in text.split(",") if x.strip()]


def fmt_rate(r):
    return f"{r / 1e6:8.2f} M/s" if r >= 1e6 else f"{r / 1e3:8.1f} k/s"


def percentile(sorted_values, q):
    """The q-quantile (0..1) of an already sorted sequence (nearest rank)."""
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[i]


def summary(samples):
    """Median and spread ((max - min) / median) of repeated measurements."""
    med = statistics.median(samples)
    spread = (max(samples) - min(samples)) / med if med else float("nan")
    return {"median": med, "min": min(samples), "max": max(samples),
            "spread": spread, "samples": list(samples)}


UNROLL = 10  # calls per loop iteration in call_loop


def call_loop(fn, arg, n):
    """Seconds taken by n * UNROLL calls of fn() (arg None) or fn(arg), made
    from a local, ten per iteration, so the loop itself costs little."""
    rng = range(n)
    clock = time.perf_counter
    if arg is None:
        t0 = clock()
        for _ in rng:
            fn(); fn(); fn(); fn(); fn(); fn(); fn(); fn(); fn(); fn()
        return clock() - t0
    t0 = clock()
    for _ in rng:
        fn(arg); fn(arg); fn(arg); fn(arg); fn(arg)
        fn(arg); fn(arg); fn(arg); fn(arg); fn(arg)
    return clock() - t0


def calibrate(run, seconds):
    """n such that run(n), which returns the seconds it took, lasts about
    `seconds`."""
    n = 1
    while True:
        t = run(n)
        if t >= seconds / 5 or n >= 1 << 30:
            return max(1, int(n * seconds / max(t, 1e-9)))
        n *= 4


def thread_counts(cpu=None):
    """1, 2, then powers of two up to os.cpu_count(), and the count itself."""
    cpu = cpu or os.cpu_count() or 1
    counts = {1, 2, cpu}
    p = 4
    while p < cpu:
        counts.add(p)
        p *= 2
    return sorted(counts)


def run_phase(reader, writer, nthreads, seconds, pause):
    """Run one phase; return (reads/s summed over readers, writes/s,
    array of write latencies in seconds, total reads).

    reader(seconds) is a generator: set up, ``yield`` (then the barrier),
    read until the deadline, ``yield (n, t_start, t_end)`` (perf_counter).
    The rate is all reads over the wall time from the first reader's start
    to the last one's end: summing per-thread rates would overstate it when
    threads take turns (on the GIL build each one gets some time alone).
    writer(stop, latencies, pause) writes until stop is set, appending each
    write's duration to latencies, and returns how many writes it made.
    """
    stop = threading.Event()
    barrier = threading.Barrier(nthreads)
    results = [None] * nthreads
    errors = []
    lat = array.array("d")
    writes = [0.0]

    def write_main():
        try:
            t0 = time.perf_counter()
            n = writer(stop, lat, pause)
            writes[0] = n / (time.perf_counter() - t0)
        except BaseException as e:  # re-raised in the calling thread
            errors.append(e)

    def read_main(i):
        try:
            gen = reader(seconds)
            next(gen)
            barrier.wait()
            results[i] = next(gen)
        except BaseException as e:
            errors.append(e)
            barrier.abort()

    wt = threading.Thread(target=write_main)
    wt.start()
    readers = [threading.Thread(target=read_main, args=(i,))
               for i in range(nthreads)]
    try:
        for t in readers:
            t.start()
        for t in readers:
            t.join()
    finally:
        stop.set()
        wt.join()
    if errors:
        raise errors[0]
    total = sum(n for n, _, _ in results)
    wall = max(end for _, _, end in results) - min(s for _, s, _ in results)
    rate = total / wall
    return rate, writes[0], lat, total


# ---- a record's write cost --------------------------------------------------

def time_updates(rec, n):
    """Seconds for n rec.update(x=1.0) calls in a tight loop."""
    update = rec.update
    clock = time.perf_counter
    t0 = clock()
    for _ in range(n):
        update(x=1.0)
    return clock() - t0


def time_sections(rec, n):
    """Seconds for n `with rec.write() as w: w.x = 1.0` sections."""
    write = rec.write
    clock = time.perf_counter
    t0 = clock()
    for _ in range(n):
        with write() as w:
            w.x = 1.0
    return clock() - t0
