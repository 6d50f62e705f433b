"""Shared benchmark harness: the command line every benchmark shares, the
result file (its head, its path, writing it), interpreter facts, summary
statistics, the single-call timer, and one "readers against a writer"
phase run on threads.

Used by compare.py, bench_latch.py, bench_wait.py, bench_takeover.py and
ab.py (each puts this folder on sys.path itself, because they run under
``python -P``).  Stdlib only.

A phase: one writer thread writes (at a fixed pause, or in a tight loop) and
times each write; ``nthreads`` reader threads are started behind a
``threading.Barrier`` and read flat out for ``seconds``.  Readers and writers
are generator/plain functions the caller builds so that everything their
loop touches is a local of that thread, unless the caller shares a name on
purpose (on 3.13t each load of a shared object by a thread other than its
creator adds to its reference count with an atomic write).
"""

import argparse
import array
import functools
import json
import os
import platform
import runpy
import statistics
import sys
import sysconfig
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
# The interpreter tag's one home, which the shell scripts run too.
interp_tag = runpy.run_path(os.path.join(os.path.dirname(HERE), "tools",
                                         "interp_tag.py"))["interp_tag"]


def interpreter_info():
    is_gil_enabled = getattr(sys, "_is_gil_enabled", None)
    gil = True if is_gil_enabled is None else is_gil_enabled()
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "free_threaded": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        "gil_enabled": gil,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "tag": interp_tag(),
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


def report_head(name, out, settings):
    """A report's first line: the benchmark's name, the interpreter, the
    settings (as flags) and the load average before and after."""
    info = out["interpreter"]
    return (f"\n# {name}  {interpreter_label(info)}, GIL "
            f"{'enabled' if info['gil_enabled'] else 'disabled'}, "
            f"cpu_count={info['cpu_count']}, {settings}; load average "
            f"{out['load_before']:.2f} before, {out['load_after']:.2f} "
            "after\n")


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


# ---- the command line every benchmark shares -----------------------------

class BenchParser(argparse.ArgumentParser):
    """A benchmark's command line, with the flags they share meaning the
    same in each:

      --quick       the smallest settings (for tests); the result is
                    written only with --json
      --json PATH   where to write the result (default
                    benchmarks/results/<prefix><tag>.json)
      --label TEXT  a note kept in the JSON (add_label)
      --repeats N   rounds, medians reported (add_repeats)
      --seconds S   the length of one measurement (add_seconds)
      --parts LIST  which parts to run (add_parts)
      --outdir DIR  where --plot writes its PNGs (add_outdir)

    A setting whose default --quick shrinks is added with add_setting();
    parse_args() fills in the default the run's --quick picks.
    """

    def __init__(self, doc, prefix):
        super().__init__(description=doc.split("\n\n")[0])
        self.settings = {}
        self.add_argument("--quick", action="store_true",
                          help="the smallest settings (for tests); writes "
                               "the result only with --json")
        self.add_argument("--json", metavar="PATH",
                          help="where to write the result (default "
                               f"benchmarks/results/{prefix}<tag>.json; "
                               "--quick: nowhere)")

    def add_setting(self, *flags, full, quick, help, type=float, **kw):
        """A setting whose default is `full`, or `quick` with --quick."""
        if help is not argparse.SUPPRESS:
            help = f"{help} (default {full:g}; --quick {quick:g})"
        action = self.add_argument(*flags, type=type, default=None,
                                   help=help, **kw)
        self.settings[action.dest] = (full, quick)
        return action

    def add_repeats(self, *aliases, full=5, quick=1,
                    help="rounds, medians reported", **kw):
        return self.add_setting("--repeats", *aliases, full=full,
                                quick=quick, type=int, help=help, **kw)

    def add_seconds(self, full, quick, help="the length of one measurement, "
                    "in seconds"):
        return self.add_setting("--seconds", full=full, quick=quick,
                                help=help)

    def add_label(self):
        self.add_argument("--label", default="",
                          help="a note kept in the JSON (e.g. the build)")

    def add_parts(self, parts):
        self.add_argument("--parts", type=parse_list, default=list(parts),
                          help="comma-separated subset of "
                               + ",".join(parts))

    def add_outdir(self):
        self.add_argument("--outdir", default=RESULTS,
                          help="where --plot writes the PNGs")

    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        for dest, (full, quick) in self.settings.items():
            if getattr(ns, dest) is None:
                setattr(ns, dest, quick if ns.quick else full)
        return ns


# ---- the result file -------------------------------------------------------

def result_head(settings, loadavgs=False):
    """A result's first keys: the interpreter, the machine, the run's
    settings, the load average before it (and, with loadavgs, all three
    load averages) and the date.  result_tail() adds the load after."""
    out = {"interpreter": interpreter_info(), "machine": machine_info(),
           **settings, "load_before": loadavg()}
    if loadavgs:
        out["loadavg_before"] = list(os.getloadavg())
    out["date"] = time.strftime("%Y-%m-%d %H:%M:%S %z")
    return out


def result_tail(out):
    """The load average after the run, as result_head() noted it before."""
    out["load_after"] = loadavg()
    if "loadavg_before" in out:
        out["loadavg_after"] = list(os.getloadavg())
    return out


def run_parts(args, out, parts, report, prefix):
    """Run each of --parts (parts[name](args, out, log)) into out, then
    report(out) with the load after, and save_result(); exit status 0."""
    for part in args.parts:
        parts[part](args, out, print)
    report(result_tail(out))
    save_result(args, out, prefix)
    return 0


def save_result(args, out, prefix, layout=None):
    """Write out to --json, else to benchmarks/results/<prefix><tag>.json
    unless --quick; layout(out), if given, is its text (write_json)."""
    path = args.json
    if path is None and not args.quick:
        path = os.path.join(RESULTS,
                            f"{prefix}{out['interpreter']['tag']}.json")
    if path:
        write_json(path, out, layout(out) if layout else None)


def write_json(path, out, text=None):
    """out as JSON (indent 1), or the text given for it, to path."""
    if text is None:
        text = json.dumps(out, indent=1) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
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


# ---- the single-call timer -------------------------------------------------
#
# A timer is run(n) -> the seconds n of its loops took.  The timers of a
# part take turns, TURNS in a round, and each round's time of a timer is
# its best turn (preemption only adds); the machine's noise falls on all
# of them alike.

TURNS = 5


def best_of_turns(timers, n, turns=TURNS):
    """One round: {key: the least seconds timers[key](n[key]) took over
    `turns` turns}, the timers taking turns."""
    best = dict.fromkeys(timers, float("inf"))
    for _ in range(turns):
        for k, run in timers.items():
            best[k] = min(best[k], run(n[k]))
    return best


def ns_per_op(timers, seconds, repeats, per=1, log=None):
    """{key: [ns per operation, one per round]}: each timer's n calibrated
    to `seconds` a turn, n * per operations a run; log(round) after each
    round."""
    n = {k: calibrate(run, seconds) for k, run in timers.items()}
    ns = {k: [] for k in timers}
    for rnd in range(repeats):
        best = best_of_turns(timers, n)
        for k in timers:
            ns[k].append(best[k] / (n[k] * per) * 1e9)
        if log:
            log(rnd)
    return ns


BASE_CALL = "rec.locked()"


def call_costs(calls, seconds, repeats, log=None):
    """One call's cost, one thread: calls is {name: (fn, arg)} (arg None:
    fn()), each made from a local, UNROLL per loop iteration (call_loop);
    BASE_CALL among them.  {"ns": per call, "ratio_to_locked": to
    BASE_CALL's, taken per round}, each summarised over the rounds."""
    ns = ns_per_op({k: functools.partial(call_loop, fn, arg)
                    for k, (fn, arg) in calls.items()},
                   seconds, repeats, per=UNROLL, log=log)
    base = ns[BASE_CALL]
    return {"ns": {k: summary(v) for k, v in ns.items()},
            "ratio_to_locked": {k: summary([a / b for a, b in zip(v, base)])
                                for k, v in ns.items() if k != BASE_CALL}}


def call_cost_table(outs, key, intro):
    """The markdown table of the call_costs() results out[key] of the outs
    that have one, the interpreters side by side (each result's --label
    after its name), under intro (formatted with the first one's
    `repeats`); "" if none has one."""
    outs = [o for o in outs if key in o]
    if not outs:
        return ""
    intro = intro.format(repeats=outs[0]["repeats"])
    head = "".join(f" {interpreter_label(o['interpreter'])}"
                   f"{' ' + o['label'] if o.get('label') else ''}: ns |"
                   f" ÷ `{BASE_CALL}` |" for o in outs)
    lines = [intro, "| call |" + head,
             "| --- |" + " ---: | ---: |" * len(outs)]
    for name in outs[0][key]["ns"]:
        row = f"| `{name}` |"
        for o in outs:
            r = o[key]["ratio_to_locked"].get(name)
            row += (f" {o[key]['ns'][name]['median']:.1f} |"
                    + (f" {r['median']:.2f} |" if r else " 1 |"))
        lines.append(row)
    return "\n".join(lines) + "\n"


def thread_counts(cpu=None):
    """1, 2, then powers of two up to os.cpu_count(), and the count itself."""
    cpu = cpu or os.cpu_count() or 1
    counts = {1, 2, cpu}
    p = 4
    while p < cpu:
        counts.add(p)
        p *= 2
    return sorted(counts)


def rounds_beside_writers(thread, process, repeats, one_round, log,
                          timeout, what="latency"):
    """Start a writer thread and a writer process, run one_round(rnd) for
    a warm-up round (-1) and then each round (0 .. repeats - 1), logging
    how long each took; join both writers and fail if the process failed.
    The process is killed if it is still alive at the end."""
    try:
        thread.start()
        process.start()
        for rnd in range(-1, repeats):
            t0 = time.perf_counter()
            one_round(rnd)
            log(f"# {what} {'warm-up' if rnd < 0 else 'round'}"
                f"{f' {rnd + 1}/{repeats}' if rnd >= 0 else ''}: "
                f"{time.perf_counter() - t0:.1f} s")
        thread.join(timeout)
        process.join(timeout)
        if process.exitcode != 0:
            raise RuntimeError(f"writer process exit code {process.exitcode}")
    finally:
        if process.is_alive():
            process.kill()
            process.join()


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
