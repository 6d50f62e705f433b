"""Dead-writer takeover: how long the next writer waits after a writer
process is SIGKILLed at a random moment, for two builds side by side.

    python -P benchmarks/bench_takeover.py --old DIR [--old-label TEXT]
        [--new DIR] [--new-label TEXT] [--quick] [--kills N]
        [--cases update,section,hold,update/alone] [--next-writers K]
        [--signal stop-kill|kill] [--cpus LIST] [--seed N] [--label TEXT]
        [--json PATH]
    python -P benchmarks/bench_takeover.py --table TAKEOVER.json [...]

--kills N is --repeats N, the rounds, as in the other benchmarks
(benchmarks/harness.py's BenchParser).

DIR is a directory holding a seqlock_py package with its extension built
(a checkout after `python setup.py build_ext --inplace`, or a
`pip install --target` folder); --new defaults to the build this
interpreter imports.  For issue 17's change ("the holder's second gap
makes no system call", against its parent's parent 39cc0b3):

    git worktree add /tmp/old 39cc0b3
    (cd /tmp/old && python setup.py build_ext --inplace)
    python -P benchmarks/bench_takeover.py --old /tmp/old --old-label 39cc0b3

One round: a record {x, y: int64} (invariant x == y) in a fresh shared
memory block, and writer processes of one build (python -P, the build
first on sys.path): the first next writer creates the record, the victim
and any other next writers attach.  The victim writes x = y = i flat out,
the next writers x = y = -i, in one of three loops (KIND):

  update   rec.update(x=i, y=i)
  section  with rec.write() as w: w.x = i; w.y = i
  hold     the same section, then a 50 us busy wait inside it: longer
           than a waiter's spinning, so a waiting writer goes to sleep on
           the holder's beacon (FUTEX_WAITERS set) in most sections, and
           the unlock has a sleeper to wake

and the next writers either write flat out beside the victim (`contend`,
the default: each writer often waits for the other, spinning, yielding,
or asleep on the holder's beacon) or start writing only at the kill
(`alone`: no waiter while the victim lives).  A case is KIND[/WAITING].

After a random 20-60 ms the victim is stopped where it is (SIGSTOP, then
waitpid(WUNTRACED): a stop lands where a kill lands, as the process next
returns to user space from a system call or an interrupt), the lock's
words are read, and it is SIGKILLed (a stopped process dies without
running another instruction, so its state at death is the state read).
Each next writer notes the CLOCK_MONOTONIC time at which its first
write section completed after the kill (the parent stores the kill's time
in the shared block just before kill()), checks x == y and exits; the
takeover time is the first one's time minus the kill's.  With --signal
kill the victim is SIGKILLed directly: its words are then read after its
death, maybe after a takeover, so only the times are comparable.

Each kill is classified by the state it left (the words read at the stop):

  free    the victim did not hold the lock word (no takeover needed);
  beacon  it held the word and its beacon: the kernel marks the beacon
          FUTEX_OWNER_DIED at its death and wakes a sleeper (taken over at
          once); "of which FUTEX_WAITERS": a sleeper had set that flag;
  gap 1   it held the word, the beacon free, and `gaps` odd: between
          winning the word and locking the beacon (each holding adds 1 to
          `gaps` as it enters each of its two gaps, from 0 in a fresh
          record);
  gap 2   the same with `gaps` even: between unlocking the beacon and
          giving the word back (or on the one instruction between gap 1's
          compare-and-swap and its increment);
  other   anything else (e.g. the beacon held by another thread).

A gap leaves the word held and nothing marked: the next writer takes over
after GAP_NS = 100 ms.  A takeover time of SLOW_MS (50 ms) or more counts
as "about 100 ms".  The builds alternate round by round (old, new, new,
old, ...), so the machine's load falls on both alike, and the cases are
interleaved.  --cpus pins every writer to those CPUs
(os.sched_setaffinity); --next-writers runs more than one next writer.

The JSON keeps every kill (build, case, state, the words, the time from
the stop to the kill, each next writer's time), the summaries, the
machine, the load and the CPU other processes used.  Absolute times
depend on the (shared, noisy) machine: on a loaded one a woken writer
waits for a CPU, so "at once" is about a millisecond; the classes and the
100 ms timeouts do not.
"""

import argparse
import importlib.util
import json
import mmap
import os
import random
import select
import signal
import struct
import subprocess
import sys
import time
from multiprocessing import shared_memory

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (BenchParser, cpu_snapshot,  # noqa: E402
                     interpreter_label, others_cpu, parse_list, percentile,
                     result_head, result_tail, save_result)

# A child imports the build it is told to.
BUILD_ENV = "SEQLOCK_BENCH_BUILD"

FIELDS = {"x": "q", "y": "q"}
HOLD_US = 50              # the `hold` loop's section lasts this long
KINDS = {"update": "rec.update(x=i, y=i)",
         "section": "with rec.write() as w: w.x = i; w.y = i",
         "hold": "with rec.write() as w: w.x = i; w.y = i; "
                 f"(busy {HOLD_US} us)"}
WAITING = {"contend": "writes flat out too",
           "alone": "starts at the kill"}
RECORD_AREA = 4096        # the record at the block's start, then:
KILL_SLOT = RECORD_AREA   # int64: the kill's monotonic_ns (else INT64_MAX)
BLOCK = RECORD_AREA + 64
NOT_YET = (1 << 63) - 1
RUN_S = (0.020, 0.060)    # both write this long before the kill
SLOW_MS = 50.0            # a takeover this slow is the gap timeout
GAP_MS = 100.0            # GAP_NS of src/libseqlock/parking.h (both builds)
TIMEOUT = 10.0            # a child's line, a takeover
CASES = ("update", "section", "hold", "update/alone")
CLASSES = ("free", "beacon", "gap 1", "gap 2", "other")

# The record's header words (src/libseqlock/record.h, version 6, x86-64 glibc;
# the --old build must be of the same layout version):
# tests/record_helpers.py's HEADER_OFFSETS.
WORDS = {"sequence": (64, "Q"), "holder": (192, "Q"), "starving": (200, "Q"),
         "gaps": (208, "Q"), "ready": (216, "I"), "beacon": (224, "I")}
FUTEX_WAITERS = 0x80000000
FUTEX_OWNER_DIED = 0x40000000
FUTEX_TID_MASK = 0x3FFFFFFF


def peek(buf):
    return {k: struct.unpack_from("<" + code, buf, off)[0]
            for k, (off, code) in WORDS.items()}


def map_block(name):
    """Map /dev/shm/<name> (no resource tracker claims it)."""
    fd = os.open(os.path.join("/dev/shm", name.lstrip("/")), os.O_RDWR)
    try:
        return mmap.mmap(fd, BLOCK)
    finally:
        os.close(fd)


# ---- the writers (children) -----------------------------------------------
#
# Each role's loop is generated from the few lines of its KIND's section,
# so that the victim's and the next writers' loops write alike: the victim
# until killed, a next writer until its first section completed after the
# kill's time (then it returns how many it wrote and that time).

SECTIONS = {"update": "update(x=i, y=i)",
            "section": "with write() as w:\n    w.x = i\n    w.y = i",
            "hold": "with write() as w:\n    w.x = i\n    w.y = i\n"
                    "    end = clock() + hold\n"
                    "    while clock() < end:\n        pass"}
LOOPS = {"victim": """\
def loop(update, write, clock, kill, hold):
    i = 0
    while True:
        i += 1
{section}
""", "next": """\
def loop(update, write, clock, kill, hold):
    i = 0
    while True:
        i -= 1
{section}
        now = clock()
        if now >= kill[0]:
            return -i, now
"""}


def writer_loop(role, kind):
    ns = {}
    section = "\n".join(" " * 8 + line
                        for line in SECTIONS[kind].splitlines())
    exec(compile(LOOPS[role].format(section=section),
                 f"<{role} {kind}>", "exec"), ns)
    return ns["loop"]


def child(role, shm_name, kind):
    """A writer: `creator` (the first next writer) creates the record,
    `next` (other next writers) and `victim` attach.  Prints
    `ready <token> <pid> <module file>` (its lock token read from the
    holder word inside a first section), then waits for `go` on stdin and
    writes flat out; the next writer stops at its first write completed
    after the kill's time and prints one JSON line."""
    build = os.environ.get(BUILD_ENV)
    if build:
        sys.path.insert(0, build)
    import seqlock_py
    from seqlock_py import SeqRecord

    where = os.path.realpath(seqlock_py.__file__)
    if build and not where.startswith(os.path.realpath(build) + os.sep):
        raise SystemExit(f"asked for {build}, imported {where}")
    size = SeqRecord.buffer_size(**FIELDS)
    if size > RECORD_AREA:
        raise SystemExit(f"record of {size} bytes > {RECORD_AREA}")
    mem = map_block(shm_name)
    view = memoryview(mem)
    buf = view[:size]
    if role == "creator":
        rec = SeqRecord.create(buf, **FIELDS)
    else:
        rec = SeqRecord.attach(buf, **FIELDS)
    with rec.write() as w:
        token = peek(mem)["holder"]
        w.x = w.y = 0
    print(f"ready {token} {os.getpid()} {where}", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 0
    loop = writer_loop("victim" if role == "victim" else "next", kind)
    kill = view[KILL_SLOT:KILL_SLOT + 8].cast("q")
    writes, now = loop(rec.update, rec.write, time.monotonic_ns, kill,
                       HOLD_US * 1000)  # the victim's never returns
    x, y = rec.read()
    print(json.dumps({"done_ns": now, "writes": writes, "x": x, "y": y,
                      "consistent": x == y,
                      "recoveries": rec.recoveries}), flush=True)
    os._exit(0)  # no teardown: the record holds views of the map


# ---- one kill (parent) -----------------------------------------------------

class Child:
    def __init__(self, role, build, shm_name, kind, cpus):
        env = dict(os.environ, **{BUILD_ENV: build})
        self.proc = subprocess.Popen(
            [sys.executable, "-P", os.path.abspath(__file__), "--child",
             role, "--shm", shm_name, "--cases", kind],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus
            else None)

    def line(self, timeout=TIMEOUT):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        return self.proc.stdout.readline().decode()

    def send(self, text):
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


def ready_line(c, role):
    line = c.line()
    if not line or not line.startswith("ready "):
        c.close()
        raise RuntimeError(f"{role} did not start: {line!r}")
    _, token, pid, where = line.split(maxsplit=3)
    return int(token), int(pid), where.strip()


def classify(words, token, pid):
    if words["holder"] != token:
        return "free"
    tid = words["beacon"] & FUTEX_TID_MASK
    if tid == pid:
        return "beacon"
    if tid == 0:
        return "gap 1" if words["gaps"] & 1 else "gap 2"
    return "other"


def one_kill(build, kind, waiting, nexts, mode, cpus, rng, shm_name, mem):
    """One round: `nexts` next writers (the first creates the record) and
    a victim; the victim stopped (mode stop-kill), its words read, then
    killed; each next writer's first section completed after the kill."""
    mem[:BLOCK] = bytes(BLOCK)
    struct.pack_into("<q", mem, KILL_SLOT, NOT_YET)
    nxt, vic = [], None
    try:
        nxt.append(Child("creator", build, shm_name, kind, cpus))
        n_tokens = [ready_line(nxt[0], "next writer")]
        nxt += [Child("next", build, shm_name, kind, cpus)
                for _ in range(nexts - 1)]
        vic = Child("victim", build, shm_name, kind, cpus)
        n_tokens += [ready_line(c, "next writer") for c in nxt[1:]]
        v_token, v_pid, where = ready_line(vic, "victim")
        start_words = peek(mem)
        if waiting == "contend":
            for c in nxt:
                c.send("go\n")
        vic.send("go\n")
        time.sleep(rng.uniform(*RUN_S))
        clock = time.monotonic_ns
        stopped = None
        if mode == "stop-kill":
            t_stop = clock()
            os.kill(v_pid, signal.SIGSTOP)
            _, status = os.waitpid(v_pid, os.WUNTRACED)
            if not os.WIFSTOPPED(status):
                raise RuntimeError(f"victim not stopped: status {status}")
            words = peek(mem)
            t_kill = clock()
            stopped = t_kill - t_stop
        else:
            t_kill = clock()
        struct.pack_into("<q", mem, KILL_SLOT, t_kill)
        os.kill(v_pid, signal.SIGKILL)
        if waiting == "alone":
            for c in nxt:
                c.send("go\n")
        vic.proc.wait()
        if mode != "stop-kill":
            words = peek(mem)  # after death: maybe after a takeover
        got = []
        for c in nxt:
            line = c.line()
            if not line:
                got = None
                break
            got.append(json.loads(line))
            c.proc.wait(TIMEOUT)
    finally:
        for c in nxt:
            c.close()
        if vic is not None:
            vic.close()
    def whose(token):
        return ("none" if token == 0 else "victim" if token == v_token
                else "next" if token in [t for t, _, _ in n_tokens]
                else "?")

    row = {"state": classify(words, v_token, v_pid)
           if mode == "stop-kill" else "unknown",
           "holder": whose(words["holder"]),
           "starving": whose(words["starving"]),
           "beacon": words["beacon"],
           "gaps": words["gaps"] - start_words["gaps"],
           "sequence": words["sequence"] - start_words["sequence"],
           "waiters_flag": bool(words["beacon"] & FUTEX_WAITERS),
           "stop_to_kill_us": None if stopped is None
           else round(stopped / 1e3, 1), "module": where}
    if got is None:
        row.update(takeover_ms=None, hang=True)  # (else no key)
    else:
        first = min(got, key=lambda g: g["done_ns"])
        row.update(takeover_ms=round((first["done_ns"] - t_kill) / 1e6, 4),
                   next_writes=[g["writes"] for g in got],
                   recoveries=first["recoveries"])
        if not all(g["consistent"] for g in got):
            row["inconsistent"] = True  # (else no key)
        if len(got) > 1:
            row["next_done_ms"] = [round((g["done_ns"] - t_kill) / 1e6, 4)
                                   for g in got]
    return row


def one_line_per_kill(out):
    """out as write_json() lays it out, but one line per kill."""
    rows = out.pop("rows")
    text = json.dumps(out, indent=1)
    parts = []
    for case, by in rows.items():
        sides = []
        for side, rs in by.items():
            body = ",\n".join("   " + json.dumps(r) for r in rs)
            sides.append(f"  {json.dumps(side)}: [\n{body}\n  ]")
        parts.append(f" {json.dumps(case)}: {{\n" + ",\n".join(sides)
                     + "\n }")
    text = text[:-2] + ',\n "rows": {\n' + ",\n".join(parts) + "\n }\n}\n"
    out["rows"] = rows
    assert (json.dumps(json.loads(text), sort_keys=True)  # (NaN != NaN)
            == json.dumps(out, sort_keys=True))
    return text


# ---- summary ---------------------------------------------------------------

def summarise(rows):
    times = sorted(r["takeover_ms"] for r in rows if not r.get("hang"))
    held = sorted(r["takeover_ms"] for r in rows if not r.get("hang")
                  and r["state"] not in ("free", "unknown"))
    s = {"kills": len(rows),
         "classes": {c: sum(r["state"] == c for r in rows)
                     for c in (*CLASSES, "unknown")},
         # a sleeper had set it while the victim held its beacon
         "waiters_flag": sum(r["waiters_flag"] for r in rows
                             if r["state"] == "beacon"),
         "hangs": sum(bool(r.get("hang")) for r in rows),
         "inconsistent": sum(bool(r.get("inconsistent")) for r in rows),
         "slow": sum(t >= SLOW_MS for t in times),
         "slow_fraction": (sum(t >= SLOW_MS for t in times) / len(times)
                           if times else float("nan"))}
    for name, vals in (("all", times), ("takeover", held)):
        s[name] = {"n": len(vals), "p50_ms": percentile(vals, 0.5),
                   "p99_ms": percentile(vals, 0.99),
                   "max_ms": vals[-1] if vals else float("nan")}
    by_state = {}
    for c in (*CLASSES, "unknown"):
        vals = sorted(r["takeover_ms"] for r in rows
                      if r["state"] == c and not r.get("hang"))
        if vals:
            by_state[c] = {"n": len(vals), "p50_ms": percentile(vals, 0.5),
                           "max_ms": vals[-1],
                           "slow": sum(t >= SLOW_MS for t in vals)}
    s["by_state"] = by_state
    stops = [r["stop_to_kill_us"] for r in rows
             if r["stop_to_kill_us"] is not None]
    if stops:
        stops.sort()
        s["stop_to_kill_us"] = {"p50": percentile(stops, 0.5),
                                "max": stops[-1]}
    return s


def _ms(v):
    if v != v:  # NaN
        return "-"
    return f"{v:.3f}" if v < 1 else f"{v:.1f}" if v < 100 else f"{v:.0f}"


def case_label(case):
    kind, waiting = case.split("/")
    return f"`{KINDS[kind]}`, next writer {WAITING[waiting]}"


def tables(out):
    builds = out["builds"]
    cases = out["cases"]
    lines = [f"Takeover after a SIGKILLed writer process "
             f"({out['signal']}; {out['kills']} kills per build and case, "
             f"builds alternating): states at the kill, the kills costing "
             f"the next writer >= {SLOW_MS:g} ms (the gap timeout, GAP_NS = "
             f"{GAP_MS:g} ms), takeover time in ms (kill to the next "
             "writer's first completed section) over the kills that left "
             "the lock held, and over all kills:\n",
             "| victim's loop | build | kills | free | beacon (at once) | "
             "of which FUTEX_WAITERS | gap 1 | gap 2 | other or unknown | "
             ">= 50 ms | "
             "fraction | takeover p50 / p99 / max | all kills p50 / p99 / "
             "max |",
             "| --- | --- |" + " ---: |" * 11]
    for case in cases:
        for b in builds:
            s = out["summary"][case][b["side"]]
            c = s["classes"]
            t, a = s["takeover"], s["all"]
            lines.append(
                f"| {case_label(case)} | {b['side']} ({b['label']}) | "
                f"{s['kills']} | {c['free']} | {c['beacon']} | "
                f"{s['waiters_flag']} | {c['gap 1']} | {c['gap 2']} | "
                f"{c['other'] + c['unknown']} | {s['slow']} | "
                f"{s['slow_fraction']:.1%} | "
                f"{_ms(t['p50_ms'])} / {_ms(t['p99_ms'])} / "
                f"{_ms(t['max_ms'])} | {_ms(a['p50_ms'])} / "
                f"{_ms(a['p99_ms'])} / {_ms(a['max_ms'])} |")
    shown = [c for c in (*CLASSES, "unknown")
             if any(c in out["summary"][k][b["side"]]["by_state"]
                    for k in cases for b in builds)]
    lines += ["", "By state at the kill: kills, takeover p50 / max ms, "
              f"and how many took >= {SLOW_MS:g} ms:\n",
              "| case | build | " + " | ".join(shown) + " |",
              "| --- | --- |" + " ---: |" * len(shown)]
    for case in cases:
        for b in builds:
            by = out["summary"][case][b["side"]]["by_state"]
            cells = []
            for c in shown:
                e = by.get(c)
                cells.append("" if e is None else
                             f"{e['n']}: {_ms(e['p50_ms'])} / "
                             f"{_ms(e['max_ms'])}, {e['slow']} slow")
            lines.append(f"| {case} | {b['side']} | " + " | ".join(cells)
                         + " |")
    problems = [f"{case}/{b['side']}: {s['hangs']} hangs, "
                f"{s['inconsistent']} inconsistent"
                for case in cases for b in builds
                for s in [out["summary"][case][b["side"]]]
                if s["hangs"] or s["inconsistent"]]
    m = out["machine"]
    lines += ["", f"Measured on {m.get('cpu', '?')}, {m['cpu_count']} "
              f"logical CPUs, {m['platform']}; "
              f"{interpreter_label(out['interpreter'])}; {out['date']}; "
              f"load {out['load_before']:.2f} before, "
              f"{out['load_after']:.2f} after; other processes "
              f"{out['others_cpu']:.2f} CPUs on average"
              + (f"; writers pinned to CPUs {out['cpus']}" if out["cpus"]
                 else "") + "."]
    if problems:
        lines.append("Problems: " + "; ".join(problems) + ".")
    return "\n".join(lines)


# ---- main ------------------------------------------------------------------

def imported_build():
    spec = importlib.util.find_spec("seqlock_py")
    if spec is None or spec.origin is None:
        return None
    return os.path.dirname(os.path.dirname(os.path.abspath(spec.origin)))


RESULT = "takeover-"  # benchmarks/results/takeover-<tag>.json


def main(argv=None):
    parser = BenchParser(__doc__, RESULT)
    parser.add_argument("--old", metavar="DIR",
                        help="a directory holding the other build of "
                             "seqlock_py (required)")
    parser.add_argument("--old-label", default="old")
    parser.add_argument("--new", metavar="DIR",
                        help="the build measured against it (default: the "
                             "one this interpreter imports)")
    parser.add_argument("--new-label", default="new")
    parser.add_repeats("--kills", dest="kills", metavar="N", full=200,
                       quick=3, help="kills per build and case, one a round")
    parser.add_argument("--cases", type=parse_list, default=list(CASES),
                        help="comma-separated KIND[/WAITING], KIND from "
                             + ",".join(KINDS) + ", WAITING from "
                             + ",".join(WAITING) + " (default contend); "
                             "default " + ",".join(CASES))
    parser.add_argument("--next-writers", type=int, default=1,
                        help="how many next writers (default 1); the "
                             "takeover time is the first one's")
    parser.add_argument("--signal", choices=("stop-kill", "kill"),
                        default="stop-kill",
                        help="stop, read the words, then kill (default); "
                             "or kill at once (states unknown)")
    parser.add_argument("--cpus", type=lambda t: parse_list(t, int),
                        default=None,
                        help="pin both writers to these CPUs (e.g. 0)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_label()
    parser.add_argument("--table", nargs="+", metavar="JSON",
                        help="do not measure: print the tables from these "
                             "results")
    parser.add_argument("--child", choices=("creator", "next", "victim"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--shm", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.shm, args.cases[0])
    if args.table:
        outs = []
        for path in args.table:
            with open(path) as f:
                outs.append(tables(json.load(f)))
        print("\n\n".join(outs))
        return 0
    if args.new is None:
        args.new = imported_build()
    cases = [c if "/" in c else c + "/contend" for c in args.cases]
    if (not cases or args.kills < 1 or args.next_writers < 1
            or any(c.split("/")[0] not in KINDS
                   or c.split("/")[1] not in WAITING for c in cases)):
        parser.error("--cases: KIND[/WAITING] with KIND from "
                     + ",".join(KINDS) + ", WAITING from " + ",".join(WAITING)
                     + "; --kills and --next-writers >= 1")
    for side in ("old", "new"):
        d = getattr(args, side)
        if not d or not os.path.isdir(os.path.join(d, "seqlock_py")):
            parser.error(f"--{side} {d}: no seqlock_py there")
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    builds = [{"side": "old", "dir": os.path.abspath(args.old),
               "label": args.old_label},
              {"side": "new", "dir": os.path.abspath(args.new),
               "label": args.new_label}]
    out = result_head({"label": args.label, "signal": args.signal,
                       "kills": args.kills, "cpus": args.cpus,
                       "next_writers": args.next_writers, "seed": seed,
                       "run_s": list(RUN_S), "slow_ms": SLOW_MS,
                       "gap_ms": GAP_MS, "builds": builds}, loadavgs=True)
    out["cases"] = cases
    rows = {case: {b["side"]: [] for b in builds} for case in cases}
    shm = shared_memory.SharedMemory(create=True, size=BLOCK)
    mem = map_block(shm.name)
    snap0 = cpu_snapshot()
    t0 = time.perf_counter()
    try:
        for i in range(args.kills):
            # old, new; new, old; ...: each build's rounds see the same load
            order = builds if i % 2 == 0 else builds[::-1]
            for case in cases:
                kind, waiting = case.split("/")
                for b in order:
                    row = one_kill(b["dir"], kind, waiting,
                                   args.next_writers, args.signal,
                                   args.cpus, rng, shm.name, mem)
                    row["round"] = i
                    module = row.pop("module")
                    if b.setdefault("module", module) != module:
                        raise RuntimeError(f"{module} is not {b['module']}")
                    rows[case][b["side"]].append(row)
            if (i + 1) % 25 == 0 or i + 1 == args.kills:
                print(f"# {i + 1}/{args.kills} kills per build and case, "
                      f"{time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        mem.close()
        shm.close()
        shm.unlink()
    out["others_cpu"] = others_cpu(snap0, cpu_snapshot())
    out["seconds"] = time.perf_counter() - t0
    result_tail(out)
    out["summary"] = {case: {side: summarise(r) for side, r in by.items()}
                      for case, by in rows.items()}
    out["rows"] = rows
    print()
    print(tables(out))
    save_result(args, out, RESULT, layout=one_line_per_kill)
    return 0


if __name__ == "__main__":
    sys.exit(main())
