"""SeqRecord.create_shared() and SeqRecord.attach_shared() (and SeqRing's,
the same with a capacity): a record or a ring in a named shared memory
block that it owns.

The creator's record (or ring) closes the block and unlinks its name at close();
an opener's only closes its mapping.  An opener never registers the block
with the standard library's resource tracker, which would otherwise
unlink it at the opener's exit, under every other process using it
(CPython gh-82300): on 3.13+ ``SharedMemory(name, track=False)``; before,
the block is opened and mapped the way ``SharedMemory`` does it, minus
the registration (unregistering after ``SharedMemory()`` would also
remove a registration of the creator's when both share one tracker, as
a ``multiprocessing`` child does with its parent).  The creator stays
registered: if it exits without close(), its tracker unlinks the name at
its exit, as close() would have (processes that map the block keep it;
the name is gone for new ones) rather than leaving the block in
/dev/shm for good.  Records still open when the interpreter exits are
closed by an atexit handler first (so no "Exception ignored in
SharedMemory.__del__: BufferError" at exit); only the creating process
ever unlinks (not a child that fork() copied the record into).
"""

from __future__ import annotations

import atexit
import mmap
import os
import sys
import threading
import weakref
from multiprocessing import shared_memory
from typing import Any, Callable

_TRACK_FALSE = sys.version_info >= (3, 13)

# The records create_shared() and attach_shared() made that may be open.
_open_records: weakref.WeakSet[Any] = weakref.WeakSet()
_open_records_lock = threading.Lock()


@atexit.register
def _close_open_records() -> None:
    with _open_records_lock:
        records = list(_open_records)
    for rec in records:
        try:
            rec.close()
        except Exception:  # a section still open: leave it to the OS
            pass


def _owned(rec: Any, closer: Callable[[], None]) -> Any:
    rec._close_with(closer)
    with _open_records_lock:
        _open_records.add(rec)
    return rec


def create_shared(cls: Any, name: str, /, *args: Any, **fields: Any) -> Any:
    """cls.create(buf, *args, **fields) in a new shared memory block named
    name, as large as cls.buffer_size(*args, **fields)."""
    _check_name("create_shared", name)
    if not name.isascii():
        # The resource tracker takes ASCII only: SharedMemory() would make
        # the block, fail to register it and leave it for good.
        raise ValueError(f"create_shared() needs an ASCII name, not {name!r}")
    size = cls.buffer_size(*args, **fields)
    shm = shared_memory.SharedMemory(name=name, create=True, size=size)
    try:
        rec = cls.create(shm.buf, *args, **fields)
    except BaseException:
        shm.close()
        shm.unlink()
        raise
    return _owned(rec, _closer(shm, unlink=True))


def attach_shared(cls: Any, name: str, /, *args: Any, **fields: Any) -> Any:
    """cls.attach(buf, *args, **fields) to the shared memory block named
    name, untracked."""
    _check_name("attach_shared", name)
    segment = _open_untracked(name)
    try:
        rec = cls.attach(segment.buf if _TRACK_FALSE else segment, *args, **fields)
    except BaseException:
        segment.close()
        raise
    return _owned(rec, _closer(segment, unlink=False))


def _check_name(method: str, name: Any) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{method}() needs the block's name as a str, not {type(name).__name__}")
    if "\0" in name:  # 3.11's shm_open() cut the name there: another block
        raise ValueError(f"{method}(): embedded null character in the name {name!r}")


def _closer(segment: Any, *, unlink: bool) -> Callable[[], None]:
    creator = os.getpid()

    def close() -> None:
        segment.close()
        if unlink and os.getpid() == creator:
            segment.unlink()

    return close


def _open_untracked(name: str) -> Any:
    """The block name, mapped read-write, not registered with the
    resource tracker: a SharedMemory (3.13+) or an mmap."""
    if _TRACK_FALSE:
        return shared_memory.SharedMemory(name=name, track=False)  # type: ignore[call-arg,unused-ignore]
    import _posixshmem  # type: ignore[import-not-found,unused-ignore]  # what SharedMemory uses

    path = name if name.startswith("/") else "/" + name
    fd = _posixshmem.shm_open(path, os.O_RDWR, mode=0o600)
    try:
        size = os.fstat(fd).st_size
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
