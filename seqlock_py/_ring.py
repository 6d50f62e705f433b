"""RingReader.wait_async(): the reader's wait, awaited.

A worker thread of the event loop's default executor sleeps in
reader.wait() for slices of at most _SLICE seconds, so that cancelling
the await withdraws the wait within one slice (the thread then finishes
its slice and returns).  The wake-up itself is the futex's, as wait()'s.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

_SLICE = 0.05


async def wait_async(reader: Any, timeout: float | None) -> bool:
    """reader.wait(timeout), awaited."""
    if reader.wait(0):
        return True
    if timeout == 0:
        return False
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if deadline is None:
            piece = _SLICE
        else:
            piece = min(_SLICE, max(0.0, deadline - time.monotonic()))
        if await loop.run_in_executor(None, reader.wait, piece):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
