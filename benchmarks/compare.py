"""Compare seqlock_py with what users would pick instead, in one run.

    python -P benchmarks/compare.py [--quick] [--seconds S] [--repeats N]
        [--threads 1,2] [--sizes 4,64] [--writers 1khz,tight]
        [--contenders NAME,...] [--json PATH]
    python -P benchmarks/compare.py --plot RESULT.json [...] [--outdir DIR]

benchmarks/run_all.sh runs it under the normal and the free-threaded
interpreter and then draws the plots and the README table.

Workloads: reader threads (1, 2, ... os.cpu_count()) copy a consistent
snapshot of 4 floats or of a 64-element array flat out while one writer
thread writes at ~1 kHz (time.sleep(0.001) between writes) or in a tight
loop.  The writer times every write (taking the lock, storing, releasing:
for lock-free contenders just the store) while readers run: median and p99.
The seqlock contenders also report their retry rate (retries per read).

Every contender's loops are generated from the few lines a user would write
(see CONTENDERS), so each read is inlined in the same loop shape and
everything a thread touches in its loop is its own local.  Each round runs
every contender and thread count once, interleaved, so machine noise hits
them alike; the harness reports the median over --repeats rounds and its
spread, after one warm-up round.  Ratios (to threading.Lock, and scaling
from 1 reader to N) are taken per round and then the median.

A contender whose package is not installed on this interpreter (ft-utils
and cereggii ship binary wheels for some interpreters only) is skipped and
listed as such in the output and the JSON.
"""

import argparse
import os
import statistics
import sys
import threading
import time
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (fmt_rate, interpreter_info,  # noqa: E402
                     interpreter_label, load_results, loadavg, machine_info,
                     measured_on, parse_list, percentile, run_phase,
                     summary, thread_counts, write_json)

from seqlock_py import SeqLock, SeqRecord  # noqa: E402

CHUNK = 256
WRITERS = {"1khz": 0.001, "tight": 0.0}
SIZES = (4, 64)
BASELINE = "threading.Lock"

# ---- what each size's snapshot looks like in plain Python -----------------

# `new` is what the writer publishes (a tuple, built before the timed part);
# COPY is a reader's consistent copy of the Python-object state; STORE
# writes `new` into it.
COPY = {4: "(box.a, box.b, box.c, box.d)", 64: "tuple(box.arr)"}
STORE = {4: "box.a, box.b, box.c, box.d = new", 64: "box.arr[:] = new"}
NEW = {4: "new = (v, v + 1.0, v + 2.0, v + 3.0)", 64: "new = (v,) * 64"}
REC_UPDATE = {4: "update(a=new[0], b=new[1], c=new[2], d=new[3])",
              64: "update(a=new)"}


def _fields(size):
    return {"a": "d", "b": "d", "c": "d", "d": "d"} if size == 4 else {"a": "64d"}


def _box(size):
    box = SimpleNamespace(a=0.0, b=1.0, c=2.0, d=3.0, arr=[0.0] * 64)
    box.snap = (0.0, 1.0, 2.0, 3.0) if size == 4 else (0.0,) * 64
    return box


# ---- contenders -----------------------------------------------------------
#
# name: dict(
#   needs   module to import (skipped if missing),
#   make    state factory: make(size, mod) -> namespace S,
#   rsetup  reader setup lines (locals from S),  read  the loop body,
#   wsetup  writer setup lines,                  write the timed write).
# Lines may use {copy}, {store}, {update}: filled in per size.

def _make_seqlock(size, mod):
    return SimpleNamespace(lock=SeqLock(), box=_box(size))


def _make_record(size, mod):
    return SimpleNamespace(rec=SeqRecord(**_fields(size)))


def _make_lock(kind):
    def make(size, mod):
        return SimpleNamespace(lock=kind(), box=_box(size))
    return make


def _make_ft_rwlock(size, mod):
    return SimpleNamespace(lock=mod.RWLock(), box=_box(size))


def _make_rwlock_read(size, mod):
    return SimpleNamespace(lock=mod.RWLockRead(), box=_box(size))


def _make_box(size, mod):
    return SimpleNamespace(box=_box(size))


def _make_cereggii(size, mod):
    return SimpleNamespace(ref=mod.AtomicRef(_box(size).snap))


def _make_ft_ref(size, mod):
    return SimpleNamespace(ref=mod.AtomicReference(_box(size).snap))


CONTENDERS = {
    "SeqLock.read(fn)": dict(
        needs=None, make=_make_seqlock,
        rsetup="read = S.lock.read; box = S.box\nfn = lambda: {copy}",
        read="s = read(fn)",
        wsetup="acquire = S.lock.acquire_write; release = S.lock.release_write"
               "; box = S.box",
        write="acquire(); {store}; release()"),
    "SeqRecord.read()": dict(
        needs=None, make=_make_record,
        rsetup="read = S.rec.read", read="s = read()",
        wsetup="update = S.rec.update", write="{update}"),
    "SeqRecord.read_into()": dict(
        needs=None, make=_make_record,
        rsetup="into = S.rec.read_into; buf = bytearray(S.rec.nbytes)",
        read="into(buf)",
        wsetup="update = S.rec.update", write="{update}"),
    "threading.Lock": dict(
        needs=None, make=_make_lock(threading.Lock),
        rsetup="acquire = S.lock.acquire; release = S.lock.release; box = S.box",
        read="acquire(); s = {copy}; release()",
        wsetup="acquire = S.lock.acquire; release = S.lock.release; box = S.box",
        write="acquire(); {store}; release()"),
    "threading.RLock": dict(
        needs=None, make=_make_lock(threading.RLock),
        rsetup="acquire = S.lock.acquire; release = S.lock.release; box = S.box",
        read="acquire(); s = {copy}; release()",
        wsetup="acquire = S.lock.acquire; release = S.lock.release; box = S.box",
        write="acquire(); {store}; release()"),
    "ft_utils RWLock": dict(
        needs="ft_utils.synchronization", make=_make_ft_rwlock,
        rsetup="acquire = S.lock.lock_read; release = S.lock.unlock_read"
               "; box = S.box",
        read="acquire(); s = {copy}; release()",
        wsetup="acquire = S.lock.lock_write; release = S.lock.unlock_write"
               "; box = S.box",
        write="acquire(); {store}; release()"),
    "readerwriterlock (read-pref.)": dict(
        needs="readerwriterlock.rwlock", make=_make_rwlock_read,
        rsetup="r = S.lock.gen_rlock(); acquire = r.acquire"
               "; release = r.release; box = S.box",
        read="acquire(); s = {copy}; release()",
        wsetup="w = S.lock.gen_wlock(); acquire = w.acquire"
               "; release = w.release; box = S.box",
        write="acquire(); {store}; release()"),
    "copy-on-write": dict(
        needs=None, make=_make_box,
        rsetup="box = S.box", read="s = box.snap",
        wsetup="box = S.box", write="box.snap = new"),
    "cereggii AtomicRef": dict(
        needs="cereggii", make=_make_cereggii,
        rsetup="get = S.ref.get", read="s = get()",
        wsetup="set_ = S.ref.set", write="set_(new)"),
    "ft_utils AtomicReference": dict(
        needs="ft_utils.concurrency", make=_make_ft_ref,
        rsetup="get = S.ref.get", read="s = get()",
        wsetup="set_ = S.ref.set", write="set_(new)"),
    "unsynchronised (ceiling)": dict(
        needs=None, make=_make_box,
        rsetup="box = S.box", read="s = {copy}",
        wsetup="box = S.box", write="{store}"),
}

QUICK_CONTENDERS = list(CONTENDERS)

READER = """\
def reader(seconds):
{rsetup}
    rng = range(CHUNK)
    clock = perf_counter
    n = 0
    s = None
    yield
    t0 = clock()
    deadline = t0 + seconds
    while True:
        for _ in rng:
            {read}
        n += CHUNK
        if clock() >= deadline:
            break
    del s
    yield n, t0, clock()
"""

WRITER = """\
def writer(stop, lat, pause):
{wsetup}
    clock = perf_counter
    sleep = time.sleep
    is_set = stop.is_set
    append = lat.append
    v = 0.0
    n = 0
    while not is_set():
        {new}
        t0 = clock()
        {write}
        append(clock() - t0)
        v += 1.0
        n += 1
        if pause:
            sleep(pause)
    return n
"""


def _indent(lines):
    return "\n".join("    " + line for line in lines.splitlines())


def build(name, size, mod):
    """A fresh state and its (reader, writer) functions for one phase."""
    c = CONTENDERS[name]
    subst = dict(copy=COPY[size], store=STORE[size], update=REC_UPDATE[size])
    S = c["make"](size, mod)
    ns = {"S": S, "CHUNK": CHUNK, "perf_counter": time.perf_counter,
          "time": time}
    src = (READER.format(rsetup=_indent(c["rsetup"].format(**subst)),
                         read=c["read"].format(**subst))
           + WRITER.format(wsetup=_indent(c["wsetup"].format(**subst)),
                           new=NEW[size], write=c["write"].format(**subst)))
    exec(compile(src, f"<{name} x{size}>", "exec"), ns)
    return S, ns["reader"], ns["writer"]


def available():
    """{name: module or None} for the contenders importable here, and
    {name: reason} for the ones skipped."""
    import importlib
    ok, skipped = {}, {}
    for name, c in CONTENDERS.items():
        if c["needs"] is None:
            ok[name] = None
            continue
        try:
            ok[name] = importlib.import_module(c["needs"])
        except ImportError as e:
            skipped[name] = f"{c['needs']} not installed here ({e})"
    return ok, skipped


def counters(S):
    obj = getattr(S, "rec", None)
    if obj is None and isinstance(getattr(S, "lock", None), SeqLock):
        obj = S.lock
    if obj is None:
        return None
    return obj.read_retries, obj.read_fallbacks


# ---- one run --------------------------------------------------------------

def measure(args, mods, log=print):
    configs = [(size, w, k, name) for size in args.sizes for w in args.writers
               for k in args.threads for name in mods]
    raw = {c: {"reads": [], "writes": [], "p50": [], "p99": [], "max": [],
               "retries": [], "fallbacks": []} for c in configs}

    def one(cfg, seconds):
        size, w, k, name = cfg
        S, reader, writer = build(name, size, mods[name])
        rate, wps, lat, total = run_phase(reader, writer, k, seconds,
                                          WRITERS[w])
        lat = sorted(lat)
        c = counters(S)
        return rate, wps, lat, total, c

    # Warm-up: every contender once, short, results thrown away.
    for size in args.sizes:
        for name in mods:
            one((size, args.writers[0], 1, name), max(0.01, args.seconds / 4))
    for rnd in range(args.repeats):
        t0 = time.perf_counter()
        for cfg in configs:
            rate, wps, lat, total, c = one(cfg, args.seconds)
            r = raw[cfg]
            r["reads"].append(rate)
            r["writes"].append(wps)
            r["p50"].append(percentile(lat, 0.5))
            r["p99"].append(percentile(lat, 0.99))
            r["max"].append(lat[-1] if lat else float("nan"))
            if c is not None:
                r["retries"].append(c[0] / total if total else 0.0)
                r["fallbacks"].append(c[1] / total if total else 0.0)
        log(f"# round {rnd + 1}/{args.repeats}: "
            f"{time.perf_counter() - t0:.1f} s")
    return raw


def analyse(args, mods, raw):
    results = []
    kmax = max(args.threads)
    for (size, w, k, name), r in raw.items():
        base = raw.get((size, w, k, BASELINE))
        one = raw.get((size, w, 1, name))
        entry = {
            "size": size, "writer": w, "threads": k, "contender": name,
            "reads_per_s": summary(r["reads"]),
            "writes_per_s": statistics.median(r["writes"]),
            "write_latency_p50_us": statistics.median(r["p50"]) * 1e6,
            "write_latency_p99_us": statistics.median(r["p99"]) * 1e6,
            "write_latency_max_us": statistics.median(r["max"]) * 1e6,
            "p99_samples_us": [x * 1e6 for x in r["p99"]],
        }
        if base:
            entry["ratio_to_lock"] = statistics.median(
                a / b for a, b in zip(r["reads"], base["reads"]))
        if one:
            entry["scaling_from_1"] = statistics.median(
                a / b for a, b in zip(r["reads"], one["reads"]))
        if r["retries"]:
            entry["retry_rate"] = statistics.median(r["retries"])
            entry["fallback_rate"] = statistics.median(r["fallbacks"])
        results.append(entry)
    return {"max_threads": kmax, "results": results}


def report(out, log=print):
    info = out["interpreter"]
    kmax = out["max_threads"]
    log(f"# compare  Python {info['python']} "
        f"({'free-threaded' if info['free_threaded'] else 'GIL build'}, GIL "
        f"{'enabled' if info['gil_enabled'] else 'disabled'})  "
        f"cpu_count={info['cpu_count']}  threads={out['threads']}  "
        f"--seconds {out['seconds']:g} --repeats {out['repeats']}  (medians)")
    log(f"# load average {out['load_before']:.2f} before, "
        f"{out['load_after']:.2f} after")
    for name, why in out["skipped"].items():
        log(f"# skipped {name}: {why}")
    by = {(e["size"], e["writer"], e["threads"], e["contender"]): e
          for e in out["results"]}
    for size in out["sizes"]:
        for w in out["writers"]:
            log(f"\n{size}-element snapshot, writer {w}: reads/s")
            head = "".join(f"{f'{k} rd':>13}" for k in out["threads"])
            log(f"  {'contender':<30}{head}{'vs Lock':>9}{'scaling':>9}"
                f"{'spread':>8}{'w p50 us':>10}{'w p99 us':>10}{'retry':>9}")
            for name in out["contenders"]:
                row = [by[size, w, k, name] for k in out["threads"]]
                top = row[-1]
                rates = "".join(f"{fmt_rate(e['reads_per_s']['median']):>13}"
                                for e in row)
                retry = (f"{top['retry_rate']:9.2e}" if "retry_rate" in top
                         else f"{'':>9}")
                log(f"  {name:<30}{rates}"
                    f"{top.get('ratio_to_lock', float('nan')):8.2f}x"
                    f"{top.get('scaling_from_1', float('nan')):8.2f}x"
                    f"{top['reads_per_s']['spread']:7.0%} "
                    f"{top['write_latency_p50_us']:10.2f}"
                    f"{top['write_latency_p99_us']:10.2f}{retry}")
    log(f"\n(vs Lock, scaling, spread and writer latency at {kmax} reader "
        "threads; spread = (max - min) / median over rounds; retry = "
        "retries per read)")


def run(args):
    mods, skipped = available()
    if args.contenders:
        unknown = set(args.contenders) - set(CONTENDERS)
        if unknown:
            sys.exit(f"unknown contenders: {sorted(unknown)}; "
                     f"choose from {list(CONTENDERS)}")
        mods = {k: v for k, v in mods.items() if k in args.contenders}
        skipped = {k: v for k, v in skipped.items() if k in args.contenders}
    out = {"interpreter": interpreter_info(), "machine": machine_info(),
           "seconds": args.seconds, "repeats": args.repeats,
           "threads": args.threads, "sizes": args.sizes,
           "writers": args.writers, "contenders": list(mods),
           "skipped": skipped, "baseline": BASELINE,
           "load_before": loadavg(),
           "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    raw = measure(args, mods)
    out.update(analyse(args, mods, raw))
    out["load_after"] = loadavg()
    report(out)
    path = args.json
    if path is None and not args.quick:
        path = os.path.join(HERE, "results",
                            f"{out['interpreter']['tag']}.json")
    if path:
        write_json(path, out)
    return 0


# ---- plots and the README table ------------------------------------------

def _label(out):
    return interpreter_label(out["interpreter"])


def _by(out):
    return {(e["size"], e["writer"], e["threads"], e["contender"]): e
            for e in out["results"]}


def markdown_table(outs, size=4, writer="1khz"):
    """The README table: one row per contender, per interpreter."""
    lines = []
    for out in outs:
        by = _by(out)
        k = out["max_threads"]
        ks = out["threads"]
        lines.append(f"**{_label(out)}**, {size}-number snapshot, writer "
                     f"{'at ~1 kHz' if writer == '1khz' else 'in a tight loop'}"
                     f", {k} reader threads:\n")
        lines.append(f"| contender | reads/s, 1 reader | reads/s, {k} readers "
                     "| vs `threading.Lock` | scaling 1→" + str(k)
                     + " | writer p50 / p99 (µs) | retries per read |")
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name in out["contenders"]:
            e1 = by.get((size, writer, ks[0], name))
            ek = by.get((size, writer, k, name))
            if not (e1 and ek):
                continue
            retry = (f"{ek['retry_rate']:.1e}" if "retry_rate" in ek else "")
            lines.append(
                f"| {name} | {fmt_rate(e1['reads_per_s']['median']).strip()}"
                f" | {fmt_rate(ek['reads_per_s']['median']).strip()}"
                f" | {ek.get('ratio_to_lock', float('nan')):.2f}x"
                f" | {ek.get('scaling_from_1', float('nan')):.2f}x"
                f" | {ek['write_latency_p50_us']:.1f} / "
                f"{ek['write_latency_p99_us']:.1f} | {retry} |")
        for name, why in out["skipped"].items():
            lines.append(f"| {name} | skipped: not installable here | | | | | |")
        lines.append("")
    return "\n".join(lines)


def plot(paths, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outs = load_results(paths)
    names = []
    for o in outs:
        names += [n for n in o["contenders"] if n not in names]
    cmap = plt.get_cmap("tab20")
    colour = {n: cmap(i % 20) for i, n in enumerate(names)}
    style = {n: ("-" if n.startswith("Seq") else "--") for n in names}
    os.makedirs(outdir, exist_ok=True)

    # 1. throughput vs reader threads: rows = interpreters, cols = writer mode
    #    x size.
    cols = [(s, w) for s in outs[0]["sizes"] for w in outs[0]["writers"]]
    fig, axes = plt.subplots(len(outs), len(cols), squeeze=False,
                             figsize=(4.2 * len(cols), 3.8 * len(outs)))
    for i, out in enumerate(outs):
        by = _by(out)
        for j, (s, w) in enumerate(cols):
            ax = axes[i][j]
            for n in out["contenders"]:
                ys = [by[s, w, k, n]["reads_per_s"]["median"]
                      for k in out["threads"]]
                ax.plot(out["threads"], ys, style[n], marker="o",
                        color=colour[n], label=n,
                        linewidth=2.5 if n.startswith("Seq") else 1.2)
            ax.set_yscale("log")
            ax.set_xticks(out["threads"])
            ax.set_title(f"{_label(out)}\n{s}-element snapshot, writer {w}",
                         fontsize=9)
            ax.set_xlabel("reader threads")
            if j == 0:
                ax.set_ylabel("reads/s (all readers)")
            ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for row in axes:
        for ax in row:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in labels:
                    handles.append(h)
                    labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    p1 = os.path.join(outdir, "throughput.png")
    fig.savefig(p1, dpi=80)
    plt.close(fig)

    # 2. writer latency (p50 and p99) at max reader threads, 4 numbers.
    fig, axes = plt.subplots(len(outs), len(outs[0]["writers"]),
                             squeeze=False,
                             figsize=(6 * len(outs[0]["writers"]),
                                      0.32 * len(names) * len(outs) + 1.5))
    for i, out in enumerate(outs):
        by = _by(out)
        k = out["max_threads"]
        for j, w in enumerate(out["writers"]):
            ax = axes[i][j]
            ns = out["contenders"]
            p50 = [by[4, w, k, n]["write_latency_p50_us"] for n in ns]
            p99 = [by[4, w, k, n]["write_latency_p99_us"] for n in ns]
            ys = range(len(ns))
            ax.barh([y + 0.2 for y in ys], p99, height=0.4, label="p99",
                    color=[colour[n] for n in ns])
            ax.barh([y - 0.2 for y in ys], p50, height=0.4, label="median",
                    color=[colour[n] for n in ns], alpha=0.45)
            ax.set_yticks(list(ys))
            ax.set_yticklabels(ns, fontsize=8)
            ax.invert_yaxis()
            ax.set_xscale("log")
            ax.set_xlabel("one write: lock + store + unlock (µs); "
                          "pale = median, solid = p99")
            ax.set_title(f"{_label(out)}: writer {w}, {k} readers flat out, "
                         "4 numbers", fontsize=9)
            ax.grid(True, axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    p2 = os.path.join(outdir, "writer_latency.png")
    fig.savefig(p2, dpi=80)
    plt.close(fig)
    print(f"# wrote {p1}\n# wrote {p2}\n", file=sys.stderr)
    print(markdown_table(outs))
    print(measured_on(outs))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="tiny timings, one round (seconds; for tests)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="length of one measurement (default 0.3; "
                             "--quick: 0.02)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="rounds, medians reported (default 5; --quick 1)")
    parser.add_argument("--threads", type=lambda t: parse_list(t, int),
                        default=None,
                        help="reader thread counts (default 1, 2, ... "
                             "os.cpu_count())")
    parser.add_argument("--sizes", type=lambda t: parse_list(t, int),
                        default=list(SIZES), help="snapshot sizes: 4,64")
    parser.add_argument("--writers", type=parse_list, default=list(WRITERS),
                        help="writer modes: 1khz,tight")
    parser.add_argument("--contenders", type=lambda t: parse_list(t),
                        default=None, help="comma-separated subset of: "
                        + ", ".join(CONTENDERS))
    parser.add_argument("--json", metavar="PATH",
                        help="where to write the result (default "
                             "benchmarks/results/<interpreter>.json; "
                             "--quick: nowhere)")
    parser.add_argument("--plot", nargs="+", metavar="JSON",
                        help="do not measure: draw throughput.png and "
                             "writer_latency.png from these results and "
                             "print the README table")
    parser.add_argument("--outdir", default=os.path.join(HERE, "results"),
                        help="where --plot writes the PNGs")
    args = parser.parse_args(argv)
    if args.plot:
        return plot(args.plot, args.outdir)
    if args.seconds is None:
        args.seconds = 0.02 if args.quick else 0.3
    if args.repeats is None:
        args.repeats = 1 if args.quick else 5
    if args.threads is None:
        args.threads = [1, 2] if args.quick else thread_counts()
    args.threads = sorted(set(args.threads))
    if args.seconds <= 0 or args.repeats < 1 or min(args.threads) < 1:
        parser.error("--seconds must be positive, --repeats and --threads "
                     "at least 1")
    if set(args.sizes) - set(SIZES) or set(args.writers) - set(WRITERS):
        parser.error(f"--sizes from {SIZES}, --writers from {list(WRITERS)}")
    if BASELINE not in (args.contenders or [BASELINE]):
        args.contenders.append(BASELINE)  # ratios need it
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
