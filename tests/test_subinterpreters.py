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
