"""RingReader.wait_async(): the reader's wait, awaited.

Every append moves the ring's lock count by 2, so a reader's awaited wait
is a wait for news on the ring (seqlock_py._news): one watcher thread per
ring sleeps on the count's futex for all of the process's awaited waits
on it, whatever their readers and event loops, and answers them after
each append.  The count is read before the reader looks for an entry, so
an append that ends after the look moves it and answers the wait.

Each wait for news lasts at most about _NAP seconds before the reader
looks again: a writer that died after publishing its entry but before
closing its section moved the head without moving the count.  The
watcher answers such a wait False after a whole nap of its own with no
news (no timer of the event loop's per wait: it cost about a tenth of a
wake-up); a wait registered during a nap is answered at the end of the
next, so a reader looks again within two naps.  At interpreter
shutdown the watcher answers False, and so does the reader's wait, as a
record's does (looking again would raise RuntimeError).
"""

from __future__ import annotations

import time
from typing import Any

from . import _news

_NAP = 1.0


async def wait_async(reader: Any, timeout: float | None) -> bool:
    """reader.wait(timeout), awaited.  timeout is None or seconds as a
    float, converted by the C layer with wait()'s converter: -1 and a
    Decimal mean here what they mean to wait()."""
    ring = reader.ring
    deadline = None if not timeout else time.monotonic() + timeout
    while True:
        # The count first: an append that ends after the look moves it.
        count = ring._news_sequence
        if reader.wait(0):
            return True
        if deadline is None:
            if timeout == 0:
                return False
            left = None
        else:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
        if not await _news.wait_async(ring, count, left, _NAP) and _news._stopping:
            return False  # the interpreter shuts down: as a record's wait
