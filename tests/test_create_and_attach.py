"""Creating a record in a buffer, and attaching to one, are safe to get
wrong: create() never zeroes a live record by accident, and attach()
without fields reads the layout the buffer holds, as untrusted input.

(Issue 19, "Safe creation and attachment": a child that called create()
instead of attach() zeroed the record for every process, and attach()
needed the fields repeated although the buffer holds them.  The second
half is a hostile review's: the header rewritten by a co-tenant while
attach() reads it, and create(overwrite=True) over a record objects of this
process still use.  The truncated file's case is in
test_truncated_mapping.py.)
"""
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
from multiprocessing import shared_memory

import pytest

from record_helpers import LAYOUT_TEXT_OFFSET, OVERWRITE_WHILE_IN_USE, RECORD_VERSION, map_shared_memory, poke
from seqlock_py import SeqRecord

FIELDS = {"x": "d", "n": "q", "arr": "4d", "flag": "?", "u": "Q"}


@pytest.fixture
def buf():
    """A fresh 8-byte aligned buffer, zeroed, large enough for FIELDS."""
    block = mmap.mmap(-1, 4096)
    yield block
    try:
        block.close()
    except BufferError:  # a failed test's traceback keeps its records
        pass


# ---- create() ----


def test_create_refuses_a_buffer_that_already_holds_a_record(buf):
    rec = SeqRecord.create(buf, **FIELDS)
    rec.update(x=1.5, n=7)
    with pytest.raises(ValueError, match="already holds a SeqRecord.*attach"):
        SeqRecord.create(buf, **FIELDS)
    assert rec.read()[:2] == (1.5, 7)  # nothing was zeroed


def test_create_refuses_a_record_of_other_fields_too(buf):
    SeqRecord.create(buf, **FIELDS)
    with pytest.raises(ValueError, match="already holds a SeqRecord"):
        SeqRecord.create(buf, y="d")


def test_create_with_overwrite_lays_a_new_record_over_an_old_one(buf):
    old = SeqRecord.create(buf, **FIELDS)
    old.update(x=1.5)
    del old
    new = SeqRecord.create(buf, overwrite=True, y="q")
    assert new.fields == ("y",) and new.read() == (0,)


def as_previous_version(buf, text):
    """Make the record in buf look as version 5 laid it out: the version
    word, the lock ABI (a hash of that version's seqlock_t offsets: not
    this build's), and the layout text where that version's shorter header
    ended (192); its lock word (offset 80) free."""
    struct.pack_into("=I", buf, 4, RECORD_VERSION - 1)
    struct.pack_into("=I", buf, 16, struct.unpack_from("=I", buf, 16)[0] ^ 1)
    buf[192:192 + len(text)] = text


def test_create_with_overwrite_lays_a_new_record_over_one_of_the_previous_version(buf):
    SeqRecord.create(buf, **FIELDS)
    as_previous_version(buf, b"x:d;n:q")
    new = SeqRecord.create(buf, overwrite=True, y="q")
    assert new.read() == (0,) and SeqRecord.attach(buf).fields == ("y",)


def test_create_with_overwrite_refuses_a_record_of_the_previous_version_whose_lock_is_held(buf):
    SeqRecord.create(buf, **FIELDS)
    as_previous_version(buf, b"x:d;n:q")
    struct.pack_into("=Q", buf, 80, 0x1234)  # that version's lock word, held
    with pytest.raises(ValueError, match="locked by a writer"):
        SeqRecord.create(buf, overwrite=True, **FIELDS)


def test_create_with_overwrite_false_is_the_default_refusal(buf):
    SeqRecord.create(buf, **FIELDS)
    with pytest.raises(ValueError, match="already holds a SeqRecord"):
        SeqRecord.create(buf, overwrite=False, **FIELDS)


@pytest.mark.parametrize("value", ["d", 1, None])
def test_create_overwrite_must_be_true_or_false(buf, value):
    with pytest.raises(TypeError, match="overwrite must be True or False"):
        SeqRecord.create(buf, overwrite=value, x="d")


def test_create_lays_out_a_record_where_garbage_was(buf):
    buf[:64] = b"\xff" * 64
    rec = SeqRecord.create(buf, **FIELDS)
    assert rec.read()[0] == 0.0


# ---- attach() without fields ----


def test_attach_without_fields_reads_the_layout_the_buffer_holds(buf):
    created = SeqRecord.create(buf, **FIELDS)
    created.update(x=2.5, n=-3, arr=[1.0, 2.0, 3.0, 4.0], flag=True, u=9)
    rec = SeqRecord.attach(buf)
    assert rec.fields == tuple(FIELDS)
    assert rec.format == created.format
    assert rec.read() == created.read()
    rec.update(x=4.0)
    assert created.read()[0] == 4.0


def test_attach_without_fields_works_on_a_read_only_buffer(buf):
    SeqRecord.create(buf, **FIELDS).update(n=5)
    rec = SeqRecord.attach(memoryview(buf).toreadonly())
    assert rec.readonly and rec["n"] == 5


def test_attach_without_fields_of_a_buffer_without_a_record_says_so(buf):
    with pytest.raises(ValueError, match="holds no SeqRecord"):
        SeqRecord.attach(buf)


def test_attach_without_fields_of_another_layout_version_names_both(buf):
    SeqRecord.create(buf, **FIELDS)
    struct.pack_into("=I", buf, 4, 4)  # the version word
    with pytest.raises(ValueError, match=f"layout version 4; .* version {RECORD_VERSION}"):
        SeqRecord.attach(buf)


@pytest.mark.parametrize(
    "text",
    [b"x:z", b"x", b"x:d;", b"1x:d", b"\xff\xfe:d", b"x:d;x:q", b"", b"x:99999999d"],
    ids=["bad code", "no code", "empty field", "not an identifier",
         "not utf-8", "a name twice", "empty", "too large"],
)
def test_attach_without_fields_refuses_a_stored_layout_that_is_not_valid(buf, text):
    SeqRecord.create(buf, **FIELDS)
    poke(buf, "layout_bytes", len(text))
    buf[LAYOUT_TEXT_OFFSET:LAYOUT_TEXT_OFFSET + len(text)] = text  # the layout text follows the header
    with pytest.raises(ValueError):
        SeqRecord.attach(buf)


def test_attach_without_fields_never_reads_past_the_buffer(buf):
    SeqRecord.create(buf, **FIELDS)
    poke(buf, "layout_bytes", 0x7FFFFF00)
    view = memoryview(buf)[:400]  # a slice: reading on would leave it
    with pytest.raises(ValueError):
        SeqRecord.attach(view)
    view.release()


def test_attach_without_fields_of_shared_memory_through_another_mapping():
    block = shared_memory.SharedMemory(create=True, size=4096)
    try:
        created = SeqRecord.create(block.buf, **FIELDS)
        created.update(u=2**64 - 1)
        second = map_shared_memory(block.name)
        rec = SeqRecord.attach(second)
        assert rec["u"] == 2**64 - 1
        del rec, created
        second.close()
    finally:
        block.close()
        block.unlink()


def test_attach_with_fields_still_checks_them(buf):
    SeqRecord.create(buf, **FIELDS)
    with pytest.raises(ValueError, match="other fields"):
        SeqRecord.attach(buf, y="d")


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
    """Found: a buffer that holds a record but ends inside the 320-byte
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


OVERWRITE_A_HELD_RECORD_WHOSE_VERSION_WORD_WAS_REWRITTEN = r'''
import mmap, struct, sys
from seqlock_py import SeqRecord
F = {"x": "d", "n": "q"}
buf = mmap.mmap(-1, 4096)
first = SeqRecord.create(buf, **F)
try:
    with first.write() as w:
        w.x = 3.0
        struct.pack_into("=I", buf, 4, int(sys.argv[1]))  # one stray write
        SeqRecord.create(buf, overwrite=True, **F)
        print("laid out over the held lock", flush=True)
except ValueError as exc:
    print("refused:", exc, flush=True)
print("alive", flush=True)
'''


@pytest.mark.parametrize("version", [0, 1, RECORD_VERSION - 1])
def test_create_overwrite_refuses_a_held_record_whose_version_word_alone_says_older(version):
    """Hostile review of issue 28: one stray write to the version word of a
    record this build laid out (its lock ABI still this build's) made
    create(overwrite=True) look for the holder where an older version kept
    its lock word (offset 80, padding in this version), find it free, and
    lay a new mutex over the held one: the section's exit then died of
    SIGSEGV (3.11, every run).  The lock ABI (a hash of every offset of
    seqlock_t) says whose lock layout the block has: ours, so the holder is
    looked for where this version keeps it, and the record is refused as
    locked."""
    code, out = run_child(OVERWRITE_A_HELD_RECORD_WHOSE_VERSION_WORD_WAS_REWRITTEN, str(version))
    assert code == 0 and "refused:" in out and "locked by a writer" in out, f"exit {code}\n{out[-1500:]}"
    assert "laid out over" not in out and "alive" in out, out


def test_create_overwrite_over_a_record_in_use_takes_its_lock_while_laying_it_out():
    """create(buf, overwrite=True) while another process writes and
    another reads the record: each create either takes the record's lock
    (so no writer is inside, and none enters, while it lays the record
    out) or is refused as in use; writers never crash, readers never read
    a half-made record.

    Seen (main 666f113, 3.11, 6 runs of 6): the writer process died of
    SIGSEGV (the check that the lock word was free came before the robust
    mutex was laid out anew, under a writer that took it meanwhile)."""
    code, out = run_child(OVERWRITE_WHILE_IN_USE, "record")
    assert code == 0, out
    assert out.count("exit status 0") == 2, out
    assert "writer torn 0 errors {}" in out and "reader torn 0 errors {}" in out, out


DIE_IN_A_SECTION_THEN_OVERWRITE = r'''
import mmap, os
from seqlock_py import SeqRecord
F = dict(a="q", b="q")
m = mmap.mmap(-1, SeqRecord.buffer_size(**F))
rec = SeqRecord.create(m, **F)
rec.update(a=1, b=2)
pid = os.fork()
if pid == 0:
    with rec.write() as w:
        w.a = 5
        os._exit(0)  # dies inside the section, holding the lock
os.waitpid(pid, 0)
try:
    again = SeqRecord.create(m, overwrite=True, **F)
except ValueError as exc:
    print("refused:", exc, flush=True)
    raise SystemExit(0)
print("laid out", tuple(again.read()), flush=True)
again.update(a=3)
print("then", tuple(again.read()), tuple(rec.read()), flush=True)
'''


def test_create_overwrite_over_a_record_whose_writer_died_in_a_section_lays_it_out():
    """A writer process died inside a write section, holding the lock:
    create(buf, overwrite=True) takes the lock over from the dead writer,
    as any writer would, and lays the new record out (zeroed); it is not
    "locked by a writer".

    Seen (main 666f113, 3.11): ValueError "the buffer's SeqRecord is
    locked by a writer" for good (the dead holder's token stays in the
    lock word until a writer takes it over)."""
    code, out = run_child(DIE_IN_A_SECTION_THEN_OVERWRITE)
    assert code == 0, out
    assert "laid out (0, 0)" in out and "then (3, 0) (3, 0)" in out, out


LAYER_OUT_DIED = r'''
import mmap, os, struct
from seqlock_py import SeqRecord
F = dict(a="q", b="q")
m = mmap.mmap(-1, SeqRecord.buffer_size(**F))
rec = SeqRecord.create(m, **F)
rec.update(a=1, b=2)
pid = os.fork()
if pid == 0:
    with rec.write() as w:
        # as create(overwrite=True) dying while it lays the record out:
        # the lock held, magic saying "being laid out"
        struct.pack_into("<I", m, 0, 0x6F514553)
        os._exit(0)
os.waitpid(pid, 0)
for what, call in [("attach", lambda: SeqRecord.attach(m, **F)),
                   ("create", lambda: SeqRecord.create(m, **F)),
                   ("overwrite", lambda: SeqRecord.create(m, overwrite=True, **F))]:
    try:
        made = call()
        made.update(a=5)
        print(what, "made", tuple(made.read()), flush=True)
    except ValueError as exc:
        print(what, "refused:", exc, flush=True)
'''


def test_a_record_being_laid_out_is_no_record_to_attach_an_existing_one_to_create_and_overwrite_takes_it_over():
    """While create(overwrite=True) lays a record out (holding its lock,
    magic "being laid out"), or after it died doing so: attach() finds no
    record, create() without overwrite finds one (it must not lay a lock
    out under the one laying it out), create(overwrite=True) takes the
    dead one's lock over and lays the record out."""
    code, out = run_child(LAYER_OUT_DIED)
    assert code == 0, out
    assert "attach refused: " in out and "no magic" in out, out
    assert "create refused: the buffer already holds a SeqRecord" in out, out
    assert "overwrite made (5, 0)" in out, out


# ---- what held ----


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
    buf[LAYOUT_TEXT_OFFSET:LAYOUT_TEXT_OFFSET + len(text)] = text
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
        block[LAYOUT_TEXT_OFFSET:LAYOUT_TEXT_OFFSET + len(text)] = text  # same length, same data bytes
        rec = SeqRecord.attach(block)
    else:
        rec = SeqRecord.attach(block)
    assert rec.fields == names


@pytest.mark.parametrize("layout_bytes", [0, 1, 4096 - LAYOUT_TEXT_OFFSET, 4096 - LAYOUT_TEXT_OFFSET + 1, 2**20, 2**20 + 1, 2**32 - 1])
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
    zeroed (its count moved on by one section) and reads it with its own, older layout; its writes
    land in the new record's bytes as its layout places them (no memory is
    left: both layouts fit the buffer)."""
    first = SeqRecord.create(buf, x="d", n="q")
    first.update(x=1.5, n=7)
    seq = first.sequence
    second = SeqRecord.create(buf, overwrite=True, y="q", z="d")
    # the zeroes are committed as one section: the count moves on
    assert first.sequence == seq + 2 and first.read() == (0.0, 0)
    first.update(x=2.5)
    assert second.sequence == seq + 4
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
                buf[LAYOUT_TEXT_OFFSET:LAYOUT_TEXT_OFFSET + len(text)] = text
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
        struct.pack_into("<I", buf, 12, rnd.choice([len(t), 0, size - LAYOUT_TEXT_OFFSET, size, 2**20, 2**32 - 1]))
        buf[LAYOUT_TEXT_OFFSET:LAYOUT_TEXT_OFFSET + len(t)] = t
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
