"""SeqRecord.create_shared() and SeqRecord.attach_shared() (and SeqRing's,
the same with a capacity): a record or a ring in a named shared memory
block that it owns.

A block is laid out before it has its name: create_shared() makes it
under a staging name of its own, sized, with the record (or ring) laid
out, then links it to the name asked for (a hard link in /dev/shm, which
fails with FileExistsError rather than replace a block there) and
unlinks the staging name.  So an opener finds no block
(FileNotFoundError) or a whole one, never one still empty or zero; a
block that holds no record is some other program's, and attach_shared()
says so.  (Where shared memory names are no files in /dev/shm, not
Linux, the block is made under its name as SharedMemory makes it, and an
opener may see it before it is laid out.)  A size beyond what /dev/shm
has free is refused before any block is made: the layout writes every
byte, and a tmpfs filling up is RAM the machine runs out of.

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
import errno
import mmap
import os
import sys
import threading
import uuid
import weakref
from multiprocessing import resource_tracker, shared_memory
from typing import Any, Callable

import _posixshmem  # type: ignore[import-not-found,unused-ignore]  # what SharedMemory uses

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
    name, as large as cls.buffer_size(*args, **fields), which appears
    under its name only once laid out."""
    _check_name("create_shared", name)
    if not name.isascii():
        # The resource tracker takes ASCII only: SharedMemory() would make
        # the block, fail to register it and leave it for good.
        raise ValueError(f"create_shared() needs an ASCII name, not {name!r}")
    base = name.lstrip("/")
    if base in ("", ".", "..") or "/" in base:
        # What shm_open() refuses; here also what keeps os.link() in
        # _SHM_DIR.
        raise ValueError("create_shared() needs a name of one path component "
                         f"(no '/' after a leading one, not '.' or '..'), not {name!r}")
    if "overwrite" in fields:
        raise TypeError(
            "create_shared() takes no overwrite=: it always makes a new block "
            "(FileExistsError if the name is taken); to replace a stale one, "
            "unlink it (multiprocessing.shared_memory.SharedMemory(name).unlink()) "
            "and call create_shared() again")
    size = cls.buffer_size(*args, **fields)
    _check_room(cls, size)
    shm = shared_memory.SharedMemory(name=_staging_name(), create=True, size=size)
    final = os.path.join(_SHM_DIR, base)
    staged = os.path.join(_SHM_DIR, shm.name.lstrip("/"))
    linking = _is_file_of(staged, shm)
    if not linking:
        # Shared memory names are no files in _SHM_DIR here (not Linux):
        # the block is made under its name, seen before it is laid out.
        shm.close()
        shm.unlink()
        shm = shared_memory.SharedMemory(name=name, create=True, size=size)
    try:
        rec = cls.create(shm.buf, *args, **fields)
    except BaseException:
        shm.close()
        shm.unlink()
        raise
    if linking:
        try:
            _publish(staged, final, name)
        except BaseException:
            rec.close()
            shm.close()
            shm.unlink()
            raise
        shm.unlink()  # the staging name (and its registration)
    return _owned(rec, _closer(shm, unlink=name))


def attach_shared(cls: Any, name: str, /, *args: Any, **fields: Any) -> Any:
    """cls.attach(buf, *args, **fields) to the shared memory block named
    name, untracked."""
    _check_name("attach_shared", name)
    segment = _open_untracked(name, cls.__name__)
    try:
        rec = cls.attach(segment.buf if _TRACK_FALSE else segment, *args, **fields)
    except BaseException:
        segment.close()
        raise
    return _owned(rec, _closer(segment, unlink=None))


# Where Linux's shm_open() keeps its names (glibc's, musl's): each block
# is a file of this tmpfs.
_SHM_DIR = "/dev/shm"


def _staging_name() -> str:
    """A name no other create_shared() uses: this process's, random."""
    return f"seqlock_py_new_{os.getpid()}_{uuid.uuid4().hex[:16]}"


def _is_file_of(path: str, shm: Any) -> bool:
    """Whether path is the file of the block shm (it is where shm_open()
    names are files of _SHM_DIR)."""
    fd = getattr(shm, "_fd", -1)
    try:
        return fd >= 0 and os.path.samestat(os.stat(path), os.fstat(fd))
    except OSError:
        return False


def _publish(staged: str, final: str, name: str) -> None:
    """Give the laid-out block at staged its name: a hard link, which
    never replaces a file there (FileExistsError), so an opener finds no
    block or a whole one.  Registered with the resource tracker under its
    name at once, as SharedMemory(create=True) registers its blocks (a
    kill between the link and the registration leaves the block)."""
    try:
        os.link(staged, final)
    except FileExistsError:
        raise FileExistsError(
            errno.EEXIST,
            "create_shared(): a shared memory block of that name exists "
            "(attach_shared() opens it; a stale one can be unlinked with "
            "multiprocessing.shared_memory.SharedMemory(name).unlink())",
            name) from None
    try:
        resource_tracker.register(_shm_name(name), "shared_memory")
    except BaseException:
        os.unlink(final)
        raise


def _check_room(cls: Any, size: int) -> None:
    """MemoryError, before any block is made, if size bytes are more than
    _SHM_DIR has free: create() writes every byte, and a tmpfs that fills
    up under it is RAM the whole machine runs out of."""
    try:
        fs = os.statvfs(_SHM_DIR)
    except OSError:  # no such directory: the system's limits apply
        return
    if fs.f_blocks == 0:  # a tmpfs of no size limit
        return
    room = fs.f_bavail * fs.f_frsize
    if size > room:
        raise MemoryError(
            f"{cls.__name__}.create_shared() needs {size} bytes of shared memory, "
            f"more than the {room} bytes free in {_SHM_DIR}: make it smaller "
            "(or free shared memory)")


def _shm_name(name: str) -> str:
    """name as SharedMemory passes it to shm_open() and the tracker."""
    return "/" + name


def _check_name(method: str, name: Any) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{method}() needs the block's name as a str, not {type(name).__name__}")
    if "\0" in name:  # 3.11's shm_open() cut the name there: another block
        raise ValueError(f"{method}(): embedded null character in the name {name!r}")


def _closer(segment: Any, *, unlink: str | None) -> Callable[[], None]:
    """close(): the mapping, then, in the creating process only, the
    name unlink (the creator's)."""
    creator = os.getpid()

    def close() -> None:
        segment.close()
        if unlink is not None and os.getpid() == creator:
            _posixshmem.shm_unlink(_shm_name(unlink))
            resource_tracker.unregister(_shm_name(unlink), "shared_memory")

    return close


def _open_untracked(name: str, kind: str) -> Any:
    """The block name, mapped read-write, not registered with the
    resource tracker: a SharedMemory (3.13+) or an mmap.  ValueError for
    an empty block (mmap's "cannot mmap an empty file")."""
    empty = f"the shared memory block {name!r} is empty: it holds no {kind}"
    if _TRACK_FALSE:
        try:
            return shared_memory.SharedMemory(name=name, track=False)  # type: ignore[call-arg,unused-ignore]
        except ValueError:  # the one ValueError of opening: mmap's
            raise ValueError(empty) from None
    path = name if name.startswith("/") else "/" + name
    fd = _posixshmem.shm_open(path, os.O_RDWR, mode=0o600)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            raise ValueError(empty)
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
