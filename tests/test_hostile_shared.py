"""A hostile review of issue 17's result: a co-tenant that rewrites a live
record's words, and a user who forks, signals, stops and kills its writers.

Each test names the behaviour that should hold; its docstring says what
was seen when it was written (interpreter, how often).  Tests whose
docstring starts with "Holds:" passed then and cover something no other
test did; the others fail on the branch they were written against
(main at ed372c6) and are regressions for defects (see
docs/hostile-17-report.md on branch hostile-17).

Everything that can hang has a deadline; everything that can crash runs
in a fresh interpreter.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from process_helpers import (
    CHILD_TIMEOUT,
    PythonProcess,
    describe_exit,
    run_python,
)
from record_helpers import (
    FUTEX_OWNER_DIED,
    map_shared_memory,
    peek,
    poke,
    shared_memory_block,
)
from seqlock_py import SeqRecord

LINUX = sys.platform.startswith("linux")
FIELDS = dict(a="q", b="q", total="q")  # invariant: a + b == total

pytestmark = pytest.mark.skipif(not LINUX, reason="glibc's robust mutex layout, /dev/shm")


@pytest.fixture
def shared_record():
    """A SharedMemory block holding a record of FIELDS (created here): the
    block's name, and this process's mapping of it."""
    shm = shared_memory_block(SeqRecord.buffer_size(**FIELDS))
    mem = map_shared_memory(shm.name)
    rec = SeqRecord.create(mem, **FIELDS)
    rec.update(a=1, b=2, total=3)
    del rec
    try:
        yield shm.name, mem
    finally:
        try:
            mem.close()
        except BufferError:
            pass
        shm.unlink()


# A child (argv[1]: the block): attach, print "attached", and at each line
# on stdin run one command: "hold" opens a write section half-written
# (a = 10) and prints "inside"; "finish" completes it (b, total) and
# prints "closed" or "close raised <type> <message>"; "write T" runs a
# whole write(timeout=T) section and prints "wrote <recoveries>" or
# "write raised <type> <message>".  Anything that crashes it is seen
# by its exit status.
WRITER_SCRIPT = r"""
import sys, time
from record_helpers import open_shared_record
rec = open_shared_record(sys.argv[1], a="q", b="q", total="q")
print("attached", flush=True)
section = w = None
for line in sys.stdin:
    cmd = line.split()
    if not cmd:
        continue
    if cmd[0] == "hold":
        section = rec.write()
        w = section.__enter__()
        w.a = 10
        print("inside", flush=True)
    elif cmd[0] == "finish":
        try:
            w.b = 20
            w.total = 30
            section.__exit__(None, None, None)
            print("closed", flush=True)
        except BaseException as exc:
            print("close raised", type(exc).__name__, exc, flush=True)
        section = w = None
    elif cmd[0] == "write":
        t0 = time.monotonic()
        try:
            with rec.write(timeout=float(cmd[1])) as w2:
                w2.update(a=1, b=2, total=3)
            print("wrote", rec.recoveries, round(time.monotonic() - t0, 3), flush=True)
        except BaseException as exc:
            print("write raised", type(exc).__name__, exc, round(time.monotonic() - t0, 3), flush=True)
print("ok", flush=True)
"""


# ---------------------------------------------------------------------------
# 1. One word of the lock rewritten during a live writer's section.
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("word, rewrite", [
    ("beacon_lock", lambda v: 0),
    ("beacon_lock", lambda v: v | FUTEX_OWNER_DIED),
    ("ready", lambda v: 0),
], ids=["beacon-word-zeroed", "beacon-owner-died-bit-set", "ready-zeroed"])
def test_a_live_writer_survives_one_lock_word_rewritten_during_its_section(shared_record, word, rewrite):
    """A writer holds a section; a co-tenant rewrites ONE word of the lock
    outside glibc's robust-list links (bytes 136-151, the only bytes a
    writer trusts co-writers with): the beacon's lock word (112) zeroed or
    its FUTEX_OWNER_DIED bit set, or `ready` (104) zeroed.  Should hold: no
    writer crashes ("writers are safe against accidental corruption ... a
    beacon rewritten during a section: a clear RuntimeError or
    TimeoutError, never a crash").

    Seen (main ed372c6, 3.11 and 3.13t, every run of each): a second
    writer, attached before the rewrite, takes the live section over within
    1 ms (the zeroed beacon word looks like its holder's gap, and the
    holder's owner_token/owner_pid_ns say it shares the taker's namespace;
    the OWNER_DIED bit looks like a death; `ready` 0 makes the taker
    pthread_mutex_init() the beacon under its holder) and counts a
    recovery; the live holder then dies of SIGSEGV when it closes its
    section (glibc's robust unlock dequeues the beacon through the list
    links the taker's lock and unlock left, NULL).  Readers meanwhile see
    a state no writer published (a = 1 from the taker, b, total from the
    holder)."""
    name, mem = shared_record
    with PythonProcess(WRITER_SCRIPT, name) as holder, PythonProcess(WRITER_SCRIPT, name) as taker:
        holder.expect("attached")
        taker.expect("attached")
        holder.tell("hold")
        holder.expect("inside")
        poke(mem, word, rewrite(peek(mem, word)))
        taker.tell("write 0.5")
        took = taker.expect("wr")
        holder.tell("finish")
        code, out = holder.finish()
        taker_code, taker_out = taker.finish()
    assert code == 0 and taker_code == 0, (
        f"{word} rewritten during a live section: the second writer {took!r}; "
        f"the holder {describe_exit(code)}:\n{out[-1500:]}\nthe second writer "
        f"{describe_exit(taker_code)}:\n{taker_out[-800:]}")
