"""Compare seqlock_py with what users would pick instead, in one run.

    python -P benchmarks/compare.py [--quick] [--seconds S] [--repeats N]
        [--parts threads,single,procs] [--threads 1,2] [--sizes 4,64]
        [--writers 1khz,tight] [--contenders NAME,...] [--idioms]
        [--json PATH]
    python -P benchmarks/compare.py --plot RESULT.json [...] [--outdir DIR]

benchmarks/run_all.sh runs it under the normal and the free-threaded
interpreter and then draws the plots and the README tables.

threads  Reader threads (1, 2, ... os.cpu_count()) copy a consistent
         snapshot of 4 floats or of a 64-element array flat out while one
         writer thread writes at ~1 kHz (time.sleep(0.001) between writes)
         or in a tight loop.  The writer times every write (taking the
         lock, storing, releasing: for lock-free contenders just the store)
         while readers run: median and p99.  The seqlock contenders also
         report their retry rate (retries per read).
         The idioms (--idioms runs only them) read the same SeqRecord the
         ways users write it: through a module global (rec.read()), an
         attribute (self.rec.read()), a local or parameter, a subscript
         (rec["a"]), read_into through a global, each against the same call
         through a per-thread bound method (read = rec.read in each thread);
         as controls, the local idiom on a record each thread made itself,
         and thread-local work (each thread unpacks its own bytes) as the
         reference for what the machine scales.  On a free-threaded build
         each load of a shared object through a name adds to its reference
         count (an atomic write to the object's header by every thread but
         its creator); a bound method made by the reader's own thread is
         that thread's object.
single   One thread: ns per call of read() and read_into() against near-
         empty C calls on the same record (rec.locked(), callable(buf)).
procs    2 reader processes ("spawn") on a SeqRecord in SharedMemory with a
         writer process at ~1 kHz, against a multiprocessing.Lock around 4
         doubles in SharedMemory read with struct.unpack_from.

Every contender's loops are generated from the few lines a user would write
(see CONTENDERS), so each read is inlined in the same loop shape and,
except in the idioms that share a name on purpose, everything a thread
touches in its loop is its own local.  Each round runs every contender and
thread count once, interleaved, so machine noise hits them alike; the
harness reports the median over --repeats rounds and its spread, after one
warm-up round.  Ratios (to threading.Lock, to the bound method, scaling
from 1 reader to N) are taken per round and then the median.  The end of
the report checks the issue's TARGETS (ratios within this run); a missed
target is reported, never an error.

A contender whose package is not installed on this interpreter (ft-utils
and cereggii ship binary wheels for some interpreters only) is skipped and
listed as such in the output and the JSON.
"""

import array
import multiprocessing
import os
import statistics
import struct
import sys
import threading
import time
from multiprocessing import shared_memory
from types import SimpleNamespace

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (TURNS, UNROLL, BenchParser,  # noqa: E402
                     attach_shm, call_cost_table, call_costs, cpu_snapshot,
                     fmt_rate, interpreter_label, load_results, loadavg,
                     measured_on, others_cpu, parse_list, percentile,
                     result_head, result_tail, run_phase, save_result,
                     summary, thread_counts)

from seqlock_py import SeqLock, SeqRecord  # noqa: E402

CHUNK = 256
WRITERS = {"1khz": 0.001, "tight": 0.0}
SIZES = (4, 64)
BASELINE = "threading.Lock"
PARTS = ("threads", "single", "procs")

# ---- what each size's snapshot looks like in plain Python -----------------

# `new` is what the writer publishes (a tuple, built before the timed part);
# COPY is a reader's consistent copy of the Python-object state; STORE
# writes `new` into it.
COPY = {4: "(box.a, box.b, box.c, box.d)", 64: "tuple(box.arr)"}
STORE = {4: "box.a, box.b, box.c, box.d = new", 64: "box.arr[:] = new"}
NEW = {4: "new = (v, v + 1.0, v + 2.0, v + 3.0)", 64: "new = (v,) * 64"}
REC_UPDATE = {4: "update(a=new[0], b=new[1], c=new[2], d=new[3])",
              64: "update(a=new)"}
STRUCT = {4: "4d", 64: "64d"}


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
#   wsetup  writer setup lines,                  write the timed write,
#   globals (optional) names of S's attributes the generated module gets
#           as globals, ref (optional) the contender "vs bound" compares
#           with).
# Lines may use {copy}, {store}, {update}, {fmt}, {fields}: filled in per
# size.

def _make_seqlock(size, mod):
    return SimpleNamespace(lock=SeqLock(), box=_box(size))


def _make_record(size, mod):
    return SimpleNamespace(rec=SeqRecord(**_fields(size)))


class App:
    """A user's object holding the record: readers call self.rec.read()."""

    def __init__(self, rec):
        self.rec = rec


def _make_app(size, mod):
    rec = SeqRecord(**_fields(size))
    return SimpleNamespace(rec=rec, app=App(rec))


def _make_local(size, mod):
    # The writer's record is the load (named so that counters() skips it).
    return SimpleNamespace(load=SeqRecord(**_fields(size)))


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


# The per-thread bound methods every idiom is measured against.
READ_BOUND = "SeqRecord.read(): per-thread bound method"
INTO_BOUND = "SeqRecord.read_into(): per-thread bound method"
LOCAL_WORK = "thread-local work (reference)"
OWN_RECORD = "SeqRecord.read(): local rec.read() on the thread's own record"

def _locked(make, reader, writer=None, needs=None):
    """A contender that copies and stores under a lock: reader (writer,
    if it differs) the setup line binding acquire and release."""
    return dict(needs=needs, make=make,
                rsetup=reader + "; box = S.box",
                read="acquire(); s = {copy}; release()",
                wsetup=(writer or reader) + "; box = S.box",
                write="acquire(); {store}; release()")


def _on_record(rsetup, read, make=_make_record, rec="S.rec", **kw):
    """A contender reading a SeqRecord that the writer update()s (rec:
    where the writer finds it)."""
    return dict(needs=None, make=make, rsetup=rsetup, read=read,
                wsetup=f"update = {rec}.update", write="{update}", **kw)


CONTENDERS = {
    "SeqLock.read(fn)": dict(
        needs=None, make=_make_seqlock,
        rsetup="read = S.lock.read; box = S.box\nfn = lambda: {copy}",
        read="s = read(fn)",
        wsetup="acquire = S.lock.acquire_write; release = S.lock.release_write"
               "; box = S.box",
        write="acquire(); {store}; release()"),
    READ_BOUND: _on_record("read = S.rec.read", "s = read()"),
    INTO_BOUND: _on_record(
        "into = S.rec.read_into; buf = bytearray(S.rec.nbytes)", "into(buf)"),
    "threading.Lock": _locked(
        _make_lock(threading.Lock),
        "acquire = S.lock.acquire; release = S.lock.release"),
    "threading.RLock": _locked(
        _make_lock(threading.RLock),
        "acquire = S.lock.acquire; release = S.lock.release"),
    "ft_utils RWLock": _locked(
        _make_ft_rwlock,
        "acquire = S.lock.lock_read; release = S.lock.unlock_read",
        "acquire = S.lock.lock_write; release = S.lock.unlock_write",
        needs="ft_utils.synchronization"),
    "readerwriterlock (read-pref.)": _locked(
        _make_rwlock_read,
        "r = S.lock.gen_rlock(); acquire = r.acquire; release = r.release",
        "w = S.lock.gen_wlock(); acquire = w.acquire; release = w.release",
        needs="readerwriterlock.rwlock"),
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
    "unsynchronised (torn)": dict(
        needs=None, make=_make_box,
        rsetup="box = S.box", read="s = {copy}",
        wsetup="box = S.box", write="{store}"),
    # ---- the idioms users write (README: "Which way of calling scales") --
    # The same SeqRecord reads through a name every reader thread shares:
    # each load of the record (or of the object holding it) adds to and
    # takes from its reference count; the bound methods above load nothing
    # shared.  `globals` names S's attributes the generated module gets as
    # globals.
    "SeqRecord.read(): global rec.read()": _on_record(
        "", "s = rec.read()", globals=("rec",), ref=READ_BOUND),
    "SeqRecord.read(): attribute self.rec.read()": _on_record(
        "self = S.app", "s = self.rec.read()", make=_make_app,
        ref=READ_BOUND),
    "SeqRecord.read(): local/parameter rec.read()": _on_record(
        "rec = S.rec", "s = rec.read()", ref=READ_BOUND),
    "SeqRecord rec['a']: subscript on a global": _on_record(
        "", "s = rec['a']", globals=("rec",), ref=READ_BOUND),
    "SeqRecord.read_into(): global rec.read_into(buf)": _on_record(
        "buf = bytearray(rec.nbytes)", "rec.read_into(buf)",
        globals=("rec",), ref=INTO_BOUND),
    # The control: the local/parameter idiom's bytecode on a record each
    # reader thread made itself (so only it counts its references; no one
    # writes it).  What it loses against the bound method is the name's
    # own cost, without the sharing.
    OWN_RECORD: _on_record(
        "rec = SeqRecord({fields})", "s = rec.read()", make=_make_local,
        rec="S.load", ref=READ_BOUND),
    # What the machine gives work that shares nothing: each thread unpacks
    # its own bytes with its own struct.Struct (the C work of read(): new
    # floats in a new tuple), under the same record writer.
    LOCAL_WORK: _on_record(
        "st = Struct('{fmt}'); unpack = st.unpack; raw = bytes(st.size)",
        "s = unpack(raw)", make=_make_local, rec="S.load"),
}

# Each idiom is compared with its per-thread bound method (`ref`).
for _c in CONTENDERS.values():
    _c.setdefault("ref", None)
    _c.setdefault("globals", ())
del _c

# The idiom table's rows, in order; --idioms runs these (and the baseline).
IDIOMS = [LOCAL_WORK, READ_BOUND,
          "SeqRecord.read(): global rec.read()",
          "SeqRecord.read(): attribute self.rec.read()",
          "SeqRecord.read(): local/parameter rec.read()",
          OWN_RECORD,
          "SeqRecord rec['a']: subscript on a global",
          INTO_BOUND,
          "SeqRecord.read_into(): global rec.read_into(buf)"]
# Rows only the idiom table shows (the contender table and plots leave them
# out).
IDIOM_ONLY = [n for n in IDIOMS if n not in (READ_BOUND, INTO_BOUND)]

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


def loops(name, c, size, S):
    """The namespace holding `reader` (and, if the entry c has a writer
    side, `writer`), generated from c's lines for one size, over state S."""
    subst = dict(copy=COPY[size], store=STORE[size], update=REC_UPDATE[size],
                 fmt=STRUCT[size], fields=", ".join(
                     f"{k}={v!r}" for k, v in _fields(size).items()))
    ns = {"S": S, "CHUNK": CHUNK, "perf_counter": time.perf_counter,
          "time": time, "Struct": struct.Struct, "SeqRecord": SeqRecord}
    for g in c.get("globals", ()):
        ns[g] = getattr(S, g)
    src = READER.format(rsetup=_indent(c["rsetup"].format(**subst)),
                        read=c["read"].format(**subst))
    if "wsetup" in c:
        src += WRITER.format(wsetup=_indent(c["wsetup"].format(**subst)),
                             new=NEW[size], write=c["write"].format(**subst))
    exec(compile(src, f"<{name} x{size}>", "exec"), ns)
    return ns


def build(name, size, mod):
    """A fresh state and its (reader, writer) functions for one phase."""
    c = CONTENDERS[name]
    S = c["make"](size, mod)
    ns = loops(name, c, size, S)
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
    load_rounds, others = [], []

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
        cpu0 = cpu_snapshot()
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
        load_rounds.append(loadavg())
        others.append(others_cpu(cpu0, cpu_snapshot()))
        log(f"# round {rnd + 1}/{args.repeats}: "
            f"{time.perf_counter() - t0:.1f} s, load {load_rounds[-1]:.2f} "
            f"(this run's threads included), other processes "
            f"{others[-1]:.2f} CPUs")
    return raw, {"load_rounds": load_rounds, "others_cpu_rounds": others}


def analyse(args, mods, raw):
    results = []
    kmax = max(args.threads)
    for (size, w, k, name), r in raw.items():
        base = raw.get((size, w, k, BASELINE))
        one = raw.get((size, w, 1, name))
        ref = raw.get((size, w, k, CONTENDERS[name]["ref"]))
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
        if ref:
            entry["ratio_to_bound"] = statistics.median(
                a / b for a, b in zip(r["reads"], ref["reads"]))
        if r["retries"]:
            entry["retry_rate"] = statistics.median(r["retries"])
            entry["fallback_rate"] = statistics.median(r["fallbacks"])
        results.append(entry)
    return {"max_threads": kmax, "results": results}


# ---- one thread: the cost of one call -------------------------------------
#
# read() and read_into() of a 4-float record against near-empty C calls,
# one thread, each bound to a local (harness.call_costs).  Each round's
# time of a call is the best of TURNS turns (preemption only adds); ratios
# to rec.locked() per round, then the median.


def single_calls():
    """{name: (fn, arg, what it is)}: the calls the single part times."""
    rec = SeqRecord(**_fields(4))
    # A record some writer has used: its sequence is past CPython's cached
    # small ints (<= 256), as it is in any real use.
    for i in range(1000):
        rec.update(a=float(i), b=1.0, c=2.0, d=3.0)
    fresh = SeqRecord(**_fields(4))
    fresh.update(a=1.0, b=2.0, c=3.0, d=4.0)  # sequence 2: a cached int
    ba = bytearray(rec.nbytes)
    arr = array.array("d", bytes(rec.nbytes))
    return {
        "rec.locked()": (
            rec.locked, None,
            "the baseline: METH_NOARGS on the record, one load, a bool"),
        "callable(buf)": (
            callable, ba, "METH_O builtin function (not the record's), a bool"),
        "rec.get('nope')": (
            rec.get, "nope", "METH_FASTCALL on the record: a dict miss, None"),
        "rec.read_into(bytearray)": (
            rec.read_into, ba,
            "METH_O: buffer export + snapshot + int(sequence)"),
        "rec.read_into(array('d'))": (
            rec.read_into, arr, "the same into an array('d')"),
        "fresh.read_into(bytearray)": (
            fresh.read_into, ba, "the same, sequence 2 (a cached small int)"),
        "rec.read()": (
            rec.read, None, "METH_NOARGS: snapshot + a tuple of 4 new floats"),
    }


def bench_single(args, out, log=print):
    calls = single_calls()
    out["single"] = {
        **call_costs({k: (fn, arg) for k, (fn, arg, _) in calls.items()},
                     args.seconds / TURNS, args.repeats,
                     log=lambda rnd: log(f"# single: round {rnd + 1}/"
                                         f"{args.repeats}")),
        "what": {k: v[2] for k, v in calls.items()},
    }


# ---- processes: a SharedMemory record against multiprocessing.Lock -------
#
# Two reader processes ("spawn") and one writer process at ~1 kHz live for
# the whole part: every phase (one contender, one round) starts with all of
# them and this process behind one Barrier and lasts --seconds.  Each
# process has its own record object, so any idiom reads without sharing a
# reference count; the readers use bound methods, as the threads do.

PROC_READERS = 2
DOUBLES = struct.Struct("4d")
# The readers' loops are the threads' (READER), over each reader process's
# own objects: S.rec (its attached record), S.lock, S.buf (the 4 doubles),
# S.unpack_from.
PROC_READS = {
    "rec.read()": CONTENDERS[READ_BOUND],
    "rec.read_into(buf)": CONTENDERS[INTO_BOUND],
    "multiprocessing.Lock": dict(
        rsetup="acquire = S.lock.acquire; release = S.lock.release"
               "; unpack_from = S.unpack_from; buf = S.buf",
        read="acquire(); s = unpack_from(buf); release()"),
}
PROC_CONTENDERS = list(PROC_READS)


def proc_reader(rec_name, raw_name, lock, barrier, results, plan, seconds):
    rec_shm = attach_shm(rec_name)
    raw_shm = attach_shm(raw_name)
    try:
        _proc_reads(rec_shm.buf, raw_shm.buf, lock, barrier, results, plan,
                    seconds)
    finally:  # _proc_reads let go of the buffers
        rec_shm.close()
        raw_shm.close()


def _proc_reads(rec_buf, raw_buf, lock, barrier, results, plan, seconds):
    S = SimpleNamespace(rec=SeqRecord.attach(rec_buf, **_fields(4)),
                        lock=lock, buf=raw_buf,
                        unpack_from=DOUBLES.unpack_from)
    spaces = {name: loops(name, c, 4, S) for name, c in PROC_READS.items()}
    try:
        for rnd, name in plan:
            gen = spaces[name]["reader"](seconds)
            next(gen)
            barrier.wait()
            n, t0, t1 = next(gen)
            gen.close()
            results.put((rnd, name, n / (t1 - t0)))
    finally:
        for ns in spaces.values():
            ns.clear()  # each reader and its globals: a cycle holding S


def proc_writer(rec_name, raw_name, lock, barrier, results, plan, seconds):
    rec_shm = attach_shm(rec_name)
    raw_shm = attach_shm(raw_name)
    rec = SeqRecord.attach(rec_shm.buf, **_fields(4))
    buf = raw_shm.buf
    pack_into = DOUBLES.pack_into
    update = rec.update
    acquire = lock.acquire
    release = lock.release
    sleep = time.sleep
    clock = time.perf_counter
    pause = WRITERS["1khz"]
    v = 0.0
    try:
        for rnd, name in plan:
            n = 0
            barrier.wait()
            t0 = clock()
            deadline = t0 + seconds
            while clock() < deadline:
                if name != "multiprocessing.Lock":
                    update(a=v, b=v + 1.0, c=v + 2.0, d=v + 3.0)
                else:
                    acquire()
                    pack_into(buf, 0, v, v + 1.0, v + 2.0, v + 3.0)
                    release()
                v += 1.0
                n += 1
                sleep(pause)
            results.put((rnd, "writer " + name, n / (clock() - t0)))
    finally:
        del rec, update, buf
        rec_shm.close()
        raw_shm.close()


def bench_procs(args, out, log=print):
    ctx = multiprocessing.get_context("spawn")
    plan = [(rnd, name) for rnd in range(args.repeats)
            for name in PROC_CONTENDERS]
    rec_shm = shared_memory.SharedMemory(
        create=True, size=SeqRecord.buffer_size(**_fields(4)))
    raw_shm = shared_memory.SharedMemory(create=True, size=DOUBLES.size)
    procs = []
    try:
        rec = SeqRecord.create(rec_shm.buf, **_fields(4))
        DOUBLES.pack_into(raw_shm.buf, 0, 0.0, 0.0, 0.0, 0.0)
        lock = ctx.Lock()
        barrier = ctx.Barrier(PROC_READERS + 2)  # readers, writer, this one
        results = ctx.Queue()
        common = (rec_shm.name, raw_shm.name, lock, barrier, results, plan,
                  args.seconds)
        procs.append(ctx.Process(target=proc_writer, args=common))
        procs += [ctx.Process(target=proc_reader, args=common)
                  for _ in range(PROC_READERS)]
        for p in procs:
            p.start()
        got = {}
        timeout = 120 + 10 * args.seconds
        for rnd, name in plan:
            barrier.wait(timeout=timeout)
            for _ in range(PROC_READERS + 1):
                r, n, value = results.get(timeout=timeout)
                got.setdefault((r, n), []).append(value)
            if name == PROC_CONTENDERS[-1]:
                log(f"# procs: round {rnd + 1}/{args.repeats}")
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
    reads = {name: [sum(got[rnd, name]) for rnd in range(args.repeats)]
             for name in PROC_CONTENDERS}
    base = reads["multiprocessing.Lock"]
    out["procs"] = {
        "readers": PROC_READERS,
        "reads_per_s": {k: summary(v) for k, v in reads.items()},
        "ratio_to_mp_lock": {k: summary([a / b for a, b in zip(v, base)])
                             for k, v in reads.items()},
        "writes_per_s": {
            name: statistics.median(got[rnd, "writer " + name][0]
                                    for rnd in range(args.repeats))
            for name in PROC_CONTENDERS},
    }


# ---- the targets --------------------------------------------------
#
# Ratios of the per-thread bound methods (and the processes' readers) taken
# within one run: 4 floats, writer at ~1 kHz, 2 readers.  A missed target
# is reported, never an error.

TARGETS = {
    "read scaling / thread-local work scaling": (">=", 0.85),
    "read / threading.Lock (2 threads)": (">=", 4.0),
    "read / copy-on-write (2 threads)": (">", 1.0),
    "read_into time / locked() time": ("<=", 1.2),
    "read / multiprocessing.Lock (2 processes)": (">=", 10.0),
}


def _per_round(a, b):
    return statistics.median(x / y for x, y in zip(a["reads_per_s"]["samples"],
                                                   b["reads_per_s"]["samples"]))


def ratios(out):
    """{name: value} of the ratios the JSON holds the parts for (TARGETS'
    and a few more), each taken per round, then the median."""
    r = {}
    by = _by(out)
    e = {n: (by.get((4, "1khz", 1, n)), by.get((4, "1khz", 2, n)))
         for n in (READ_BOUND, INTO_BOUND, LOCAL_WORK, BASELINE,
                   "copy-on-write")}
    (read1, read2), (into1, into2) = e[READ_BOUND], e[INTO_BOUND]
    local1, local2 = e[LOCAL_WORK]
    cow2 = e["copy-on-write"][1]
    lock2 = e[BASELINE][1]
    if read1 and read2 and local1 and local2:
        r["read scaling / thread-local work scaling"] = statistics.median(
            (a2 / a1) / (b2 / b1) for a1, a2, b1, b2 in zip(
                *(x["reads_per_s"]["samples"]
                  for x in (read1, read2, local1, local2))))
    for name, this in (("read", read2), ("read_into", into2)):
        if this and lock2:
            r[f"{name} / threading.Lock (2 threads)"] = _per_round(this, lock2)
        if this and cow2:
            r[f"{name} / copy-on-write (2 threads)"] = _per_round(this, cow2)
    if "single" in out:
        q = out["single"]["ratio_to_locked"]
        r["read_into time / locked() time"] = (
            q["rec.read_into(bytearray)"]["median"])
        r["read_into(array) time / locked() time"] = (
            q["rec.read_into(array('d'))"]["median"])
        r["read time / locked() time"] = q["rec.read()"]["median"]
        r["callable() time / locked() time"] = q["callable(buf)"]["median"]
    if "procs" in out:
        q = out["procs"]["ratio_to_mp_lock"]
        r["read / multiprocessing.Lock (2 processes)"] = (
            q["rec.read()"]["median"])
        r["read_into / multiprocessing.Lock (2 processes)"] = (
            q["rec.read_into(buf)"]["median"])
    return r


def verdict(name, value):
    op, bound = TARGETS[name]
    ok = {">=": value >= bound, ">": value > bound, "<=": value <= bound}[op]
    return f"target {op} {bound:g}: " + ("met" if ok else "missed")


# ---- report ----------------------------------------------------------------

def report(out, log=print):
    info = out["interpreter"]
    log(f"# compare  Python {info['python']} "
        f"({'free-threaded' if info['free_threaded'] else 'GIL build'}, GIL "
        f"{'enabled' if info['gil_enabled'] else 'disabled'})  "
        f"cpu_count={info['cpu_count']}  threads={out['threads']}  "
        f"--seconds {out['seconds']:g} --repeats {out['repeats']}  (medians)")
    log(f"# load average {out['load_before']:.2f} before, "
        f"{out['load_after']:.2f} after")
    if out.get("others_cpu_rounds"):
        log("# other processes kept busy (CPUs, per round): " + " ".join(
            f"{x:.2f}" for x in out["others_cpu_rounds"]))
    for name, why in out["skipped"].items():
        log(f"# skipped {name}: {why}")
    if out["results"]:
        report_threads(out, log)
    if "single" in out:
        s = out["single"]
        log(f"\none thread: ns per call (bound to a local, {UNROLL} calls "
            f"per loop iteration, best of {TURNS} turns per round)")
        for name, ns in s["ns"].items():
            q = s["ratio_to_locked"].get(name)
            log(f"  {name:<28}{ns['median']:8.1f} ns"
                f"{q['median'] if q else 1.0:7.2f}x   {s['what'][name]}")
    if "procs" in out:
        p = out["procs"]
        log(f"\nprocesses (spawn): reads/s summed over {p['readers']} "
            "readers, one writer process at ~1 kHz")
        for name, rate in p["reads_per_s"].items():
            log(f"  {name:<24}{fmt_rate(rate['median']):>14}"
                f"{p['ratio_to_mp_lock'][name]['median']:8.2f}x"
                f"   writer {p['writes_per_s'][name]:.0f} writes/s")
    if out["ratios"]:
        log("")
    for name, value in out["ratios"].items():
        tail = f"   {verdict(name, value)}" if name in TARGETS else ""
        log(f"ratio {name:<48}{value:8.2f}{tail}")


def report_threads(out, log):
    kmax = out["max_threads"]
    by = _by(out)
    width = max(len(n) for n in out["contenders"]) + 2
    for size in out["sizes"]:
        for w in out["writers"]:
            log(f"\n{size}-element snapshot, writer {w}: reads/s")
            head = "".join(f"{f'{k} rd':>13}" for k in out["threads"])
            log(f"  {'contender':<{width}}{head}{'vs Lock':>9}{'scaling':>9}"
                f"{'vs bound':>9}{'spread':>8}{'w p50 us':>10}{'w p99 us':>10}"
                f"{'retry':>9}")
            for name in out["contenders"]:
                row = [by[size, w, k, name] for k in out["threads"]]
                top = row[-1]
                rates = "".join(f"{fmt_rate(e['reads_per_s']['median']):>13}"
                                for e in row)
                retry = (f"{top['retry_rate']:9.2e}" if "retry_rate" in top
                         else f"{'':>9}")
                bound = (f"{top['ratio_to_bound']:8.2f}x"
                         if "ratio_to_bound" in top else f"{'':>9}")
                log(f"  {name:<{width}}{rates}"
                    f"{top.get('ratio_to_lock', float('nan')):8.2f}x"
                    f"{top.get('scaling_from_1', float('nan')):8.2f}x{bound}"
                    f"{top['reads_per_s']['spread']:7.0%} "
                    f"{top['write_latency_p50_us']:10.2f}"
                    f"{top['write_latency_p99_us']:10.2f}{retry}")
    log(f"\n(vs Lock, scaling, vs bound (the same call through a per-thread "
        f"bound method), spread and writer latency at {kmax} reader threads; "
        "spread = (max - min) / median over rounds; retry = retries per "
        "read)")


def run(args):
    mods, skipped = available()
    if args.contenders:
        mods = {k: v for k, v in mods.items() if k in args.contenders}
        skipped = {k: v for k, v in skipped.items() if k in args.contenders}
    out = result_head({
        "seconds": args.seconds, "repeats": args.repeats,
        "parts": args.parts, "threads": args.threads, "sizes": args.sizes,
        "writers": args.writers, "contenders": list(mods),
        "idioms": [n for n in IDIOMS if n in mods],
        "skipped": skipped, "baseline": BASELINE})
    out.update(max_threads=max(args.threads), results=[])
    if "threads" in args.parts:
        raw, loads = measure(args, mods)
        out.update(loads)
        out.update(analyse(args, mods, raw))
    if "single" in args.parts:
        bench_single(args, out)
    if "procs" in args.parts:
        bench_procs(args, out)
    result_tail(out)
    out["targets"] = TARGETS
    out["ratios"] = ratios(out)
    report(out)
    save_result(args, out, RESULT)
    return 0


# ---- plots and the README tables -----------------------------------------

def _label(out):
    return interpreter_label(out["interpreter"])


def _by(out):
    return {(e["size"], e["writer"], e["threads"], e["contender"]): e
            for e in out["results"]}


def _main_contenders(out):
    return [n for n in out["contenders"] if n not in IDIOM_ONLY]


def markdown_table(outs, size=4, writer="1khz"):
    """The README table: one row per contender, per interpreter (the idiom
    variants are in idiom_table)."""
    lines = []
    for out in outs:
        if not out["results"]:
            continue
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
        for name in _main_contenders(out):
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


def idiom_table(outs, size=4, writer="1khz"):
    """The same SeqRecord reads written as users write them: one row per
    idiom, the interpreters side by side."""
    outs = [o for o in outs if o["results"] and o.get("idioms")]
    if not outs:
        return ""
    names = []
    for o in outs:
        names += [n for n in o["idioms"] if n not in names]
    head = sep = ""
    for o in outs:
        k = o["max_threads"]
        tag = o["interpreter"]["python"] + (
            "t" if o["interpreter"]["free_threaded"] else "")
        head += (f" {tag}: 1 reader | {k} readers | scaling 1→{k} |"
                 f" vs bound method, {k} readers |")
        sep += " ---: | ---: | ---: | ---: |"
    lines = [f"Reads/s of one `SeqRecord` by the way the reader names it, "
             f"{size}-number snapshot, writer "
             f"{'at ~1 kHz' if writer == '1khz' else 'in a tight loop'} "
             "(medians; ratios per round, then the median; \"vs bound "
             "method\": against the same call through a per-thread bound "
             "method):\n", "| reader's loop |" + head, "| --- |" + sep]
    for name in names:
        row = f"| {name} |"
        for o in outs:
            by = _by(o)
            k = o["max_threads"]
            e1 = by.get((size, writer, o["threads"][0], name))
            ek = by.get((size, writer, k, name))
            if not (e1 and ek):
                row += " | | | |"
                continue
            bound = (f"{ek['ratio_to_bound']:.2f}x" if "ratio_to_bound" in ek
                     else "")
            row += (f" {fmt_rate(e1['reads_per_s']['median']).strip()}"
                    f" | {fmt_rate(ek['reads_per_s']['median']).strip()}"
                    f" | {ek.get('scaling_from_1', float('nan')):.2f}x"
                    f" | {bound} |")
        lines.append(row)
    return "\n".join(lines) + "\n"


def single_table(outs):
    return call_cost_table(
        outs, "single", "One call's cost, 4-float record, one thread "
        f"(medians of {{repeats}} rounds, each call's best of {TURNS} "
        "turns; ratios per round):\n")


def procs_table(outs):
    outs = [o for o in outs if "procs" in o]
    if not outs:
        return ""
    n = outs[0]["procs"]["readers"]
    head = "".join(f" {_label(o)}: reads/s | vs `multiprocessing.Lock` |"
                   for o in outs)
    lines = [f"{n} reader processes (`spawn`) on a record in `SharedMemory`, "
             "one writer process at ~1 kHz, 4 doubles (reads/s summed over "
             "the readers):\n",
             "| reader |" + head, "| --- |" + " ---: | ---: |" * len(outs)]
    for name in outs[0]["procs"]["reads_per_s"]:
        row = f"| `{name}` |"
        for o in outs:
            row += (f" {fmt_rate(o['procs']['reads_per_s'][name]['median']).strip()} |"
                    f" {o['procs']['ratio_to_mp_lock'][name]['median']:.2f}x |")
        lines.append(row)
    return "\n".join(lines) + "\n"


def targets_table(outs):
    outs = [o for o in outs if o.get("ratios")]
    if not outs:
        return ""
    head = "".join(f" {_label(o)} |" for o in outs)
    lines = ["The issue's targets (per-thread bound methods; 4 floats, "
             "writer at ~1 kHz):\n",
             "| ratio | target |" + head,
             "| --- | --- |" + " ---: |" * len(outs)]
    for name, (op, bound) in TARGETS.items():
        row = f"| {name} | {op} {bound:g} |"
        for o in outs:
            v = o["ratios"].get(name)
            row += (f" {v:.2f} ({verdict(name, v).split(': ')[1]}) |"
                    if v is not None else " |")
        lines.append(row)
    return "\n".join(lines) + "\n"


def plot(paths, outdir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outs = [o for o in load_results(paths) if o["results"]]
    names = []
    for o in outs:
        names += [n for n in _main_contenders(o) if n not in names]
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
            for n in _main_contenders(out):
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
            ns = _main_contenders(out)
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

    # 3. the idioms: reads/s per reader-thread count, 4 numbers, 1 kHz.
    iouts = [o for o in outs if o.get("idioms")]
    p3 = os.path.join(outdir, "idioms.png")
    if iouts:
        inames = iouts[0]["idioms"]
        fig, axes = plt.subplots(1, len(iouts), squeeze=False, sharey=True,
                                 figsize=(4.5 * len(iouts) + 3,
                                          0.45 * len(inames) + 1.8))
        for ax, out in zip(axes[0], iouts):
            by = _by(out)
            ks = out["threads"]
            h = 0.8 / len(ks)
            for i, k in enumerate(ks):
                xs = [by[4, "1khz", k, n]["reads_per_s"]["median"] / 1e6
                      for n in inames]
                ax.barh([y - 0.4 + h * (i + 0.5) for y in range(len(inames))],
                        xs, height=h, label=f"{k} reader thread"
                        + ("s" if k > 1 else ""))
            ax.set_xlabel("million reads/s (all readers)")
            ax.set_title(f"{_label(out)}: 4 numbers, writer ~1 kHz",
                         fontsize=9)
            ax.grid(True, axis="x", alpha=0.3)
            ax.legend(fontsize=8)
        axes[0][0].set_yticks(range(len(inames)))  # the axes share y
        axes[0][0].set_yticklabels(inames, fontsize=8)
        axes[0][0].invert_yaxis()
        fig.tight_layout()
        fig.savefig(p3, dpi=80, bbox_inches="tight")
        plt.close(fig)
        print(f"# wrote {p3}", file=sys.stderr)
    print(f"# wrote {p1}\n# wrote {p2}\n", file=sys.stderr)
    print(markdown_table(outs))
    print(idiom_table(outs))
    for table in (single_table(outs), procs_table(outs), targets_table(outs)):
        if table:
            print(table)
    print(measured_on(outs))
    return 0

RESULT = ""  # benchmarks/results/<tag>.json


def main(argv=None):
    parser = BenchParser(__doc__, RESULT)
    parser.add_seconds(0.3, 0.02)
    parser.add_repeats()
    parser.add_parts(PARTS)
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
    parser.add_argument("--idioms", action="store_true",
                        help="add the idiom contenders to --contenders "
                             "(alone: run only them and the baseline)")
    parser.add_argument("--plot", nargs="+", metavar="JSON",
                        help="do not measure: draw throughput.png, "
                             "writer_latency.png and idioms.png from these "
                             "results and print the README tables")
    parser.add_outdir()
    args = parser.parse_args(argv)
    if args.plot:
        return plot(args.plot, args.outdir)
    if args.threads is None:
        args.threads = [1, 2] if args.quick else thread_counts()
    args.threads = sorted(set(args.threads))
    if args.seconds <= 0 or args.repeats < 1 or min(args.threads) < 1:
        parser.error("--seconds must be positive, --repeats and --threads "
                     "at least 1")
    if set(args.sizes) - set(SIZES) or set(args.writers) - set(WRITERS):
        parser.error(f"--sizes from {SIZES}, --writers from {list(WRITERS)}")
    if set(args.parts) - set(PARTS) or not args.parts:
        parser.error(f"--parts from {list(PARTS)}")
    if args.idioms:
        args.contenders = (args.contenders or []) + IDIOMS
    if args.contenders is not None:
        unknown = set(args.contenders) - set(CONTENDERS)
        if unknown:
            parser.error(f"unknown contenders: {sorted(unknown)}; "
                         f"choose from {list(CONTENDERS)}")
        # Ratios need the baseline and each idiom's bound method; keep
        # CONTENDERS' order.
        wanted = set(args.contenders) | {BASELINE} | {
            CONTENDERS[n]["ref"] for n in args.contenders} - {None}
        args.contenders = [n for n in CONTENDERS if n in wanted]
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
