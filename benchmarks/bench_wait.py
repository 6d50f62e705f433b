"""Readers that wait for news: wake-up latency from a writer's commit, the
CPU an idle waiter burns, and what waiting readers cost a writer.

    python -P benchmarks/bench_wait.py [--quick] [--writes N] [--repeats N]
        [--parts latency,idle,many,write] [--idle-seconds T] [--idle-repeats N]
        [--many-waiters N] [--many-repeats N]
        [--baseline DIR [--baseline-label TEXT] [--baseline-rounds N]]
        [--label TEXT] [--json PATH]
    python -P benchmarks/bench_wait.py --table WAIT.json [...]

benchmarks/run_all.sh runs it under both interpreters (with the build of
the feature's parent commit as the baseline), then --table prints
wait_table.md.

latency  A writer updates a record {x: float, t: int64}, stamping
         t = time.monotonic_ns() (CLOCK_MONOTONIC: one clock for every
         process) inside the section; the section's end is the commit.  It
         writes every 5-10 ms (uniformly random, so writes do not lock into
         step with a poll or a 50 ms slice), so the waiter is asleep at each
         write.  The waiter takes monotonic_ns() as its wait returns and
         records now - t.  Contenders: rec.wait(seq) then
         rec.read_versioned(); `await rec.wait_async(seq)` in an asyncio
         loop; the polling idiom `while rec.read_versioned()[0] == seq:
         time.sleep(0.001)`; a Condition (the writer updates, then
         notify_all() under the condition's lock; the waiter checks the
         sequence and waits under it): threading.Condition for a writer
         thread, multiprocessing.Condition for a writer process.  The writer
         is a thread of this process, or another process (spawn) with the
         record in multiprocessing.shared_memory.  The waiter runs in this
         process's main thread (where a signal ends rec.wait()'s sleep to
         run its handlers) or in another thread.
         --writes writes per case and round; p50, p99 and max per round,
         then medians over rounds.  A waiter that finds more than one write
         ended since its last look records no sample ("skipped"); a sample
         over 20 ms counts as "late" (a lost wake-up would show as about
         1 s, rec.wait()'s safety nap).
idle     One waiter, nothing written, for T (--idle-seconds, 2 s): the CPU
         time of the waiting thread (time.thread_time()), of the whole
         process (getrusage), the thread's voluntary context switches
         (/proc/self/task/<tid>/status), i.e. its wake-ups, per second, and
         the whole process's context switches (getrusage: voluntary and
         involuntary, of every thread, ended ones too) per second.
         rec.wait(seq, T) in the main thread, in another thread, and in the
         main thread of another process (record in shared memory, figures
         measured there); `await rec.wait_async(seq, T)` (the thread is the
         loop's; the wait sleeps in the record's watcher thread, which the
         process figures include, its start too), and the same measured
         once the wait is settled (watcher started and asleep: the steady
         cost of a pending wait); for reference, a thread blocked in
         os.read() on a pipe (a timer thread writes a byte at T: its own
         sleep and start are in the process figures),
         threading.Condition.wait(T) and the 1 ms polling loop.
many     N (--many-waiters, 2,000) concurrent `await rec.wait_async(seq)`
         on one record in one event loop, then one write from another
         thread: the process's threads while they wait (kernel count,
         /proc/self/task, against the count before), the microseconds per
         wait to start them all, and the time from the write to the first,
         median and last waiter's return (each stamps monotonic_ns() as its
         await returns; the writer stamps it just before its update()), and
         how many were woken.  --many-repeats rounds, medians.
write    ns per write, rec.update(x=v) and `with rec.write() as w:
         w.x = v`, with 0, 1 and 4 threads waiting for news
         (`for _ in rec.changes(): ...`, so each one wakes per write it sees
         and waits again).  Tight: a loop of writes, best of 5 turns per
         round; waiters then see a fraction of the writes (wakes per write
         reported).  Paced: one write every 1 ms, each timed on its own with
         perf_counter_ns, so every write finds the waiters asleep and wakes
         them; the timer's own cost is its row, and for reference
         `with cond: cond.notify_all()` with 0, 1, 4 threads in
         threading.Condition.wait() (the same futex wake-up, paid by the
         Condition idiom).  With --baseline DIR (a
         directory holding a seqlock_py built from another commit, e.g. the
         feature's parent): the tight no-waiter writes of this build and of
         that one, each round in a fresh subprocess importing its own build,
         alternating (new, old, new, old, ...), ratios per round, medians
         over --baseline-rounds (default 15).  Both builds are copied to
         folders of one name length, and each round pads both children's
         environment by one random size: memory layout alone moves these
         times by several per cent (see compare_builds).

The JSON keeps each round's figures, the machine and the load average
before and after.  Absolute numbers depend on the (shared, noisy) machine:
compare within a run.
"""

import argparse
import array
import asyncio
import functools
import json
import multiprocessing
import os
import queue
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing import shared_memory

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (TURNS, BenchParser, attach_shm,  # noqa: E402
                     best_of_turns, calibrate, interpreter_label,
                     load_results, measured_on, ns_per_op, percentile,
                     report_head, result_head, rounds_beside_writers,
                     run_parts, summary,
                     time_sections, time_updates)

# A --baseline child imports the build it is told to (see compare_builds).
BUILD_ENV = "SEQLOCK_BENCH_BUILD"
PAD_ENV = "SEQLOCK_BENCH_PAD"  # its length varies the memory layout
if os.environ.get(BUILD_ENV):
    sys.path.insert(0, os.environ[BUILD_ENV])
import seqlock_py  # noqa: E402
from seqlock_py import SeqRecord  # noqa: E402

FIELDS = {"x": "d", "t": "q"}
PAUSE = (0.005, 0.010)  # the latency writer sleeps this long between writes
POLL = 0.001            # the polling idiom's sleep
LATE_NS = 20_000_000    # a wake-up this late is reported
WAIT_TIMEOUT = 5.0      # one wait longer than this: a wake-up lost for good
TIMEOUT = 120           # barriers and joins
PACED_PAUSE = 0.001
WAITERS = (0, 1, 4)
PLACES = ("thread", "main")  # where the waiter runs
COND = "Condition.wait() / notify_all()"
CONTENDERS = ("rec.wait(seq)", "await rec.wait_async(seq)",
              "poll: sleep(0.001)", COND)
COND_TYPE = {"thread": "threading.Condition",
             "process": "multiprocessing.Condition"}


# ---- latency: the writer side --------------------------------------------

def writer_for(name, rec, cond):
    """write(v): one section setting x = v and t = now (the commit follows
    at once), then, for the Condition, notify_all() under its lock."""
    update = rec.update
    clock = time.monotonic_ns
    if name != COND:
        return lambda v: update(x=v, t=clock())

    def write(v):
        update(x=v, t=clock())
        with cond:
            cond.notify_all()
    return write


def run_writer(rec, cond, plan, barrier, results):
    """For each (round, contender, place, writes) in plan: start behind
    barrier, write that many times at PAUSE, then x = -1 (the end), put
    the item on results."""
    sleep = time.sleep
    try:
        for i, item in enumerate(plan):
            _, name, _, writes = item
            write = writer_for(name, rec, cond)
            pause = random.Random(i).uniform
            barrier.wait(timeout=TIMEOUT)
            for v in range(writes):
                sleep(pause(*PAUSE))
                write(float(v))
            sleep(PAUSE[1])
            write(-1.0)
            results.put(item)
    except BaseException:
        barrier.abort()  # the waiter stops waiting
        raise


def process_writer(shm_name, cond, plan, barrier, results):
    shm = attach_shm(shm_name)
    rec = SeqRecord.attach(shm.buf, **FIELDS)
    run_writer(rec, cond, plan, barrier, results)
    del rec  # it holds the buffer
    shm.close()


# ---- latency: the waiter side --------------------------------------------

class Tally:
    """Latencies of the writes a waiter saw, in ns."""

    def __init__(self, rec):
        self.read = rec.read_versioned
        self.lat = array.array("q")
        self.skipped = 0
        self.timeouts = 0

    def news(self, seq, now):
        """Account for the state after seq, seen at now; its sequence, or
        None once the writer has finished."""
        new, (x, t) = self.read()
        if x < 0:
            return None
        if new == seq + 2:
            self.lat.append(now - t)
        else:
            self.skipped += 1
        return new

    def timed_out(self):
        self.timeouts += 1
        if self.timeouts > 2:
            raise RuntimeError(f"no news for {WAIT_TIMEOUT} s, 3 times")


def wait_waiter(rec, cond, barrier):
    tally = Tally(rec)
    wait = rec.wait
    clock = time.monotonic_ns
    seq = rec.read_versioned()[0]
    barrier.wait(timeout=TIMEOUT)
    while seq is not None:
        if wait(seq, WAIT_TIMEOUT):
            seq = tally.news(seq, clock())
        else:
            tally.timed_out()
    return tally


def async_waiter(rec, cond, barrier):
    return asyncio.run(_async_waiter(rec, barrier))


async def _async_waiter(rec, barrier):
    tally = Tally(rec)
    wait_async = rec.wait_async
    clock = time.monotonic_ns
    seq = rec.read_versioned()[0]
    barrier.wait(timeout=TIMEOUT)  # blocks the loop: nothing else runs yet
    while seq is not None:
        if await wait_async(seq, WAIT_TIMEOUT):
            seq = tally.news(seq, clock())
        else:
            tally.timed_out()
    return tally


def poll_waiter(rec, cond, barrier):
    tally = Tally(rec)
    read = rec.read_versioned
    sleep = time.sleep
    clock = time.monotonic_ns
    seq = read()[0]
    barrier.wait(timeout=TIMEOUT)
    while seq is not None:
        give_up = clock() + int(WAIT_TIMEOUT * 1e9)
        while read()[0] == seq:
            sleep(POLL)
            if clock() > give_up:
                tally.timed_out()
                give_up = clock() + int(WAIT_TIMEOUT * 1e9)
        seq = tally.news(seq, clock())
    return tally


def cond_waiter(rec, cond, barrier):
    tally = Tally(rec)
    read = rec.read_versioned
    clock = time.monotonic_ns
    seq = read()[0]
    barrier.wait(timeout=TIMEOUT)
    while seq is not None:
        with cond:
            while read()[0] == seq:
                if not cond.wait(WAIT_TIMEOUT):
                    tally.timed_out()
            now = clock()
        seq = tally.news(seq, now)
    return tally


WAITERS_BY_NAME = dict(zip(CONTENDERS, (wait_waiter, async_waiter,
                                        poll_waiter, cond_waiter)))


def in_thread(fn, *args):
    """fn(*args) in a new thread; its result, or its exception re-raised."""
    box = []

    def run():
        try:
            box.append((True, fn(*args)))
        except BaseException as e:  # re-raised in the calling thread
            box.append((False, e))
    t = threading.Thread(target=run)
    t.start()
    t.join(TIMEOUT)
    if not box:
        raise RuntimeError("waiter thread did not finish")
    ok, value = box[0]
    if not ok:
        raise value
    return value


def latency_plan(repeats, writes):
    """A short warm-up round (-1), then every contender and place."""
    return [(rnd, name, place, writes if rnd >= 0 else min(writes, 10))
            for rnd in range(-1, repeats) for name in CONTENDERS
            for place in PLACES]


def bench_latency(args, out, log):
    ctx = multiprocessing.get_context("spawn")
    shm = shared_memory.SharedMemory(
        create=True, size=SeqRecord.buffer_size(**FIELDS))
    plan = latency_plan(args.repeats, args.writes)
    sides = {  # placement: (record, condition, barrier, results)
        "thread": (SeqRecord(**FIELDS), threading.Condition(),
                   threading.Barrier(2), queue.SimpleQueue()),
        "process": (SeqRecord.create(shm.buf, **FIELDS), ctx.Condition(),
                    ctx.Barrier(2), ctx.Queue())}
    tw = threading.Thread(target=run_writer, daemon=True, args=(
        sides["thread"][0], sides["thread"][1], plan,
        *sides["thread"][2:]))
    cond, barrier, results = sides["process"][1:]  # (not the record)
    pw = ctx.Process(target=process_writer,
                     args=(shm.name, cond, plan, barrier, results))
    rounds = {}

    def one_round(rnd):
        try:
            for item in (i for i in plan if i[0] == rnd):
                _, name, place, _ = item
                for placement, (rec, cond, barrier,
                                results) in sides.items():
                    waiter = WAITERS_BY_NAME[name]
                    try:
                        if place == "main":
                            tally = waiter(rec, cond, barrier)
                        else:
                            tally = in_thread(waiter, rec, cond, barrier)
                    except BaseException:
                        barrier.abort()
                        raise
                    done = results.get(timeout=TIMEOUT)
                    assert tuple(done) == item, (done, item)
                    if rnd >= 0:
                        rounds.setdefault((placement, name, place),
                                          []).append(round_row(tally))
        finally:  # an error's traceback keeps this frame: not the record
            rec = tally = None  # noqa: F841 (it may be the shared one)
    try:
        rounds_beside_writers(tw, pw, args.repeats, one_round, log, TIMEOUT)
    finally:
        sides.clear()  # the process side's record holds the shared buffer
        shm.close()
        shm.unlink()
    cells = []
    for (placement, name, place), rows in rounds.items():
        med = {k: statistics.median(r[k] for r in rows)
               for k in ("p50_us", "p90_us", "p99_us", "max_us")}
        cells.append({
            "placement": placement, "contender": name, "waiter": place,
            **({"condition": COND_TYPE[placement]} if name == COND else {}),
            **med, "max_all_us": max(r["max_us"] for r in rows),
            **{k: sum(r[k] for r in rows)
               for k in ("samples", "skipped", "late", "timeouts")},
            "rounds": rows})
    out["latency"] = cells


def round_row(tally):
    lat = sorted(tally.lat)
    row = {"samples": len(lat), "skipped": tally.skipped,
           "timeouts": tally.timeouts,
           "late": sum(1 for v in lat if v > LATE_NS),
           "max_us": lat[-1] / 1e3 if lat else float("nan")}
    for q in (50, 90, 99):
        row[f"p{q}_us"] = percentile(lat, q / 100) / 1e3
    return row


# ---- idle: an idle waiter's CPU ------------------------------------------

def switches(tid):
    """This thread's voluntary context switches so far (None off Linux)."""
    try:
        with open(f"/proc/self/task/{tid}/status") as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def snapshot():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    tid = threading.get_native_id()
    return (time.perf_counter(), time.thread_time(), ru.ru_utime + ru.ru_stime,
            ru.ru_nvcsw + ru.ru_nivcsw, tid, switches(tid))


def since(before, result):
    """The figures between snapshot() before and now, in the same thread."""
    wall0, thread0, proc0, nvcsw0, tid, sw0 = before
    wall, thread, proc, nvcsw, _, sw = snapshot()
    return {"wall_s": wall - wall0, "thread_cpu_s": thread - thread0,
            "process_cpu_s": proc - proc0,
            "process_switches": nvcsw - nvcsw0,
            "wakeups": None if sw0 is None else sw - sw0,
            "returned": result}


def idle_wait(rec, seconds):
    seq = rec.read_versioned()[0]
    before = snapshot()
    return since(before, rec.wait(seq, seconds))


async def _idle_wait_async(rec, seconds):
    seq = rec.read_versioned()[0]
    await asyncio.sleep(0)  # the loop is up
    before = snapshot()
    return since(before, await rec.wait_async(seq, seconds))


def idle_wait_async(rec, seconds):
    return asyncio.run(_idle_wait_async(rec, seconds))


async def _idle_wait_async_settled(rec, seconds):
    seq = rec.read_versioned()[0]
    settle = 0.1
    task = asyncio.ensure_future(rec.wait_async(seq, seconds + settle))
    await asyncio.sleep(settle)  # the watcher started and fell asleep
    before = snapshot()
    return since(before, await task)


def idle_wait_async_settled(rec, seconds):
    return asyncio.run(_idle_wait_async_settled(rec, seconds))


def idle_pipe_read(rec, seconds):
    r, w = os.pipe()
    timer = threading.Timer(seconds, os.write, (w, b"x"))
    try:
        timer.start()
        before = snapshot()
        got = os.read(r, 1)
        return since(before, got != b"x")  # False, as a wait that timed out
    finally:
        timer.join()
        os.close(r)
        os.close(w)


def idle_poll(rec, seconds):
    read = rec.read_versioned
    sleep = time.sleep
    clock = time.perf_counter
    seq = read()[0]
    before = snapshot()
    end = clock() + seconds
    while read()[0] == seq and clock() < end:
        sleep(POLL)
    return since(before, read()[0] != seq)


def idle_condition(rec, seconds):
    cond = threading.Condition()
    before = snapshot()
    with cond:
        got = cond.wait(seconds)
    return since(before, got)


def idle_child(shm_name, seconds, results):
    shm = attach_shm(shm_name)
    rec = SeqRecord.attach(shm.buf, **FIELDS)
    results.put(idle_wait(rec, seconds))
    del rec
    shm.close()


def idle_in_process(seconds):
    ctx = multiprocessing.get_context("spawn")
    shm = shared_memory.SharedMemory(
        create=True, size=SeqRecord.buffer_size(**FIELDS))
    rec = SeqRecord.create(shm.buf, **FIELDS)
    results = ctx.Queue()
    p = ctx.Process(target=idle_child, args=(shm.name, seconds, results))
    try:
        p.start()
        got = results.get(timeout=TIMEOUT)
        p.join(TIMEOUT)
    finally:
        if p.is_alive():
            p.kill()
            p.join()
        del rec
        shm.close()
        shm.unlink()
    return got


IDLE = [("rec.wait(seq, T)", "main", idle_wait),
        ("rec.wait(seq, T)", "thread", idle_wait),
        ("rec.wait(seq, T)", "process", None),
        ("await rec.wait_async(seq, T)", "main", idle_wait_async),
        ("await rec.wait_async(seq, T), settled", "main",
         idle_wait_async_settled),
        ("os.read(pipe)", "main", idle_pipe_read),
        ("os.read(pipe)", "thread", idle_pipe_read),
        ("threading.Condition.wait(T)", "thread", idle_condition),
        ("poll: sleep(0.001)", "main", idle_poll),
        ("poll: sleep(0.001)", "thread", idle_poll)]


def bench_idle(args, out, log):
    rows = {(name, place): [] for name, place, _ in IDLE}
    rec = SeqRecord(**FIELDS)
    for rnd in range(args.idle_repeats):
        t0 = time.perf_counter()
        for name, place, fn in IDLE:
            if place == "process":
                got = idle_in_process(args.idle_seconds)
            elif place == "main":
                got = fn(rec, args.idle_seconds)
            else:
                got = in_thread(fn, rec, args.idle_seconds)
            rows[name, place].append(got)
        log(f"# idle round {rnd + 1}/{args.idle_repeats}: "
            f"{time.perf_counter() - t0:.1f} s")
    cells = []
    for (name, place), got in rows.items():
        cell = {"contender": name, "waiter": place, "rounds": got}
        for k in ("wall_s", "thread_cpu_s", "process_cpu_s"):
            cell[k] = statistics.median(g[k] for g in got)
        per_s = [g["wakeups"] / g["wall_s"] for g in got
                 if g["wakeups"] is not None]
        cell["wakeups_per_s"] = statistics.median(per_s) if per_s else None
        cell["process_switches_per_s"] = statistics.median(
            g["process_switches"] / g["wall_s"] for g in got)
        cells.append(cell)
    out["idle"] = {"seconds": args.idle_seconds,
                   "repeats": args.idle_repeats, "cells": cells}


# ---- many: thousands of wait_async on one record --------------------------

def os_threads():
    """The process's threads as the kernel counts them (None off Linux)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


async def _many_round(rec, n):
    seq = rec.read_versioned()[0]
    woke = array.array("q")
    clock = time.monotonic_ns

    async def one():
        got = await rec.wait_async(seq, WAIT_TIMEOUT * 4)
        woke.append(clock())
        return got

    threads_before = os_threads()
    t0 = time.perf_counter()
    tasks = [asyncio.ensure_future(one()) for _ in range(n)]
    everything = asyncio.gather(*tasks)
    await asyncio.sleep(0)  # every task runs to its await: registered
    started_s = time.perf_counter() - t0
    await asyncio.sleep(0.2)  # all asleep
    threads_waiting = os_threads()
    written = []

    def write():
        written.append(clock())
        rec.update(x=1.0, t=written[0])
    writer = threading.Thread(target=write)
    writer.start()
    results = await everything
    writer.join()
    lat = sorted((t - written[0]) / 1e6 for t in woke)
    return {"threads_before": threads_before,
            "threads_waiting": threads_waiting,
            "start_us_per_wait": started_s / n * 1e6,
            "woken": sum(1 for r in results if r is True),
            "first_ms": lat[0], "median_ms": statistics.median(lat),
            "last_ms": lat[-1]}


def bench_many(args, out, log):
    rec = SeqRecord(**FIELDS)
    rounds = []
    for rnd in range(args.many_repeats):
        rounds.append(asyncio.run(_many_round(rec, args.many_waiters)))
        time.sleep(0.3)  # the watcher lingers, then leaves
        log(f"# many round {rnd + 1}/{args.many_repeats}: "
            f"last woken after {rounds[-1]['last_ms']:.1f} ms")
    cell = {k: statistics.median(r[k] for r in rounds)
            for k in ("start_us_per_wait", "first_ms", "median_ms",
                      "last_ms")}
    if all(r["threads_waiting"] is not None for r in rounds):
        cell["extra_threads"] = max(r["threads_waiting"] - r["threads_before"]
                                    for r in rounds)
    out["many"] = {"waiters": args.many_waiters,
                   "repeats": args.many_repeats,
                   "woken_min": min(r["woken"] for r in rounds),
                   **cell, "rounds": rounds}


def many_table(outs):
    outs = [o for o in outs if "many" in o]
    if not outs:
        return ""
    n = outs[0]["many"]["waiters"]
    lines = [f"Many async waiters: {n} concurrent `await rec.wait_async(seq)` "
             "on one record in one event loop, one write from another "
             f"thread (medians of {outs[0]['many']['repeats']} rounds):\n",
             "| build | extra threads while waiting | µs per wait to start |"
             " woken (fewest) | first / median / last woken, ms after the "
             "write |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for o in outs:
        m = o["many"]
        lines.append(
            f"| {interpreter_label(o['interpreter'])} |"
            f" {m.get('extra_threads', '?')} |"
            f" {m['start_us_per_wait']:.1f} | {m['woken_min']} of {n} |"
            f" {m['first_ms']:.1f} / {m['median_ms']:.1f} /"
            f" {m['last_ms']:.1f} |")
    return "\n".join(lines) + "\n"


# ---- write: a write's cost, with and without waiters ---------------------

def time_paced(step, n):
    """ns of each of n calls of step(), PACED_PAUSE apart (each one alone:
    a waiter woken by the last has gone back to sleep)."""
    clock = time.perf_counter_ns
    sleep = time.sleep
    lat = array.array("q")
    for _ in range(n):
        sleep(PACED_PAUSE)
        t0 = clock()
        step()
        lat.append(clock() - t0)
    return lat


def one_update(rec):
    return functools.partial(rec.update, x=1.0)


def one_section(rec):
    def section():
        with rec.write() as w:
            w.x = 1.0
    return section


def one_notify(cond):
    def notify():
        with cond:
            cond.notify_all()
    return notify


UPDATE, SECTION = "rec.update(x=v)", "with rec.write() as w: w.x = v"
TIGHT = {UPDATE: time_updates, SECTION: time_sections}
PACED = {UPDATE: one_update, SECTION: one_section}
NOTIFY = "with cond: cond.notify_all()"
TIMER = "(the timer alone)"


class Waiters:
    """k threads waiting for news on rec (`for _ in rec.changes()`), each
    counting the writes it woke for, until the block ends."""

    def __init__(self, rec, k):
        self.rec = rec
        self.stop = False
        self.woke = [0] * k
        self.errors = []
        self.threads = [threading.Thread(target=self.run, args=(i,))
                        for i in range(k)]

    def run(self, i):
        try:
            woke = -1  # changes() first yields the current state
            for _ in self.rec.changes():
                woke += 1
                self.woke[i] = woke
                if self.stop:
                    break
        except BaseException as e:  # re-raised on exit
            self.errors.append(e)

    def __enter__(self):
        for t in self.threads:
            t.start()
        time.sleep(0.05)  # all asleep
        return self

    def __exit__(self, *exc):
        self.stop = True
        while any(t.is_alive() for t in self.threads):
            self.rec.update(x=0.0)
            for t in self.threads:
                t.join(0.01)
        if self.errors and exc[0] is None:
            raise self.errors[0]

    def total(self):
        return sum(self.woke)

    def counting(self, timers):
        """timers, each also adding the wake-ups during its runs to
        self.during[its key]."""
        self.during = dict.fromkeys(timers, 0)

        def counted(k, run):
            def timed(n):
                before = self.total()
                seconds = run(n)
                self.during[k] += self.total() - before
                return seconds
            return timed
        return {k: counted(k, run) for k, run in timers.items()}


class CondWaiters(Waiters):
    """k threads in threading.Condition.wait(), for reference: the
    wake-up a notify_all() pays for."""

    def __init__(self, k):
        super().__init__(None, k)
        self.cond = threading.Condition()

    def run(self, i):
        with self.cond:
            while not self.stop:
                self.cond.wait()
                self.woke[i] += 1

    def __exit__(self, *exc):
        self.stop = True
        while any(t.is_alive() for t in self.threads):
            with self.cond:
                self.cond.notify_all()
            for t in self.threads:
                t.join(0.01)


def tight_timers():
    """A record some writer has used (its sequence past the cached small
    ints, as in use) and TIGHT's timers on it."""
    rec = SeqRecord(x="d")
    for _ in range(1000):
        rec.update(x=1.0)
    return rec, {k: functools.partial(fn, rec) for k, fn in TIGHT.items()}


def bench_write(args, out, log):
    rec, timers = tight_timers()
    n = {k: calibrate(run, args.call_seconds) for k, run in timers.items()}
    tight = {(k, w): [] for w in WAITERS for k in TIGHT}
    wakes = {(k, w): [] for w in WAITERS for k in TIGHT}
    paced = {(k, w): [] for w in WAITERS for k in (*PACED, NOTIFY)}
    timer = []
    for rnd in range(args.repeats):
        t0 = time.perf_counter()
        for w in WAITERS:
            with Waiters(rec, w) as waiters:
                best = best_of_turns(waiters.counting(timers), n)
                for k in TIGHT:
                    tight[k, w].append(best[k] / n[k] * 1e9)
                    wakes[k, w].append(waiters.during[k] / (TURNS * n[k]))
                for k, make in PACED.items():
                    paced[k, w].append(paced_row(
                        time_paced(make(rec), args.paced_writes)))
            with CondWaiters(w) as waiters:
                paced[NOTIFY, w].append(paced_row(time_paced(
                    one_notify(waiters.cond), args.paced_writes)))
        timer.append(paced_row(time_paced(lambda: None, args.paced_writes)))
        log(f"# write round {rnd + 1}/{args.repeats}: "
            f"{time.perf_counter() - t0:.1f} s")
    out["write"] = {
        "kinds": list(TIGHT), "waiters": list(WAITERS),
        "paced_pause_s": PACED_PAUSE, "paced_writes": args.paced_writes,
        "tight": [{"kind": k, "waiters": w, **summary(tight[k, w]),
                   "wakes_per_write": statistics.median(wakes[k, w])}
                  for w in WAITERS for k in TIGHT],
        "paced": [{"kind": k, "waiters": w, **paced_cell(paced[k, w])}
                  for w in WAITERS for k in (*PACED, NOTIFY)]
        + [{"kind": TIMER, "waiters": 0, **paced_cell(timer)}]}
    if args.baseline:
        out["write"]["baseline"] = compare_builds(args, log)


def paced_row(lat):
    lat = sorted(lat)
    return {"p50_ns": percentile(lat, 0.5), "p90_ns": percentile(lat, 0.9),
            "p99_ns": percentile(lat, 0.99)}


def paced_cell(rows):
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]} | {
        "rounds": rows}


def write_child(call_seconds):
    """--write-child: ns per tight write of each kind, no waiter, in the
    build BUILD_ENV names; one JSON line on stdout."""
    _, timers = tight_timers()
    ns = ns_per_op(timers, call_seconds, 1)
    print(json.dumps({"file": seqlock_py.__file__,
                      "ns": {k: v[0] for k, v in ns.items()}}))
    return 0


def run_child(build, call_seconds, pad):
    env = dict(os.environ, **{BUILD_ENV: build, PAD_ENV: "x" * pad})
    proc = subprocess.run(
        [sys.executable, "-P", os.path.abspath(__file__), "--write-child",
         "--call-seconds", str(call_seconds)],
        env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"write child for {build} failed:\n{proc.stderr}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    where = os.path.realpath(got["file"])
    if not where.startswith(os.path.realpath(build) + os.sep):
        raise RuntimeError(f"the child for {build} imported {where}")
    return got["ns"]


def compare_builds(args, log):
    """This build against args.baseline: tight no-waiter writes, one fresh
    subprocess per build and round, alternating; ratios per round.

    A process's memory layout alone moves a tight loop's time by several
    per cent (one build, imported from two folders whose names differ in
    length, differed by 4-6 % here): the stack's alignment follows the
    environment's size, the heap's the strings loaded.  So both builds are
    copied to folders of one name length (<tmp>/new, <tmp>/old), and each
    round pads both children's environment by the same random number of
    bytes: a pair shares one layout, and the median spans many."""
    new = os.path.dirname(os.path.dirname(os.path.abspath(
        seqlock_py.__file__)))
    builds = {"new": new, "old": os.path.abspath(args.baseline)}
    ns = {side: {k: [] for k in TIGHT} for side in builds}
    pads = [random.randrange(4096) for _ in range(args.baseline_rounds)]
    with tempfile.TemporaryDirectory(prefix="bench_wait-") as tmp:
        for side, build in builds.items():
            shutil.copytree(os.path.join(build, "seqlock_py"),
                            os.path.join(tmp, side, "seqlock_py"),
                            ignore=shutil.ignore_patterns("__pycache__"))
        for rnd, pad in enumerate(pads):
            for side in builds:
                got = run_child(os.path.join(tmp, side), args.call_seconds,
                                pad)
                for k, v in got.items():
                    ns[side][k].append(v)
            log(f"# baseline round {rnd + 1}/{args.baseline_rounds}: "
                + ", ".join(f"{k}: {ns['new'][k][-1] / ns['old'][k][-1]:.3f}"
                            for k in TIGHT))
    return {"new_build": new, "old_build": builds["old"],
            "old_label": args.baseline_label, "rounds": args.baseline_rounds,
            "order": "new, old alternating, a fresh subprocess each",
            "env_pads": pads,
            "new_ns": {k: summary(v) for k, v in ns["new"].items()},
            "old_ns": {k: summary(v) for k, v in ns["old"].items()},
            "ratio": {k: summary([a / b for a, b in zip(ns["new"][k],
                                                        ns["old"][k])])
                      for k in TIGHT}}


# ---- report, tables ------------------------------------------------------

def _us(v):
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def latency_table(out):
    cells = {(c["placement"], c["contender"], c["waiter"]): c
             for c in out["latency"]}
    rows = []
    for name in CONTENDERS:
        for place in PLACES:
            vals = []
            for placement in ("thread", "process"):
                c = cells.get((placement, name, place))
                if c is None:
                    vals.append("")
                    continue
                text = " / ".join(_us(c[k]) for k in ("p50_us", "p99_us",
                                                       "max_us"))
                flags = [f"{c[k]} {k}" for k in ("late", "skipped",
                                                 "timeouts") if c[k]]
                vals.append(text + (f" ({', '.join(flags)})" if flags
                                    else ""))
            waiter = "main thread" if place == "main" else "other thread"
            rows.append(f"| {name} | {waiter} | " + " | ".join(vals) + " |")
    samples = min(c["samples"] for c in out["latency"])
    return "\n".join(
        [f"**{interpreter_label(out['interpreter'])}**: wake-up latency in "
         "µs from the writer's commit to the waiter's return, p50 / p99 / "
         f"max (medians of {out['repeats']} rounds of {out['writes']} "
         "writes, one every 5-10 ms):\n",
         "| waiter | runs in | writer thread | writer process (shm) |",
         "| --- | --- | ---: | ---: |", *rows,
         f"\nAt least {samples} samples per row; the Condition is "
         "threading.Condition for a writer thread, multiprocessing.Condition "
         "for a writer process.  'late': samples over "
         f"{LATE_NS / 1e6:g} ms; 'skipped': more than one write ended "
         "between two looks.\n"])


def idle_table(outs):
    outs = [o for o in outs if "idle" in o]
    if not outs:
        return ""
    idle = outs[0]["idle"]
    head = "".join(f" {interpreter_label(o['interpreter'])}: CPU ms "
                   "(thread / process) | wake-ups/s | process switches/s |"
                   for o in outs)
    lines = [f"Idle waiter, nothing written for T = {idle['seconds']:g} s "
             f"(medians of {idle['repeats']} rounds; wake-ups: the waiting "
             "thread's voluntary context switches; process switches: every "
             "thread's, voluntary and involuntary):\n",
             "| waiter | runs in |" + head,
             "| --- | --- |" + " ---: | ---: | ---: |" * len(outs)]
    for c0 in idle["cells"]:
        row = f"| `{c0['contender']}` | {c0['waiter']} |"
        for o in outs:
            c = next(c for c in o["idle"]["cells"]
                     if (c["contender"], c["waiter"]) == (c0["contender"],
                                                          c0["waiter"]))
            w = c["wakeups_per_s"]
            row += (f" {c['thread_cpu_s'] * 1e3:.2f} / "
                    f"{c['process_cpu_s'] * 1e3:.2f} |"
                    f" {'?' if w is None else f'{w:.1f}'} |"
                    f" {c['process_switches_per_s']:.1f} |")
        lines.append(row)
    lines.append("\nThe process columns are the whole process's over T "
                 "(for `wait_async`, the watcher thread that does the wait is "
                 "counted there, not in the loop's thread; 'settled' starts "
                 "counting once the watcher is asleep); for the waiter in "
                 "another process, figures are that process's.")
    return "\n".join(lines) + "\n"


def write_table(outs):
    outs = [o for o in outs if "write" in o]
    if not outs:
        return ""
    kinds = outs[0]["write"]["kinds"]
    labels = [interpreter_label(o["interpreter"]) for o in outs]
    lines = ["Write cost, ns per write.  Tight: a loop of writes (best of "
             f"{TURNS} turns per round, median of rounds; waiters wake for "
             "a fraction of them: wakes per write in brackets).  Paced: one "
             f"write every {outs[0]['write']['paced_pause_s'] * 1e3:g} ms, "
             "each timed alone, p50 / p99 (every write wakes the waiters):\n",
             "| write | waiters | " + " | ".join(
                 f"{lab}: tight | paced" for lab in labels) + " |",
             "| --- | ---: |" + " ---: | ---: |" * len(outs)]
    for k in kinds:
        for w in outs[0]["write"]["waiters"]:
            row = f"| `{k}` | {w} |"
            for o in outs:
                t = next(e for e in o["write"]["tight"]
                         if (e["kind"], e["waiters"]) == (k, w))
                p = next(e for e in o["write"]["paced"]
                         if (e["kind"], e["waiters"]) == (k, w))
                row += (f" {t['median']:.0f}"
                        + (f" ({t['wakes_per_write']:.2g})" if w else "")
                        + f" | {p['p50_ns']:.0f} / {p['p99_ns']:.0f} |")
            lines.append(row)
    for k, ws in ((NOTIFY, outs[0]["write"]["waiters"]), (TIMER, [0])):
        for w in ws:
            row = f"| {k} (reference) | {w} |"
            for o in outs:
                p = next(e for e in o["write"]["paced"]
                         if (e["kind"], e["waiters"]) == (k, w))
                row += f" | {p['p50_ns']:.0f} / {p['p99_ns']:.0f} |"
            lines.append(row)
    base = [o for o in outs if "baseline" in o["write"]]
    if base:
        b0 = base[0]["write"]["baseline"]
        lines += ["", "No waiter, this build against "
                  f"{b0['old_label'] or 'the baseline build'} (tight writes, "
                  "a fresh subprocess per build and round, alternating; "
                  "ratio new/old per round, median):\n",
                  "| write | " + " | ".join(
                      f"{interpreter_label(o['interpreter'])}: new ns | "
                      "old ns | new/old (min-max)" for o in base) + " |",
                  "| --- |" + " ---: | ---: | ---: |" * len(base)]
        for k in kinds:
            row = f"| `{k}` |"
            for o in base:
                b = o["write"]["baseline"]
                r = b["ratio"][k]
                row += (f" {b['new_ns'][k]['median']:.1f} |"
                        f" {b['old_ns'][k]['median']:.1f} |"
                        f" {r['median']:.3f} ({r['min']:.3f}-{r['max']:.3f})"
                        f", {b['rounds']} rounds |")
            lines.append(row)
    return "\n".join(lines) + "\n"


def tables(outs):
    parts = [latency_table(o) for o in outs if "latency" in o]
    parts += [idle_table(outs), many_table(outs), write_table(outs),
              measured_on(outs)
              + "; load after: " + ", ".join(f"{o['load_after']:.2f}"
                                            for o in outs) + "."]
    return "\n".join(p for p in parts if p)


def report(out, log=print):
    log(report_head("bench_wait", out, f"--writes {out['writes']} "
                    f"--repeats {out['repeats']}"))
    log(tables([out]))


PARTS = {"latency": bench_latency, "idle": bench_idle, "many": bench_many,
         "write": bench_write}


RESULT = "wait-"  # benchmarks/results/wait-<tag>.json


def main(argv=None):
    parser = BenchParser(__doc__, RESULT)
    parser.add_setting("--writes", full=200, quick=10, type=int,
                       help="writes per latency case and round")
    parser.add_repeats(help="rounds of latency and write, medians reported")
    parser.add_setting("--idle-seconds", full=2.0, quick=0.2,
                       help="T, an idle wait")
    parser.add_setting("--idle-repeats", full=3, quick=1, type=int,
                       help="rounds of idle")
    parser.add_setting("--many-waiters", full=2000, quick=50, type=int,
                       help="N, concurrent wait_async of many")
    parser.add_setting("--many-repeats", full=5, quick=1, type=int,
                       help="rounds of many")
    parser.add_parts(PARTS)
    parser.add_argument("--baseline", metavar="DIR",
                        help="a directory holding another build of "
                             "seqlock_py: compare no-waiter writes with it")
    parser.add_argument("--baseline-label", default="",
                        help="what the baseline is (e.g. its commit)")
    parser.add_setting("--baseline-rounds", full=15, quick=2, type=int,
                       help="rounds of the comparison")
    parser.add_setting("--call-seconds", full=0.05, quick=0.01,
                       help=argparse.SUPPRESS)
    parser.add_argument("--write-child", action="store_true",
                        help=argparse.SUPPRESS)
    parser.add_label()
    parser.add_argument("--table", nargs="+", metavar="JSON",
                        help="do not measure: print the tables from these "
                             "results")
    args = parser.parse_args(argv)
    if args.table:
        print(tables(load_results(args.table)))
        return 0
    if args.write_child:
        return write_child(args.call_seconds)
    args.paced_writes = 20 if args.quick else 200
    if (args.writes < 1 or args.repeats < 1 or args.idle_seconds <= 0
            or args.idle_repeats < 1 or args.baseline_rounds < 1
            or args.many_waiters < 1 or args.many_repeats < 1
            or set(args.parts) - set(PARTS)):
        parser.error("--writes, --repeats, --idle-repeats, --many-waiters, "
                     "--many-repeats and "
                     "--baseline-rounds at least 1, --idle-seconds positive, "
                     "--parts from " + ",".join(PARTS))
    if args.baseline and not os.path.isdir(
            os.path.join(args.baseline, "seqlock_py")):
        parser.error(f"--baseline {args.baseline}: no seqlock_py there")

    out = result_head({"label": args.label, "writes": args.writes,
                       "repeats": args.repeats, "writer_pause_s": list(PAUSE),
                       "poll_s": POLL}, loadavgs=True)
    return run_parts(args, out, PARTS, report, RESULT)


if __name__ == "__main__":
    sys.exit(main())
