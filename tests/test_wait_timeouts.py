"""Every wait keeps its timeout, also on the path that repairs a dead-looking
section (issue 17, defect 6).

A live writer process holds a write section open; a co-tenant then sets the
lock's `abandoned` word, so the section looks like one nobody can finish,
but its lock cannot be taken: the writer is alive and holds its beacon.  A
waiter in another process must still return by its deadline: wait(seq,
0.2) False within 0.2 s (+1 s of slack), wait(seq, 0) at once, and the
asyncio forms without blocking the event loop, so asyncio's own timeouts
fire.  Each waiter runs in a fresh interpreter with a deadline, so a hang
fails its test.  Each docstring ends with what today's main did.
"""
from __future__ import annotations

import pytest

from process_helpers import PythonProcess, assert_clean_exit, run_python
from record_helpers import map_shared_memory, peek, poke, shared_memory_block
from seqlock_py import SeqRecord

#: A waiter still running after this long hangs (and fails its test).
HANG = 8.0

FIELDS = dict(x="q")

# argv: the SharedMemory name.  Opens a write section, prints "holding" and
# keeps it open until told (a line on stdin).
HOLD_A_SECTION = r'''
import sys
from record_helpers import open_shared_record

rec = open_shared_record(sys.argv[1], x="q")
with rec.write() as w:
    w.x = 2
    print("holding", flush=True)
    sys.stdin.readline()
print("released", flush=True)
'''

# argv: the SharedMemory name, the wait to make and its time limit.  Prints
# "ok <result> <seconds>" if the wait gave the expected answer in time.
WAITER = r'''
import asyncio, sys, time
from record_helpers import open_shared_record

name, which, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
rec = open_shared_record(name, x="q")
seq, values = rec.read_versioned()  # the state before the open section
assert values == (1,), values


async def wait_for():
    try:
        await asyncio.wait_for(rec.wait_async(seq), 0.2)
    except TimeoutError:
        return "TimeoutError"
    return "no timeout"


async def with_timeout():
    try:
        async with asyncio.timeout(0.2):
            await rec.wait_async(seq)
    except TimeoutError:
        return "TimeoutError"
    return "no timeout"


started = time.monotonic()
if which == "wait(seq, 0.2)":
    result, expected = rec.wait(seq, 0.2), False
elif which == "wait(seq, 0)":
    result, expected = rec.wait(seq, 0), False
elif which == "wait_async(seq, timeout=0.2)":
    result, expected = asyncio.run(rec.wait_async(seq, timeout=0.2)), False
elif which == "asyncio.wait_for(wait_async(seq), 0.2)":
    result, expected = asyncio.run(wait_for()), "TimeoutError"
elif which == "asyncio.timeout(0.2)":
    result, expected = asyncio.run(with_timeout()), "TimeoutError"
else:
    raise SystemExit(f"unknown wait {which}")
took = time.monotonic() - started
assert result == expected, f"{which} gave {result!r}, not {expected!r}"
assert took <= limit, f"{which} returned after {took:.2f} s (limit {limit} s)"
print("ok", result, f"{took:.3f}", flush=True)
'''


@pytest.fixture
def dead_looking_section():
    """A shared record (x=1) whose write section a live process holds
    open (x=2 inside), marked abandoned by a co-tenant; yields its name."""
    size = SeqRecord.buffer_size(**FIELDS)
    shm = shared_memory_block(size)
    mem = map_shared_memory(shm.name)
    try:
        SeqRecord.create(mem, **FIELDS).update(x=1)
        with PythonProcess(HOLD_A_SECTION, shm.name) as holder:
            holder.expect("holding")
            assert peek(mem, "sequence") % 2 == 1
            poke(mem, "abandoned", 1)
            yield shm.name
            poke(mem, "abandoned", 0)
            holder.tell("release")
    finally:
        shm.unlink()


WAITS = {
    # which wait: its time limit (timeout + 1 s of slack; "at once": 0.5 s)
    "wait(seq, 0.2)": 1.2,
    "wait(seq, 0)": 0.5,
    "wait_async(seq, timeout=0.2)": 1.2,
    "asyncio.wait_for(wait_async(seq), 0.2)": 1.2,
    "asyncio.timeout(0.2)": 1.2,
}


@pytest.mark.parametrize("which", list(WAITS))
def test_a_wait_keeps_its_timeout_when_a_live_writers_section_looks_abandoned(dead_looking_section, which):
    """A live process holds a write section; the `abandoned` word says
    nobody can finish it.  A waiter in another process returns by its
    deadline: wait(seq, 0.2) and wait_async(seq, timeout=0.2) give False
    within 1.2 s, wait(seq, 0) False within 0.5 s, and
    asyncio.wait_for(..., 0.2) and asyncio.timeout(0.2) around
    wait_async(seq) raise TimeoutError within 1.2 s.  main: every one
    hangs (killed at the deadline): wait_for_change() answers EOWNERDEAD
    with lock_excl(), which has no timeout and no cancel, and keeps
    trying a lock its live holder never gives up; wait_async's first
    wait(seq, 0) runs on the event loop, so asyncio's timeouts never
    fire either."""
    name = dead_looking_section
    assert_clean_exit(
        run_python(WAITER, name, which, WAITS[which], timeout=HANG),
        f"{which} on a live section marked abandoned",
    )
