"""Hostile review of issue 19 (create(overwrite=) and attach() without
fields): the buffer's header is untrusted input, rewritten by a co-tenant
while attach() reads it; create(overwrite=True) lays a record over one that
objects of this process still use.  Each test names what it found or what
held."""
from __future__ import annotations

import mmap
import os
import random
import signal
import struct
import subprocess
import sys
import textwrap
import time
import tracemalloc

import pytest

from seqlock_py import SeqRecord

FIELDS = {"x": "d", "n": "q", "arr": "4d", "flag": "?", "u": "Q"}


@pytest.fixture
def buf():
    block = mmap.mmap(-1, 4096)
    yield block
    try:
        block.close()
    except BufferError:
        pass


def run_child(code, *args, timeout=60):
    proc = subprocess.run(
        [sys.executable, "-P", "-c", textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return proc.returncode, proc.stdout + proc.stderr


# ---- findings ----


@pytest.mark.parametrize("shifted", [False, True], ids=["garbage-at-0", "record-shifted-by-1"])
def test_attach_without_fields_of_a_misaligned_buffer_says_it_is_misaligned(buf, shifted):
    """Found: attach(view) without fields reads the header (an atomic load
    of the magic word, the version, layout_bytes) before checking that the
    buffer is 8-byte aligned: misaligned loads (undefined behaviour; UBSan's
    alignment check), and for a misaligned buffer without a magic word at
    its start the error says "holds no SeqRecord ... create() it first"
    instead of what attach(view, **fields) says ("8-byte aligned")."""
    SeqRecord.create(buf, **FIELDS)
    if shifted:
        buf[1:4000] = buf[0:3999]
    view = memoryview(buf)[1:]
    with pytest.raises(ValueError, match="aligned"):
        SeqRecord.attach(view, **FIELDS)
    with pytest.raises(ValueError, match="aligned"):
        SeqRecord.attach(view)
    view.release()


def test_attach_without_fields_of_a_slice_ending_inside_the_header_says_too_small(buf):
    """Found: a buffer that holds a record but ends inside the 192-byte
    header gets "holds no SeqRecord (no magic number: create() it first)"
    from attach() without fields (the advice issue 19 is about never
    giving for a live record), where attach(view, **fields) says "buffer
    too small"."""
    SeqRecord.create(buf, **FIELDS)
    view = memoryview(buf)[:100]
    with pytest.raises(ValueError, match="too small"):
        SeqRecord.attach(view, **FIELDS)
    with pytest.raises(ValueError, match="too small"):
        SeqRecord.attach(view)
    view.release()


OVERWRITE_INSIDE_A_WRITE_SECTION = r'''
import mmap
from seqlock_py import SeqRecord
F = {"x": "d", "n": "q"}
buf = mmap.mmap(-1, 4096)
first = SeqRecord.create(buf, **F)
try:
    with first.write() as w:
        w.x = 3.0
        second = SeqRecord.create(buf, overwrite=True, **F)
    print("exited", flush=True)
except Exception as exc:
    print("raised", type(exc).__name__, exc, flush=True)
print("alive", flush=True)
'''


def test_create_overwrite_under_a_write_section_of_this_process_does_not_crash():
    """Found: create(buf, overwrite=True) while a record object of this
    process is inside a write section on buf re-initialises the robust
    mutex that thread holds; leaving the section then unlocks it and glibc's
    robust-list bookkeeping dereferences the zeroed list pointers: SIGSEGV
    in __pthread_mutex_unlock_full (3.11, every run).  Either create()
    must refuse a record whose lock is held, or the exit must raise."""
    code, out = run_child(OVERWRITE_INSIDE_A_WRITE_SECTION)
    assert code == 0 and "alive" in out, f"exit {code}\n{out[-1500:]}"


TRUNCATE_THEN_CREATE = r'''
import mmap, os, sys
from seqlock_py import SeqRecord
where, overwrite = sys.argv[1], sys.argv[2] == "1"
F = dict(x="d")
path = os.path.join(where, "rec")
with open(path, "wb") as f:
    f.truncate(SeqRecord.buffer_size(**F))
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 0)
rec = SeqRecord.create(m, **F)
rec.read()                                  # the SIGBUS guard is installed
os.ftruncate(fd, 0)
try:
    SeqRecord.create(m, overwrite=overwrite, **F)
except OSError as exc:
    print("ok OSError", exc, flush=True)
except ValueError as exc:
    print("ValueError", exc, flush=True)
'''


@pytest.mark.parametrize("overwrite", ["0", "1"], ids=["refusal", "overwrite"])
def test_create_on_a_truncated_file_gives_oserror(tmp_path, overwrite):
    """Found: create() reads the magic word (new in issue 19) and lays the
    record out (as before) outside the SIGBUS guard: on a file truncated
    under the mapping the process dies of SIGBUS, where attach() and every
    reading call raise OSError."""
    code, out = run_child(TRUNCATE_THEN_CREATE, str(tmp_path), overwrite)
    assert code == 0 and "ok OSError" in out, f"exit {code}\n{out[-1500:]}"


# ---- what held ----


TRUNCATE_THEN_ATTACH = r'''
import mmap, os, sys
from seqlock_py import SeqRecord
where = sys.argv[1]
F = dict(x="d", arr="2000d")
path = os.path.join(where, "rec")
with open(path, "wb") as f:
    f.truncate(SeqRecord.buffer_size(**F))
fd = os.open(path, os.O_RDWR)
m = mmap.mmap(fd, 0)
SeqRecord.create(m, **F).read()
os.ftruncate(fd, 0)
try:
    SeqRecord.attach(m)
except OSError as exc:
    print("ok OSError", exc, flush=True)
'''


def test_attach_without_fields_of_a_truncated_file_gives_oserror(tmp_path):
    """Held: the header's copy runs under the SIGBUS guard."""
    code, out = run_child(TRUNCATE_THEN_ATTACH, str(tmp_path))
    assert code == 0 and "ok OSError" in out, f"exit {code}\n{out[-1500:]}"


@pytest.mark.parametrize("text", [
    b"x:d\x00", b"x\x00:d", b"x: d", b"x:+1d", b"x:0d", b"x:-1d", b"x:1 d",
    b"update:d", b":d", b"x:", b";;", b";", b":", b"x:d;;n:q", b"\xed\xa0\x80:d",
    b"\xf0\x9f:d", b"x:d ", b"x:18446744073709551617d", b"x:d;x:d", b"x:d;X:\xff",
])
def test_attach_without_fields_refuses_hostile_texts(buf, text):
    """Held: NUL bytes, surrogates, truncated UTF-8, ';;', ':' first or
    last, signs, spaces, huge counts, '0d', 'update': ValueError."""
    SeqRecord.create(buf, **FIELDS)
    struct.pack_into("<I", buf, 12, len(text))
    buf[192:192 + len(text)] = text
    with pytest.raises(ValueError):
        SeqRecord.attach(buf)


@pytest.mark.parametrize("names", [("class", "overwrite", "lambda_"), ("é", "ñ")])
def test_attach_without_fields_reads_keyword_and_unicode_names(names):
    fields = {name: "q" for name in names}
    block = mmap.mmap(-1, 4096)
    SeqRecord.create(block, **fields) if "overwrite" not in names else None
    if "overwrite" in names:  # create() keeps overwrite for itself
        text = ";".join(f"{n}:q" for n in names).encode()
        other = {"a": "q", "b": "q", "c": "q"}
        SeqRecord.create(block, **other)
        struct.pack_into("<I", block, 12, len(text))
        block[192:192 + len(text)] = text  # same length, same data bytes
        rec = SeqRecord.attach(block)
    else:
        rec = SeqRecord.attach(block)
    assert rec.fields == names


@pytest.mark.parametrize("layout_bytes", [0, 1, 4096 - 192, 4096 - 191, 2**20, 2**20 + 1, 2**32 - 1])
def test_attach_without_fields_with_any_layout_bytes_stays_inside(buf, layout_bytes):
    SeqRecord.create(buf, **FIELDS)
    struct.pack_into("<I", buf, 12, layout_bytes)
    with pytest.raises(ValueError):
        SeqRecord.attach(buf)


def test_attach_without_fields_of_10000_fields():
    fields = {f"f{i}": "q" for i in range(10000)}
    block = mmap.mmap(-1, SeqRecord.buffer_size(**fields))
    SeqRecord.create(block, **fields)
    assert SeqRecord.attach(block).fields == tuple(fields)


def test_create_overwrite_positional_twice_and_str_subclass(buf):
    with pytest.raises(TypeError):
        SeqRecord.create(buf, True, **FIELDS)
    with pytest.raises(TypeError):
        SeqRecord.create(buf, **FIELDS, **{"overwrite": True}, overwrite=True)  # type: ignore[misc]
    class Key(str):
        pass
    SeqRecord.create(buf, **FIELDS)
    rec = SeqRecord.create(buf, **{Key("overwrite"): True}, **FIELDS)
    assert rec.fields == tuple(FIELDS)
    with pytest.raises(TypeError):
        SeqRecord.create(buf, **{Key("overwrite"): 1}, **FIELDS)


def test_create_overwrite_leaves_an_older_object_of_this_process_bound_to_the_new_record(buf):
    """Documents: an object that still uses the buffer sees the new record
    zeroed (sequence 0) and reads it with its own, older layout; its writes
    land in the new record's bytes as its layout places them (no memory is
    left: both layouts fit the buffer)."""
    first = SeqRecord.create(buf, x="d", n="q")
    first.update(x=1.5, n=7)
    second = SeqRecord.create(buf, overwrite=True, y="q", z="d")
    assert first.sequence == 0 and first.read() == (0.0, 0)
    first.update(x=2.5)
    assert second.sequence == 2
    assert second.read() == (struct.unpack("<q", struct.pack("<d", 2.5))[0], 0.0)


def test_failing_attaches_leak_neither_memory_nor_exports(buf):
    SeqRecord.create(buf, **FIELDS)
    texts = [b"x:z", b"", b"x:d;x:d", b"\xff:d"]
    refs = sys.getrefcount(buf)
    tracemalloc.start()
    try:
        def round_(k):
            for i in range(k):
                text = texts[i % len(texts)]
                struct.pack_into("<I", buf, 12, len(text) if i % 5 else 2**31)
                buf[192:192 + len(text)] = text
                try:
                    SeqRecord.attach(buf)
                except ValueError:
                    pass
        round_(1000)
        before = tracemalloc.get_traced_memory()[0]
        round_(10000)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after - before < 64 * 1024
    assert sys.getrefcount(buf) == refs
    buf.close()  # no export left behind


FLIPPER = r'''
import mmap, os, random, struct, sys, time
from seqlock_py import SeqRecord
F = {"x": "d", "n": "q", "arr": "4d"}
size = 1 << 16
buf = mmap.mmap(-1, size)          # MAP_SHARED | MAP_ANONYMOUS: shared with the child
SeqRecord.create(buf, **F)
good = bytes(buf[:size])
pid = os.fork()
if pid == 0:
    rnd = random.Random(int(sys.argv[1]))
    texts = [b"x:d;n:q;arr:4d", b"x:d;n:q;arr:4000d", b"x:d;n:q", b";;", b"\x00" * 20, b"x:99999d"]
    end = time.monotonic() + 3
    while time.monotonic() < end:
        t = rnd.choice(texts)
        struct.pack_into("<I", buf, 12, rnd.choice([len(t), 0, size - 192, size, 2**20, 2**32 - 1]))
        buf[192:192 + len(t)] = t
        if rnd.random() < 0.01:
            buf[:size] = good
    os._exit(0)
ok = bad = 0
end = time.monotonic() + 2.5
while time.monotonic() < end:
    try:
        rec = SeqRecord.attach(buf)
    except ValueError:
        bad += 1
        continue
    assert rec.nbytes <= size
    rec.read()
    ok += 1
    del rec
os.waitpid(pid, 0)
print("ok", ok, "bad", bad, flush=True)
'''


def test_attach_without_fields_while_a_co_tenant_rewrites_the_header():
    """Held: a forked co-tenant rewriting layout_bytes and the text in a
    loop; every attach() succeeds with a record inside the buffer or raises
    ValueError."""
    code, out = run_child(FLIPPER, str(random.randrange(2**32)))
    assert code == 0 and out.startswith("ok"), f"exit {code}\n{out[-1500:]}"
