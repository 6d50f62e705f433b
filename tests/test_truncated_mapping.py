"""A reader of a record whose file is truncated gets an error, not SIGBUS
(issue 17, defect 11).

A record in a file-backed shared mapping (a file in a temporary directory,
or a SharedMemory block, which is a file in /dev/shm) is only as big as
its file: a process that truncates the file makes every access past the
new end a bus error.  A reader must get an OSError that says so and keep
its process alive.  The reader runs in a fresh interpreter; the test
truncates the file under it.
"""
from __future__ import annotations

import mmap
import os
import sys

import pytest

from process_helpers import PythonProcess, describe_exit
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

