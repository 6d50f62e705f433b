"""A reader of a record whose file is truncated gets an error, not SIGBUS
(issue 17, defect 11).

A record in a file-backed shared mapping (a file in a temporary directory,
or a SharedMemory block, which is a file in /dev/shm) is only as big as
its file: a process that truncates the file makes every access past the
new end a bus error.  A reader must get an OSError that says so and keep
its process alive, whatever faulthandler (or another library's SIGBUS
handler) did after the guard was installed, for every reading call; a bus
error outside any record still kills the process.  The reader runs in a
fresh interpreter; the test truncates the file under it.
"""
from __future__ import annotations

import mmap
import os
import signal
import sys

import pytest

from process_helpers import PythonProcess, describe_exit, run_plain
from record_helpers import shared_memory_block
from seqlock_py import SeqRecord

FIELDS = dict(x="d", v="1000d")

# argv: the file's path and the operation to loop on.  Prints "reading",
# then loops until an OSError (printed with "ok"), or fails after 5 s
# without one.
READ_A_FILE_THAT_GETS_TRUNCATED = r'''
import mmap, os, re, sys, time
from seqlock_py import SeqRecord

path, operation = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
mem = mmap.mmap(fd, 0)  # MAP_SHARED
os.close(fd)
rec = SeqRecord.attach(mem, x="d", v="1000d")
raw = bytearray(rec.nbytes)
seq = rec.read_versioned()[0]
assert rec.read()[0] == 1.0
print("reading", flush=True)
done = 0
deadline = time.monotonic() + 5
try:
    while time.monotonic() < deadline:
        if operation == "read":
            rec.read()
        elif operation == "read_into":
            rec.read_into(raw)
        else:
            rec.wait(seq, 0.01)
        done += 1
except OSError as exc:
    assert re.search(r"memory|truncat", str(exc), re.I), f"an unclear OSError: {exc!r}"
    print("ok OSError after", done, "calls:", exc, flush=True)
    sys.exit(0)
print(f"no error: {operation} went on for 5 s after the truncation", flush=True)
sys.exit(1)
'''


def record_file(path):
    """Lay out a record (x=1.0) in the file at path, sized for it."""
    size = SeqRecord.buffer_size(**FIELDS)
    with open(path, "r+b" if os.path.exists(path) else "w+b") as f:
        f.truncate(size)
        mem = mmap.mmap(f.fileno(), size)
    rec = SeqRecord.create(mem, **FIELDS)
    rec.update(x=1.0)
    del rec
    mem.close()  # this process never touches the memory again


@pytest.fixture(params=["tmp-file", "shared-memory"])
def backing_file(request, tmp_path):
    """The path of a file holding a record: in a temporary directory, or
    a SharedMemory block's /dev/shm file."""
    if request.param == "tmp-file":
        path = tmp_path / "record"
        record_file(path)
        yield str(path)
        return
    if not os.path.isdir("/dev/shm"):
        pytest.skip("needs /dev/shm")
    shm = shared_memory_block(SeqRecord.buffer_size(**FIELDS))
    try:
        path = os.path.join("/dev/shm", shm.name.lstrip("/"))
        record_file(path)
        yield path
    finally:
        shm.unlink()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGBUS on a truncated mapping: Linux")
@pytest.mark.parametrize("operation", ["read", "read_into", "wait"])
def test_reader_of_a_truncated_file_gets_an_oserror_not_sigbus(backing_file, operation):
    """A reader process loops on read(), read_into() or wait(seq, 0.01)
    over a record in a MAP_SHARED file mapping; the test truncates the
    file to 0 bytes.  The reader gets an OSError whose message mentions the
    memory or the truncation, and its process lives on (exits 0 after
    reporting).  main: the reader dies of SIGBUS, on both interpreters."""
    with PythonProcess(READ_A_FILE_THAT_GETS_TRUNCATED, backing_file, operation) as reader:
        reader.expect("reading")
        os.truncate(backing_file, 0)
        code, output = reader.finish(timeout=15)
    assert code == 0 and "ok OSError" in output, f"the reader: {describe_exit(code)}\n{output[-2000:]}"


# ---- the SIGBUS guard against other SIGBUS handlers --------------------------


# argv: a directory, how faulthandler is used, then the reading call.  A
# record in a file there is read once (the guard is installed), the file
# is truncated, and the call is made; prints "ok OSError" if it raised.
TRUNCATE_THEN_CALL = r'''
import asyncio, faulthandler, mmap, os, sys, threading
from seqlock_py import SeqRecord
where, handler, call = sys.argv[1], sys.argv[2], sys.argv[3]
F = dict(x="d", arr="2000d")
path = os.path.join(where, "rec")
with open(path, "wb") as f:
    f.truncate(SeqRecord.buffer_size(**F))
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 0)
rec = SeqRecord.create(m, **F)
rec.update(x=1.0)
assert rec.read()[0] == 1.0        # the first guarded call installs the guard
if handler == "enable-after":
    faulthandler.enable()
elif handler == "disable-after":
    faulthandler.disable()
os.ftruncate(fd, 0)
def in_thread(fn):
    out = []
    def run():
        try:
            out.append(fn())
        except BaseException as exc:
            out.append(exc)
    t = threading.Thread(target=run)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the thread's call still running after 20 s"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]
calls = {
    "read": rec.read,
    "read_into": lambda: rec.read_into(bytearray(rec.nbytes)),
    "repr": lambda: repr(rec),
    "sequence": lambda: rec.sequence,
    "locked": lambda: rec.locked(),
    "get": lambda: rec.get("x"),
    "changes": lambda: next(rec.changes(timeout=0.1)),
    "wait_async": lambda: asyncio.run(rec.wait_async(2, 0.2)),
    "attach": lambda: SeqRecord.attach(m, **F),
    "attach-without-fields": lambda: SeqRecord.attach(m),
    "create": lambda: SeqRecord.create(m, **F),
    "create-overwrite": lambda: SeqRecord.create(m, overwrite=True, **F),
    "wait-forever-in-a-thread": lambda: in_thread(lambda: rec.wait(2)),
    "read-in-a-thread": lambda: in_thread(rec.read),
}
try:
    calls[call]()
except OSError as exc:
    print("ok OSError", exc, flush=True)
else:
    print("no error after the truncation", flush=True)
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's robust mutex layout, /dev/shm")
@pytest.mark.parametrize("handler", ["enable-after", "disable-after"])
def test_a_truncated_file_gives_oserror_whatever_faulthandler_did_after_the_guard(tmp_path, handler):
    """The guard's SIGBUS handler is installed once, at the first guarded
    call.  Then the program calls faulthandler.enable() (any library's
    own SIGBUS handler does the same), or faulthandler.disable() after
    `python -X faulthandler` (pytest's unconfigure does it too): either
    takes the guard's handler out of the process.  Should hold: a reader of
    a truncated file gets OSError, not SIGBUS ("a truncated file gives
    readers OSError").

    Seen (main ed372c6, 3.11 and 3.13t, every run): the reader dies of
    SIGBUS (exit 135; with enable-after, faulthandler's traceback first)."""
    outcome = run_plain(TRUNCATE_THEN_CALL, tmp_path, handler, "read",
                        faulthandler=(handler == "disable-after"))
    code, out = outcome
    assert code == 0 and "ok OSError" in out, (
        f"faulthandler {handler}, then a read of the truncated file: "
        f"{describe_exit(code)}\n{out[-1500:]}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's robust mutex layout, /dev/shm")
@pytest.mark.parametrize("call", ["repr", "sequence", "locked", "get", "changes",
                                  "wait_async", "attach", "attach-without-fields",
                                  "wait-forever-in-a-thread", "read-in-a-thread",
                                  "create", "create-overwrite"])
def test_every_reading_call_of_a_truncated_file_gives_oserror(tmp_path, call):
    """Holds: after the file under a record is truncated, repr(), the
    sequence and locked() getters, get(), changes(), wait_async(),
    attach() of the same mapping (with or without fields), a wait(seq)
    with no timeout in a non-main thread, a read in a non-main thread, and
    create() over it (refused or overwriting) each raise OSError.  (create()
    died of SIGBUS before issue 19's hostile review.)"""
    code, out = run_plain(TRUNCATE_THEN_CALL, tmp_path, "none", call, faulthandler=True)
    assert code == 0 and "ok OSError" in out, f"{call}: {describe_exit(code)}\n{out[-1500:]}"


NOT_A_RECORD_SIGBUS = r'''
import mmap, os, sys, tempfile
from seqlock_py import SeqRecord
where = sys.argv[1]
F = dict(x="d")
path = os.path.join(where, "rec")
with open(path, "wb") as f:
    f.truncate(SeqRecord.buffer_size(**F))
fd = os.open(path, os.O_RDWR)
rec = SeqRecord.create(mmap.mmap(fd, 0), **F)
rec.read()                                   # the guard is installed
other = os.path.join(where, "other")
with open(other, "wb") as f:
    f.truncate(8192)
fd2 = os.open(other, os.O_RDWR)
m2 = mmap.mmap(fd2, 0)
os.ftruncate(fd2, 0)
print("touching", flush=True)
m2[100]
print("survived a SIGBUS outside any record", flush=True)
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's robust mutex layout, /dev/shm")
@pytest.mark.parametrize("faulthandler", [False, True], ids=["plain", "faulthandler"])
def test_a_sigbus_outside_any_record_still_kills_the_process(tmp_path, faulthandler):
    """Holds: with the guard installed, a bus error in another mapping
    (not a record's) kills the process with SIGBUS as before, through
    faulthandler's handler when it was enabled first (3.11, 3.13t)."""
    code, out = run_plain(NOT_A_RECORD_SIGBUS, tmp_path, faulthandler=faulthandler)
    deaths = {-signal.SIGBUS, 128 + signal.SIGBUS}
    under_asan = "asan" in os.environ.get("LD_PRELOAD", "")
    if under_asan:  # AddressSanitizer's own SIGBUS handler reports, then
        # aborts, or (behind faulthandler's) exits with its exit code, 1
        deaths |= {-signal.SIGABRT, 128 + signal.SIGABRT, 1}
    assert code in deaths and "survived" not in out, (
        f"{describe_exit(code)}\n{out[-1500:]}")
    if faulthandler and not under_asan:
        assert "Bus error" in out
