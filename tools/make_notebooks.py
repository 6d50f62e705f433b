"""tools/make_notebooks.py - write notebooks/*.ipynb from the cells below
(the source of truth; edit here, then re-run and execute:
    python tools/make_notebooks.py && python tools/make_notebooks.py --execute
--execute runs both with nbclient in place and stores the outputs)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NB = ROOT / "notebooks"

WHY = [
    ("md", """\
# Why a seqlock

Several threads read a state made of several fields that a writer keeps
consistent: here four numbers that are always `(i, i + 1, 2 i, 3 i)` for
the writer's current step `i`. We look for **torn snapshots**, copies that
mix two steps, first without synchronisation, then with `SeqLock.read` and
with a `SeqRecord`, and finally compare how many reads per second each way
gets done.

Set `SEQLOCK_NOTEBOOK_QUICK=1` in the environment for short runs (the tests
do that)."""),
    ("code", """\
import os, sys, threading, time
import seqlock_py
from seqlock_py import SeqLock, SeqRecord

QUICK = os.environ.get("SEQLOCK_NOTEBOOK_QUICK") == "1"
SECONDS = 0.2 if QUICK else 2.0      # length of each demonstration
READERS = 2                          # reader threads
print(f"seqlock_py {seqlock_py.__version__} on Python {sys.version.split()[0]}"
      f", GIL {'enabled' if getattr(sys, '_is_gil_enabled', lambda: True)() else 'disabled'}"
      f", {os.cpu_count()} CPUs, quick={QUICK}")"""),
    ("md", """\
## 1. No synchronisation: torn snapshots

The writer stores the four fields one after the other. On the GIL build a
thread switch can happen between two of those stores (here made frequent
with `sys.setswitchinterval`, as a busy program's would be by blocking
calls); on the free-threaded build the reader simply runs at the same time
on another core. Either way a reader can copy a half-written state."""),
    ("code", """\
sys.setswitchinterval(1e-5)   # switch threads often, to see the effect in seconds

class State:
    def __init__(self):
        self.a, self.b, self.c, self.d = 0.0, 1.0, 0.0, 0.0

def consistent(s):
    a, b, c, d = s
    return b == a + 1 and c == 2 * a and d == 3 * a

def run(write_step, read_once, seconds=SECONDS, readers=READERS):
    \"\"\"A writer calls write_step(i) in a loop; readers call read_once()
    and check every snapshot. Returns (reads, torn, first torn ones).\"\"\"
    stop = threading.Event()
    start = threading.Barrier(readers + 1)
    counts, examples = [], []

    def writer():
        start.wait()
        i = 0
        while not stop.is_set():
            i += 1
            write_step(float(i))

    def reader():
        n = torn = 0
        start.wait()
        while not stop.is_set():
            s = read_once()
            n += 1
            if not consistent(s):
                torn += 1
                if len(examples) < 5:
                    examples.append(s)
        counts.append((n, torn))

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader) for _ in range(readers)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return sum(n for n, _ in counts), sum(t for _, t in counts), examples

state = State()

def write_plain(i):
    state.a = float(i)
    state.b = float(i + 1)
    state.c = float(2 * i)
    state.d = float(3 * i)

reads, torn, examples = run(write_plain, lambda: (state.a, state.b, state.c, state.d))
print(f"unsynchronised: {reads:,} reads, {torn:,} torn ({torn / reads:.3%})")
for s in examples:
    print("  torn snapshot", s)"""),
    ("md", """\
## 2. `SeqLock.read`: the same state, never torn

The writer wraps the same four stores in `with lock:`. Readers call
`lock.read(fn)`: it takes no lock, and calls `fn` again whenever a write
overlapped it. `read_retries` counts those repeats: the torn copies that
were thrown away instead of being returned."""),
    ("code", """\
lock = SeqLock()
state = State()

def write_locked(i):
    with lock:
        state.a = float(i)
        state.b = float(i + 1)
        state.c = float(2 * i)
        state.d = float(3 * i)

def copy():
    return (state.a, state.b, state.c, state.d)

reads, torn, examples = run(write_locked, lambda: lock.read(copy))
print(f"SeqLock.read: {reads:,} reads, {torn} torn")
print(f"  read_retries = {lock.read_retries:,} "
      f"({lock.read_retries / reads:.3%} of reads), read_fallbacks = {lock.read_fallbacks}")
assert torn == 0"""),
    ("md", """\
## 3. `SeqRecord`: the numbers held in C

A `SeqRecord` keeps the fields themselves inside the seqlock. A write
section of several Python steps (`with rec.write() as w:`) is just as
protected; `rec.read()` returns a fresh tuple, consistent every time."""),
    ("code", """\
rec = SeqRecord(a="d", b="d", c="d", d="d")
rec.update(b=1.0)

def write_record(i):
    with rec.write() as w:      # four separate steps, one write section
        w.a = float(i)
        w.b = float(i + 1)
        w.c = float(2 * i)
        w.d = float(3 * i)

reads, torn, _ = run(write_record, rec.read)
print(f"SeqRecord.read: {reads:,} reads, {torn} torn")
print(f"  read_retries = {rec.read_retries:,}, read_fallbacks = {rec.read_fallbacks}")
assert torn == 0
sys.setswitchinterval(0.005)    # back to the default"""),
    ("md", """\
## 4. What it costs: reads per second

The benchmark harness in `benchmarks/compare.py` measures readers copying
the four numbers flat out while a writer writes about 1000 times a second.
On the GIL build only one reader runs at a time, so this shows the cost of
one read; the free-threaded picture is in `lock_free_reads_at_scale.ipynb`
and in `docs/benchmarks.md`."""),
    ("code", """\
sys.path.insert(0, os.path.abspath(os.path.join("..", "benchmarks")))
import compare, harness
import matplotlib.pyplot as plt

names = ["unsynchronised (torn)", "threading.Lock", "SeqLock.read(fn)",
         compare.READ_BOUND, compare.INTO_BOUND]
seconds, rounds = (0.05, 1) if QUICK else (0.5, 3)
rates = {n: [] for n in names}
for _ in range(rounds):                      # contenders interleaved per round
    for n in names:
        S, reader, writer = compare.build(n, 4, None)
        rate, *_ = harness.run_phase(reader, writer, READERS, seconds, 0.001)
        rates[n].append(rate)
med = {n: sorted(v)[len(v) // 2] for n, v in rates.items()}
for n in names:
    print(f"{n:<48}{med[n] / 1e6:8.2f} M reads/s  "
          f"{med[n] / med['threading.Lock']:5.2f}x threading.Lock")

fig, ax = plt.subplots(figsize=(7, 3))
ax.barh(names, [med[n] / 1e6 for n in names],
        color=["grey", "tab:red", "tab:blue", "tab:green", "tab:olive"])
ax.invert_yaxis()
ax.set_xlabel(f"million reads/s, {READERS} reader threads, writer at ~1 kHz")
ax.set_title(f"4-number snapshot on Python {sys.version.split()[0]}")
plt.tight_layout()
plt.show()"""),
    ("md", """\
The unsynchronised read (four attribute loads in Python) is wrong
(section 1), and it is no ceiling either: `SeqRecord` copies in C, and
`read_into()`, which fills a buffer the reader made once instead of
building a tuple, beats it. `SeqLock.read(fn)` pays for a Python call of
`fn` per read, which `threading.Lock`'s acquire and release calls outweigh;
the ratios printed above are this run's. On the GIL build only one reader
runs at a time, so these are costs per read, not scaling; the writer's
side (it never waits for readers) is in `lock_free_reads_at_scale.ipynb`.
Copy-on-write (publishing a new tuple) is another fast choice on the GIL
build; see *When not to use a seqlock* in `docs/benchmarks.md`."""),
]

SCALE = [
    ("md", """\
# Lock-free reads at scale

On the free-threaded interpreter (3.13t) reader threads really run in
parallel. This notebook measures

1. reads/s as reader threads are added, for `SeqRecord` against
   `threading.Lock`, reader-writer locks and copy-on-write;
2. the writer's wait: a seqlock writer never waits for readers, while the
   writer of a reader-preferring reader-writer lock waits longer the more
   readers there are;
3. reads across processes from a `SeqRecord` in `SharedMemory`;
4. a live consumer in this process of a record another process feeds,
   asleep between writes (`rec.changes()`).

The notebook's kernel may be a normal CPython: parts 1 and 2 run
`benchmarks/compare.py` under a free-threaded interpreter with `seqlock_py`
installed, found from `$SEQLOCK_NOTEBOOK_FT_PYTHON`, or
`build/bench-venv/cpython-313t` (made by `benchmarks/run_all.sh`), or
`.venv-test/cpython-313t` (made by `tools/test`). Set
`SEQLOCK_NOTEBOOK_QUICK=1` for short runs."""),
    ("code", """\
import json, os, subprocess, sys, tempfile
from pathlib import Path
import matplotlib.pyplot as plt

QUICK = os.environ.get("SEQLOCK_NOTEBOOK_QUICK") == "1"
ROOT = Path.cwd().parent if Path.cwd().name == "notebooks" else Path.cwd()
SECONDS, REPEATS = (0.05, 1) if QUICK else (0.4, 3)
THREADS = [1, 2] if QUICK else sorted({1, 2, os.cpu_count() or 1, 2 * (os.cpu_count() or 1)})

PROBE = ("import sys, sysconfig, seqlock_py; "
         "print(int(bool(sysconfig.get_config_var('Py_GIL_DISABLED'))))")

def find_ft_python():
    candidates = [os.environ.get("SEQLOCK_NOTEBOOK_FT_PYTHON"),
                  ROOT / "build/bench-venv/cpython-313t/bin/python",
                  ROOT / ".venv-test/cpython-313t/bin/python"]
    for c in candidates:
        if c and Path(c).exists():
            r = subprocess.run([str(c), "-P", "-c", PROBE], capture_output=True, text=True)
            if r.returncode == 0 and r.stdout.strip() == "1":
                return str(c)
    return None

FT = find_ft_python()
PY = FT or sys.executable
FT_VERSION = FT and subprocess.run([FT, "-c", "import sys; print(sys.version.split()[0])"],
                                   capture_output=True, text=True).stdout.strip()
print(f"free-threaded interpreter: Python {FT_VERSION}t" if FT else "free-threaded "
      "interpreter: none found: running on this kernel's interpreter instead (GIL "
      "build), so expect no scaling")
print(f"reader threads {THREADS}, {SECONDS} s x {REPEATS} rounds, quick={QUICK}")"""),
    ("code", """\
contenders = ["SeqRecord.read(): per-thread bound method",
              "SeqRecord.read(): global rec.read()",
              "SeqRecord.read_into(): per-thread bound method", "threading.Lock",
              "ft_utils RWLock", "readerwriterlock (read-pref.)", "copy-on-write",
              "unsynchronised (torn)", "thread-local work (reference)"]
out_json = Path(tempfile.mkdtemp()) / "scale.json"
cmd = [PY, "-P", str(ROOT / "benchmarks/compare.py"), "--sizes", "4", "--writers", "1khz",
       "--threads", ",".join(map(str, THREADS)), "--seconds", str(SECONDS),
       "--repeats", str(REPEATS), "--parts", "threads",
       "--contenders", ",".join(contenders),
       "--json", str(out_json)]
proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
print(proc.stdout[-4000:].replace(str(out_json), out_json.name), proc.stderr[-2000:])
proc.check_returncode()
result = json.loads(out_json.read_text())
by = {(e["contender"], e["threads"]): e for e in result["results"]}
ran = result["contenders"]
print("skipped:", result["skipped"] or "nothing")"""),
    ("md", """\
## 1. Reads per second as reader threads are added

One writer updates the four numbers about 1000 times a second. A
`SeqRecord` reader writes nothing to the record, and through a per-thread
bound method (`read = rec.read`) not even the record object's reference
count, so it scales with cores. Through a name all threads share (a global
`rec.read()`, `self.rec.read()`) every call adds to that reference count
from several threads, and on 3.13t that shared write is what stops the
scaling (the `global rec.read()` line). Every lock-based reader writes the
lock word, and copy-on-write readers all increment the same tuple's
reference count. With more threads than cores nothing scales further, and
while other processes keep CPUs busy (the run prints how many, per round)
nothing scales at all: the outputs stored here may come from such a run;
re-run on an idle machine to see the scaling (the benchmark results in
`benchmarks/results/` record the load they were measured at)."""),
    ("code", """\
fig, ax = plt.subplots(figsize=(10, 4))
for n in ran:
    ys = [by[n, k]["reads_per_s"]["median"] / 1e6 for k in THREADS]
    ax.plot(THREADS, ys, "-o" if n.startswith("Seq") else "--o", label=n,
            linewidth=2.5 if n.startswith("Seq") else 1.2)
ax.set_xlabel("reader threads"); ax.set_ylabel("million reads/s (all readers)")
ax.set_yscale("log"); ax.set_xticks(THREADS); ax.grid(True, which="both", alpha=.3)
info = result["interpreter"]
ax.set_title(f"Python {info['python']}{' free-threaded' if info['free_threaded'] else ''}, "
             f"{info['cpu_count']} CPUs: 4-number snapshot, writer at ~1 kHz")
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))  # beside the plot: no line hidden
plt.tight_layout(); plt.show()
for n in ran:
    e = by[n, THREADS[-1]]
    print(f"{n:<48} scaling 1->{THREADS[-1]}: {e['scaling_from_1']:.2f}x   "
          f"vs threading.Lock: {e['ratio_to_lock']:.2f}x")"""),
    ("md", """\
## 2. The writer is never starved

The same run timed every write while the readers ran flat out. A
`SeqRecord` write takes the lock word, which readers never hold: its p99
stays at microseconds to tens of microseconds (it rises only when threads
outnumber cores and the writer thread itself is preempted). A
reader-preferring reader-writer lock lets new readers in while a writer
waits, so its writer waits milliseconds, longer with more readers;
`threading.Lock` is not fair either. On a busy shared machine the lock
numbers jump between runs; the order of magnitude is what holds."""),
    ("code", """\
fig, ax = plt.subplots(figsize=(10, 4))
for n in ran:
    ys = [by[n, k]["write_latency_p99_us"] for k in THREADS]
    ax.plot(THREADS, ys, "-o" if n.startswith("Seq") else "--o", label=n)
ax.set_xlabel("reader threads"); ax.set_ylabel("writer p99 (µs, log)")
ax.set_yscale("log"); ax.set_xticks(THREADS); ax.grid(True, which="both", alpha=.3)
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))  # beside the plot: no line hidden
plt.tight_layout(); plt.show()
print(f"{'contender':<48}" + "".join(f"{f'p99 {k} rd':>13}" for k in THREADS))
for n in ran:
    print(f"{n:<48}" + "".join(f"{by[n, k]['write_latency_p99_us']:11.1f}us" for k in THREADS))"""),
    ("md", """\
## 3. Across processes: a `SeqRecord` in `SharedMemory`

The writer (this process) keeps three doubles at `(x, x + 1, 2 x)` with
three separate steps in one write section; reader processes (started with
`spawn`) attach to the record and check every snapshot. For contrast, the
same three doubles in plain shared memory with no lock: readers in other
processes see half-written states."""),
    ("code", """\
import multiprocessing, time
from multiprocessing import shared_memory
from seqlock_py import SeqRecord
sys.path.insert(0, str(Path.cwd()))          # for shm_demo in the spawned children
import shm_demo

NPROC = 2
DURATION = 0.3 if QUICK else 2.0
ctx = multiprocessing.get_context("spawn")
fields = dict(x="d", y="d", z="d")

def run_procs(target, args, write):
    barrier, results = ctx.Barrier(NPROC + 1), ctx.Queue()
    procs = [ctx.Process(target=target, args=args + (DURATION, barrier, results))
             for _ in range(NPROC)]
    for p in procs:
        p.start()
    barrier.wait(timeout=120)
    deadline, i, writes = time.perf_counter() + DURATION, 0.0, 0
    while time.perf_counter() < deadline:
        i += 1.0
        write(i)
        writes += 1
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return writes, got

shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**fields))
raw = shared_memory.SharedMemory(create=True, size=24)
try:
    rec = SeqRecord.create(shm.buf, **fields)
    rec.update(y=1.0)
    def write_rec(i):
        with rec.write() as w:
            w.x = i; w.y = i + 1.0; w.z = 2.0 * i
    writes, got = run_procs(shm_demo.reader, (shm.name, fields), write_rec)
    print(f"SeqRecord in SharedMemory: {writes:,} writes; readers: "
          + "; ".join(f"{r:,} reads, {t} torn, {rt:,} retries" for r, t, rt in got))
    assert all(t == 0 for _, t, _ in got)
    del rec, write_rec

    mv = raw.buf.cast("d"); mv[1] = 1.0
    def write_raw(i):
        mv[0] = i; mv[1] = i + 1.0; mv[2] = 2.0 * i
    writes, got = run_procs(shm_demo.raw_reader, (raw.name,), write_raw)
    print(f"plain shared memory, no lock: {writes:,} writes; readers: "
          + "; ".join(f"{r:,} reads, {t:,} torn" for r, t, _ in got))
    mv.release(); del write_raw
finally:
    shm.close(); shm.unlink(); raw.close(); raw.unlink()"""),
    ("md", """\
Readers in every process are lock-free and never saw a torn snapshot; a
writer that dies inside a write section is rolled back by the next process
that waits for the lock (`python -m seqlock_py --dead-writer`)."""),
    ("md", """\
## 4. A live consumer: waiting for news instead of polling

A feeder process writes the record every 20 ms; this notebook consumes it
with `rec.changes()`, which yields the current snapshot and then one per
write, asleep on the record's sequence word in between: a futex the
writer's section end wakes, so the consumer uses almost no CPU while it
waits.
Each write stamps the time it was made (`time.monotonic_ns()`, one clock
for every process), so each line shows the wake-up latency from the
writer's commit to the consumer holding the new values."""),
    ("code", """\
fields = dict(price="d", volume="q", stamp="q")
WRITES, PERIOD = (5, 0.02) if QUICK else (20, 0.02)
shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**fields))
try:
    rec = SeqRecord.create(shm.buf, **fields)
    barrier = ctx.Barrier(2)
    feeder = ctx.Process(target=shm_demo.feeder,
                         args=(shm.name, fields, WRITES, PERIOD, barrier))
    feeder.start()
    barrier.wait(timeout=120)
    cpu_before, latencies, last = time.thread_time(), [], None
    for seq, (price, volume, stamp) in rec.changes(timeout=5):
        if stamp:
            latency_us = (time.monotonic_ns() - stamp) / 1e3
            latencies.append(latency_us)
            missed = (seq - last) // 2 - 1 if last is not None else 0
            print(f"seq {seq:3}: price {price:6.1f}  volume {volume:3}  "
                  f"woke {latency_us:7.1f} us after the write"
                  + (f"  ({missed} missed)" if missed else ""))
        last = seq
        if volume == WRITES:
            break
    cpu = time.thread_time() - cpu_before
    feeder.join(timeout=60)
    latencies.sort()
    print(f"{len(latencies)} changes; median wake-up {latencies[len(latencies) // 2]:.0f} us; "
          f"consumer CPU {cpu * 1e3:.1f} ms over {WRITES * PERIOD * 1e3:.0f} ms of waiting")
    del rec
finally:
    shm.close(); shm.unlink()"""),
]


def notebook(cells):
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook
    nb = new_notebook(cells=[new_markdown_cell(src) if kind == "md" else new_code_cell(src)
                             for kind, src in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


NOTEBOOKS = {"why_a_seqlock.ipynb": WHY, "lock_free_reads_at_scale.ipynb": SCALE}


def main():
    import nbformat
    paths = {NB / name: cells for name, cells in NOTEBOOKS.items()}
    if "--execute" in sys.argv:
        from nbclient import NotebookClient
        for path in paths:
            nb = nbformat.read(path, as_version=4)
            NotebookClient(nb, timeout=1800, kernel_name="python3",
                           resources={"metadata": {"path": str(NB)}}).execute()
            nbformat.write(nb, path)
            print("executed", path)
        return
    for path, cells in paths.items():
        nbformat.write(notebook(cells), path)
        print("wrote", path)


if __name__ == "__main__":
    main()
