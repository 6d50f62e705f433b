"""Creating a record in a buffer, and attaching to one, are safe to get
wrong: create() never zeroes a live record by accident, and attach()
without fields reads the layout the buffer holds, as untrusted input.

(Issue 19, "Safe creation and attachment": a child that called create()
instead of attach() zeroed the record for every process, and attach()
needed the fields repeated although the buffer holds them.)
"""
from __future__ import annotations

import mmap
import struct
from multiprocessing import shared_memory

import pytest

from record_helpers import map_shared_memory, poke
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
    with pytest.raises(ValueError, match="layout version 4; .* version 5"):
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
    buf[192:192 + len(text)] = text  # the layout text follows the header
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
