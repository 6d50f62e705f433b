"""wait_async() and changes_async() in an isolated subinterpreter (issue 17,
defect 9).

The extension declares per-interpreter GIL support, and an isolated
subinterpreter (its own GIL, no daemon threads) is where such a module
runs.  A wait_async() that has to wait, and changes_async() after its first
item, must work there as in the main interpreter.  Each scenario runs in a
subinterpreter of a fresh process, with a deadline.
"""
from __future__ import annotations

import sys

import pytest

from process_helpers import assert_clean_exit, run_python

try:
    import _interpreters  # noqa: F401  (3.13+)
except ImportError:
    _interpreters = None

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 13) or _interpreters is None,
    reason="needs 3.13+'s _interpreters and its 'isolated' config (own GIL, "
    "threads but no daemon threads); 3.11's isolated subinterpreters allow "
    "no threads at all, so no wait can sleep in one",
)

# argv: the code to run in a new isolated subinterpreter.  Exits 1 with the
# subinterpreter's traceback if the code raised there.
IN_AN_ISOLATED_SUBINTERPRETER = r'''
import sys
import _interpreters

config = _interpreters.new_config("isolated")
assert not config.allow_daemon_threads and config.gil == "own", config
interp = _interpreters.create(config)
try:
    failure = _interpreters.exec(interp, sys.argv[1])
finally:
    _interpreters.destroy(interp)
if failure is not None:
    print("the subinterpreter raised:", getattr(failure, "formatted", failure), flush=True)
    print(getattr(failure, "errdisplay", ""), flush=True)
    sys.exit(1)
'''

SCENARIOS = {
    # a wait that has to wait, and times out
    "wait_async-times-out": r'''
import asyncio, time
from seqlock_py import SeqRecord

rec = SeqRecord(x="d")
seq, _ = rec.read_versioned()
started = time.monotonic()
changed = asyncio.run(rec.wait_async(seq, timeout=0.2))
took = time.monotonic() - started
assert changed is False, changed
assert 0.15 <= took <= 1.2, f"returned after {took:.2f} s"
print("ok wait_async(seq, timeout=0.2) -> False in", round(took, 3), "s", flush=True)
''',
    # a wait that has to wait, and a write ends it
    "wait_async-sees-a-write": r'''
import asyncio
from seqlock_py import SeqRecord

rec = SeqRecord(x="d")


async def main():
    seq, _ = rec.read_versioned()
    asyncio.get_running_loop().call_later(0.1, lambda: rec.update(x=1.0))
    return await rec.wait_async(seq, timeout=5)


assert asyncio.run(main()) is True
assert rec.read() == (1.0,)
print("ok wait_async(seq, timeout=5) -> True after a write", flush=True)
''',
    # the same through a SeqLock
    "seqlock-wait_async-sees-a-write": r'''
import asyncio
from seqlock_py import SeqLock

lock = SeqLock()


def write():
    with lock:
        pass


async def main():
    seq = lock.read_begin()
    asyncio.get_running_loop().call_later(0.1, write)
    return await lock.wait_async(seq, timeout=5)


assert asyncio.run(main()) is True
print("ok SeqLock.wait_async -> True after a write", flush=True)
''',
    # changes_async past its first item
    "changes_async-second-item": r'''
import asyncio
from seqlock_py import SeqRecord

rec = SeqRecord(x="d")


async def main():
    seen = []
    loop = asyncio.get_running_loop()
    changes = rec.changes_async(timeout=5)
    async for seq, values in changes:
        seen.append(values)
        if len(seen) == 1:
            loop.call_later(0.1, lambda: rec.update(x=1.0))
        else:
            break
    await changes.aclose()
    return seen


assert asyncio.run(main()) == [(0.0,), (1.0,)]
print("ok changes_async gave the first snapshot and the write", flush=True)
''',
    # a ring's reader: wait_async on the ring's watcher, then poll (issue 20)
    "ring-wait_async-sees-an-append": r'''
import asyncio
from seqlock_py import SeqRing

ring = SeqRing(8, x="d")
reader = ring.reader()


async def main():
    asyncio.get_running_loop().call_later(0.1, lambda: ring.append(x=1.0))
    return await reader.wait_async(timeout=5)


assert asyncio.run(main()) is True
assert reader.poll() == [(0, (1.0,))]
ring.close()
print("ok RingReader.wait_async -> True after an append", flush=True)
''',
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_async_waits_work_in_an_isolated_subinterpreter(scenario):
    """In an isolated subinterpreter (own GIL, no daemon threads):
    wait_async(seq, timeout=0.2) that has to wait returns False at its
    timeout; wait_async (SeqRecord's and SeqLock's) returns True after a
    write; changes_async gives the current snapshot, then the write's; a
    ring reader's wait_async returns True after an append (issue 20).
    main (3.13t): each raises RuntimeError "daemon threads are disabled in
    this (sub)interpreter" (wait_async sleeps in a daemon thread)."""
    assert_clean_exit(
        run_python(IN_AN_ISOLATED_SUBINTERPRETER, SCENARIOS[scenario], timeout=20),
        f"{scenario} in an isolated subinterpreter",
    )


# Reads in the main interpreter and in an isolated subinterpreter, on one
# OS thread in turn: each thread state keeps its own spare snapshots
# (snapshot.h), so none crosses to the other interpreter's allocator, and
# the subinterpreter's go with it.
READS_HERE_AND_THERE = r'''
import sys
import _interpreters
from seqlock_py import SeqRecord

READS = """
from seqlock_py import SeqRecord
rec = SeqRecord(x="d", y="d")
rec.update(x=1.0, y=2.0)
for _ in range(3):
    kept = [rec.read() for _ in range(10)]
    assert all(s == (1.0, 2.0) for s in kept), kept
    del kept
"""

rec = SeqRecord(x="d", y="d")
rec.update(x=3.0, y=4.0)
held = [rec.read() for _ in range(10)]
interp = _interpreters.create(_interpreters.new_config("isolated"))
try:
    for _ in range(3):
        failure = _interpreters.exec(interp, READS)
        assert failure is None, getattr(failure, "formatted", failure)
        kept = [rec.read() for _ in range(10)]
        assert all(s == (3.0, 4.0) for s in kept + held), kept
        del kept
finally:
    _interpreters.destroy(interp)
del held
assert [rec.read() for _ in range(10)] == [(3.0, 4.0)] * 10
print("ok reads here and there", flush=True)
'''


def test_reads_in_the_main_interpreter_and_a_subinterpreter_on_one_thread():
    assert_clean_exit(
        run_python(READS_HERE_AND_THERE, timeout=20),
        "reads in the main interpreter and an isolated subinterpreter",
    )
