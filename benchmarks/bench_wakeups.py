"""What one wake-up of a waiter that waits in a loop costs its process:
CPU time per wake, and the threads it starts.

    python -P benchmarks/bench_wakeups.py [--quick] [--writes N] [--rate HZ]
        [--repeats N] [--cases a,b,...] [--baseline DIR [--baseline-label T]]
        [--json PATH]

A writer process writes N times at HZ (default 2,000 writes/s, a pause
long enough that the waiter is asleep at most writes), then writes an end
mark.  The waiter, in a fresh process of its own per case and round,
waits in a loop until the mark, and reports its process's CPU time
(getrusage: every thread of it, the watcher too) per wake-up, the
wake-ups, and the threads it started (threading.Thread.start calls).
Cases:

    rec.wait(seq)                 a thread's wait, then read_versioned()
    await rec.wait_async(seq)     the same awaited in an asyncio loop
    async for rec.changes_async() the asyncio iterator
    reader.wait()                 a SeqRing reader's wait, then poll()
    await reader.wait_async()     the same awaited
    os.read(pipe)                 floor: a thread blocked on a pipe the
                                  writer writes a byte to
    asyncio, answered by a thread floor: the same pipe read by a thread that
                                  answers a future of the loop with
                                  call_soon_threadsafe(), as any watcher
                                  thread must: what asyncio itself costs

With --baseline DIR (a directory holding a seqlock_py built from another
commit), every case runs on both builds, alternating per round, and the
table gives each build's median and their ratio.  Medians over rounds;
the machine is shared: compare within one run, never across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import report_head, result_head, result_tail  # noqa: E402

BUILD_ENV = "SEQLOCK_BENCH_BUILD"  # a child imports the build it is told to

CASES = {
    "rec.wait(seq)": "record",
    "await rec.wait_async(seq)": "record",
    "async for rec.changes_async()": "record",
    "reader.wait()": "ring",
    "await reader.wait_async()": "ring",
    "os.read(pipe)": "pipe",
    "asyncio, answered by a thread": "pipe",
}
END = -1.0  # the writer's end mark


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def writer(kind: str, name: str, fd: int, writes: int, rate: float, ready) -> None:
    """Write `writes` times at `rate`, then the end mark."""
    from seqlock_py import SeqRecord, SeqRing
    target = (SeqRecord.attach_shared(name) if kind == "record"
              else SeqRing.attach_shared(name) if kind == "ring" else None)
    ready.wait()
    period, due = 1.0 / rate, time.monotonic()
    for i in range(writes + 1):
        due += period
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        x = END if i == writes else float(i)
        if kind == "record":
            target.update(x=x)
        elif kind == "ring":
            target.append(x=x)
        else:
            os.write(fd, b"." if i < writes else b"!")
    if target is not None:
        target.close()


def wait_loop(case: str, target, fd: int) -> int:
    """The waiter's loop: returns its wake-ups."""
    wakes = 0
    if case == "rec.wait(seq)":
        seq, (x,) = target.read_versioned()
        while x != END:
            target.wait(seq)
            seq, (x,) = target.read_versioned()
            wakes += 1
    elif case == "reader.wait()":
        reader, done = target.reader(), False
        while not done:
            reader.wait()
            done = any(entry[0] == END for _, entry in reader.poll())
            wakes += 1
    elif case == "os.read(pipe)":
        while b"!" not in os.read(fd, 4096):
            wakes += 1
        wakes += 1
    else:
        wakes = asyncio.run(async_loop(case, target, fd))
    return wakes


async def async_loop(case: str, target, fd: int) -> int:
    wakes = 0
    if case == "await rec.wait_async(seq)":
        seq, (x,) = target.read_versioned()
        while x != END:
            await target.wait_async(seq)
            seq, (x,) = target.read_versioned()
            wakes += 1
    elif case == "async for rec.changes_async()":
        async for _, (x,) in target.changes_async():
            if x == END:
                break
            wakes += 1
        wakes += 1
    elif case == "await reader.wait_async()":
        reader, done = target.reader(), False
        while not done:
            await reader.wait_async()
            done = any(entry[0] == END for _, entry in reader.poll())
            wakes += 1
    else:  # asyncio, answered by a thread
        loop = asyncio.get_running_loop()
        asked, futures = threading.Semaphore(0), []

        def watcher():
            while True:
                chunk = os.read(fd, 4096)
                asked.acquire()
                loop.call_soon_threadsafe(futures.pop().set_result, b"!" in chunk)

        threading.Thread(target=watcher, daemon=True).start()
        done = False
        while not done:
            future = loop.create_future()
            futures.append(future)
            asked.release()
            done = await future
            wakes += 1
    return wakes


def child(case: str, writes: int, rate: float) -> dict:
    """One case, one round, in this (fresh) process."""
    from seqlock_py import SeqRecord, SeqRing
    kind = CASES[case]
    name = f"wk{os.getpid()}"
    fd_r = fd_w = -1
    target = None
    if kind == "record":
        target = SeqRecord.create_shared(name, x="d")
    elif kind == "ring":
        target = SeqRing.create_shared(name, 256, x="d")
    else:
        fd_r, fd_w = os.pipe()
    started = [0]
    real_start = threading.Thread.start

    def counting_start(self, *args, **kwargs):
        started[0] += 1
        return real_start(self, *args, **kwargs)

    context = multiprocessing.get_context("fork" if kind == "pipe" else "spawn")
    ready = context.Event()
    proc = context.Process(target=writer, args=(kind, name, fd_w, writes, rate, ready))
    proc.start()
    if fd_w >= 0:
        os.close(fd_w)
    threading.Thread.start = counting_start  # the writer's own start is not ours
    try:
        ready.set()
        cpu = cpu_seconds()
        wall = time.monotonic()
        wakes = wait_loop(case, target, fd_r)
        cpu = cpu_seconds() - cpu
        wall = time.monotonic() - wall
    finally:
        threading.Thread.start = real_start
        proc.join(60)
        if target is not None:
            target.close()
            from multiprocessing import shared_memory
            try:
                shared_memory.SharedMemory(name).unlink()
            except FileNotFoundError:
                pass
    return {"wakes": wakes, "cpu_us_per_wake": cpu / max(wakes, 1) * 1e6,
            "threads_started": started[0], "wall_s": wall}


def run_child(case: str, build: str | None, args) -> dict:
    env = dict(os.environ)
    env.pop(BUILD_ENV, None)
    if build:
        env[BUILD_ENV] = build
    done = subprocess.run(
        [sys.executable, "-P", os.path.abspath(__file__), "--child", case,
         "--writes", str(args.writes), "--rate", str(args.rate)],
        capture_output=True, text=True, env=env, cwd="/", timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{case}: child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def measure(args) -> dict:
    builds = [("this build", None)]
    if args.baseline:
        builds.append((args.baseline_label or args.baseline, args.baseline))
    out = result_head({"writes": args.writes, "rate_hz": args.rate, "repeats": args.repeats,
                       "builds": [label for label, _ in builds]})
    results = out["cases"] = {case: {label: [] for label, _ in builds} for case in args.cases}
    for _ in range(args.repeats):
        for case in args.cases:
            order = builds if CASES[case] != "pipe" else builds[:1]
            for label, build in order:
                results[case][label].append(run_child(case, build, args))
    return result_tail(out)


def table(out: dict) -> str:
    builds = out["builds"]
    head = ["case"] + [f"{b}: CPU µs/wake, threads" for b in builds]
    if len(builds) > 1:
        head.append("ratio")
    rows = []
    for case, by_build in out["cases"].items():
        row, medians = [case], []
        for b in builds:
            rounds = by_build.get(b, [])
            if not rounds:
                row.append("")
                continue
            cpu = statistics.median(r["cpu_us_per_wake"] for r in rounds)
            spread = f"{min(r['cpu_us_per_wake'] for r in rounds):.0f}-{max(r['cpu_us_per_wake'] for r in rounds):.0f}"
            threads = statistics.median(r["threads_started"] for r in rounds)
            wakes = statistics.median(r["wakes"] for r in rounds)
            row.append(f"{cpu:.1f} ({spread}), {threads:g} over {wakes:g} wakes")
            medians.append(cpu)
        if len(builds) > 1:
            row.append(f"{medians[0] / medians[1]:.2f}x" if len(medians) == 2 else "")
        rows.append(row)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def parse_cases(text: str) -> tuple[list[str], set[str]]:
    """--cases: names separated by commas, where a name may hold a comma
    itself ("asyncio, answered by a thread"); (cases, unknown names)."""
    cases, unknown, rest = [], set(), text
    while rest:
        for case in sorted(CASES, key=len, reverse=True):
            if rest == case or rest.startswith(case + ","):
                cases.append(case)
                rest = rest[len(case) + 1:]
                break
        else:
            name, _, rest = rest.partition(",")
            unknown.add(name)
    return cases, unknown


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few writes, one round")
    parser.add_argument("--writes", type=int, help="writes per round (default 2,000; --quick 50)")
    parser.add_argument("--rate", type=float, default=2000.0, help="writes per second")
    parser.add_argument("--repeats", type=int, help="rounds (default 5; --quick 1)")
    parser.add_argument("--cases", help="comma-separated, from: " + ", ".join(CASES))
    parser.add_argument("--baseline", metavar="DIR", help="a directory holding another build of seqlock_py")
    parser.add_argument("--baseline-label", default="", help="what the baseline is")
    parser.add_argument("--json", metavar="PATH", help="write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.writes is None:
        args.writes = 50 if args.quick else 2000
    if args.repeats is None:
        args.repeats = 1 if args.quick else 5
    if args.child:
        if os.environ.get(BUILD_ENV):
            sys.path.insert(0, os.environ[BUILD_ENV])
        print(json.dumps(child(args.child, args.writes, args.rate)))
        return 0
    args.cases, unknown = (list(CASES), set()) if not args.cases else parse_cases(args.cases)
    if unknown or args.writes < 1 or args.repeats < 1 or args.rate <= 0:
        parser.error(f"--writes and --repeats at least 1, --rate positive, --cases from {', '.join(CASES)}"
                     + (f" (not {', '.join(sorted(unknown))})" if unknown else ""))
    if args.baseline and not os.path.isdir(os.path.join(args.baseline, "seqlock_py")):
        parser.error(f"--baseline {args.baseline}: no seqlock_py there")
    out = measure(args)
    print(report_head("bench_wakeups", out, f"--writes {args.writes} --rate {args.rate:g} --repeats {args.repeats}"))
    print(table(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
