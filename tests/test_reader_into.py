"""SeqRecord.reader_into(buffer): read_into() bound to one buffer, checked
once; calling it copies a consistent snapshot and returns its sequence."""
from __future__ import annotations

import mmap
import struct
import threading
import types

import pytest

from seqlock_py import ReaderInto, SeqRecord
from workers import run_threads


def pose():
    rec = SeqRecord(x="d", y="d")
    rec.update(x=1.5, y=2.5)
    return rec


def test_calling_it_copies_what_read_into_copies_and_returns_the_sequence():
    rec = pose()
    mine, theirs = bytearray(rec.nbytes), bytearray(rec.nbytes)
    into = rec.reader_into(mine)
    assert into() == rec.read_into(theirs) == rec.sequence
    assert mine == theirs and struct.unpack(rec.format, mine) == (1.5, 2.5)


def test_each_call_copies_the_newest_snapshot():
    rec = pose()
    buf = bytearray(rec.nbytes)
    into = rec.reader_into(buf)
    into()
    rec.update(x=7.0)
    assert into() == rec.sequence and struct.unpack(rec.format, buf) == (7.0, 2.5)


def test_a_fields_reader_into_fills_that_fields_array():
    np = pytest.importorskip("numpy")
    rec = SeqRecord(n="q", state="4d")
    rec.update(state=np.arange(4.0))
    out = np.zeros(4)
    into = rec.reader_into(out, field="state")
    into()
    assert out.tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    "buffer, error",
    [(bytearray(8), ValueError), (b"x" * 16, BufferError), (memoryview(bytearray(32)).cast("d"), TypeError)],
    ids=["too small", "read-only", "another element type"],
)
def test_it_refuses_what_read_into_refuses(buffer, error):
    rec = SeqRecord(x="d", n="q")
    with pytest.raises(error):
        rec.read_into(buffer)
    with pytest.raises(error):
        rec.reader_into(buffer)


def test_it_refuses_an_unknown_field_with_key_error():
    with pytest.raises(KeyError):
        pose().reader_into(bytearray(16), field="z")


def test_it_refuses_the_records_own_memory():
    size = SeqRecord.buffer_size(x="d", y="d")
    m = mmap.mmap(-1, size)
    view = memoryview(m)
    rec = SeqRecord.create(view, x="d", y="d")
    inside = view[size - 16:]
    with pytest.raises(ValueError, match="has open"):
        rec.reader_into(inside)
    inside.release()
    rec.close()
    view.release()
    m.close()


def test_a_record_opened_later_over_its_buffer_stops_it():
    # Checked once at reader_into(), again whenever the set of open
    # records and rings changed: never copying into one opened since.
    size = SeqRecord.buffer_size(x="d", y="d")
    m = mmap.mmap(-1, size)
    view = memoryview(m)
    rec = pose()
    into = rec.reader_into(view[size - 16:])
    into()
    other = SeqRecord.create(view, x="d", y="d")
    before = bytes(m)
    with pytest.raises(ValueError, match="has open"):
        into()
    assert bytes(m) == before
    other.close()
    into()  # the record closed: the buffer is the caller's again
    del into
    view.release()
    m.close()


def test_it_holds_the_buffers_export_while_it_lives():
    rec = pose()
    buf = bytearray(rec.nbytes)
    into = rec.reader_into(buf)
    with pytest.raises(BufferError):
        buf.extend(b"more")
    assert into.__self__.buffer is buf and into.__self__.record is rec
    del into
    buf.extend(b"more")


def test_calling_it_after_the_record_closed_raises_value_error():
    rec = pose()
    into = rec.reader_into(bytearray(rec.nbytes))
    rec.close()
    with pytest.raises(ValueError, match="closed"):
        into()


def test_a_closed_record_makes_none():
    rec = pose()
    rec.close()
    with pytest.raises(ValueError, match="closed"):
        rec.reader_into(bytearray(16))


def test_it_takes_no_arguments():
    into = pose().reader_into(bytearray(16))
    with pytest.raises(TypeError, match="no arguments"):
        into(1)
    with pytest.raises(TypeError, match="no keyword arguments"):
        into(x=1)


def test_it_is_the_into_method_of_a_reader_into():
    # A builtin method (CPython 3.11 specializes its call), bound to the
    # object that holds the checked buffer.
    rec = pose()
    into = rec.reader_into(bytearray(16))
    assert type(into) is types.BuiltinMethodType and into.__name__ == "into"
    assert type(into.__self__) is ReaderInto
    assert into.__self__.into() == into() == rec.sequence


def test_calls_that_the_interpreter_does_not_specialize_copy_the_same():
    # Through the method's vectorcall (3.13t: every call) and through its
    # C function (a specialized 3.11 call) alike.
    rec = pose()
    buf = bytearray(rec.nbytes)
    into = rec.reader_into(buf)
    assert [into() for _ in range(20)] == [rec.sequence] * 20
    rec.update(x=3.0)
    assert (into.__call__() == rec.sequence
            and struct.unpack(rec.format, buf) == (3.0, 2.5))


def test_it_cannot_be_made_directly():
    with pytest.raises(TypeError):
        ReaderInto()


def test_readers_into_in_threads_see_only_whole_writes():
    # The writer keeps x == y; each reader thread has its own buffer.
    rec = SeqRecord(x="d", y="d")
    stop = threading.Event()
    seen = []

    def writer():
        i = 0.0
        while not stop.is_set():
            i += 1.0
            rec.update(x=i, y=i)

    def reader(_):
        buf = bytearray(rec.nbytes)
        into = rec.reader_into(buf)
        torn = reads = 0
        for _ in range(20000):
            into()
            x, y = struct.unpack(rec.format, buf)
            torn += x != y
            reads += 1
        seen.append((reads, torn))

    w = threading.Thread(target=writer)
    w.start()
    try:
        run_threads(2, reader)
    finally:
        stop.set()
        w.join()
    assert [torn for _, torn in seen] == [0, 0] and sum(r for r, _ in seen) == 40000
