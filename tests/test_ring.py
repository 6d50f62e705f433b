"""SeqRing: a broadcast ring of entries, and its readers (RingReader).

One behaviour per test; the stress test at the end runs reader processes,
one fast and one lapped on purpose, against a writer, and checks that every
appended entry is delivered in order or counted missed, exactly, 0 torn.
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import mmap
import os
import random
import sys
import uuid
import threading
import time
import typing
from multiprocessing import shared_memory

import pytest

from seqlock_py import RingReader, SeqRecord, SeqRing
from process_helpers import PythonProcess, assert_clean_exit, run_python
from record_helpers import HEADER_OFFSETS, RING_VERSION, keywords_naming_one_field_twice
from workers import LONG, SHORT


def small_ring(capacity=4):
    return SeqRing(capacity, x="d", n="q", v="3f")


# ---- construction and appends ----


def test_append_returns_consecutive_sequence_numbers():
    ring = small_ring()
    assert [ring.append(x=i) for i in range(6)] == [0, 1, 2, 3, 4, 5]
    assert ring.head == 6


def test_fields_not_named_in_append_are_zero():
    ring = small_ring()
    reader = ring.reader()
    ring.append(n=7)
    [(seq, snap)] = reader.poll()
    assert (seq, snap.x, snap.n, snap.v) == (0, 0.0, 7, (0.0, 0.0, 0.0))


def test_append_that_fails_to_convert_appends_nothing():
    class Bad:
        def __float__(self):
            raise ZeroDivisionError

    ring = small_ring()
    with pytest.raises(ZeroDivisionError):
        ring.append(x=Bad())
    assert ring.head == 0


def test_append_of_an_unknown_field_raises_type_error():
    ring = small_ring()
    with pytest.raises(TypeError, match="no field 'y'"):
        ring.append(y=1)
    assert ring.head == 0


def test_append_refuses_two_keywords_naming_one_field():
    # As update() does: which of the two would it keep?
    ring = small_ring()
    with pytest.raises(TypeError, match=r"append\(\) got multiple values for field 'x'"):
        ring.append(**keywords_naming_one_field_twice("x", 1.0, 2.0))
    assert ring.head == 0


def test_append_from_many_call_sites_writes_what_each_one_names():
    ring = SeqRing(64, a="q", b="q", c="q")
    reader = ring.reader()
    want = []
    for k, chosen in enumerate(["a", "b", "c", "ab", "bc", "ca", "abc", "cab", "ba"] * 2):
        ring.append(**{n: k for n in chosen})
        want.append(tuple(k if n in chosen else 0 for n in "abc"))
    assert [tuple(entry) for _, entry in reader.poll()] == want


def test_append_takes_keywords_only():
    with pytest.raises(TypeError, match="keywords only"):
        small_ring().append(1.0)


@pytest.mark.parametrize("capacity", [0, -1, 2**41])
def test_capacity_out_of_range_raises_value_error(capacity):
    with pytest.raises(ValueError, match="capacity"):
        SeqRing(capacity, x="d")


def test_namedtuple_declaration_gives_declared_snapshots():
    class Tick(typing.NamedTuple):
        price: float
        size: int

    ring = SeqRing(8, Tick)
    reader = ring.reader()
    ring.append(price=1.5, size=3)
    [(seq, tick)] = reader.poll()
    assert type(tick) is Tick and tick == Tick(1.5, 3)


def test_ring_attributes_describe_its_layout():
    ring = small_ring(16)
    assert ring.capacity == 16
    assert ring.fields == ("x", "n", "v")
    assert ring.nbytes == 8 + 8 + 12
    assert ring.recoveries == 0 and not ring.readonly and not ring.closed


# ---- readers ----


def test_reader_starts_after_the_newest_entry():
    ring = small_ring()
    ring.append(x=1)
    reader = ring.reader()
    assert reader.poll() == []
    ring.append(x=2)
    assert [(s, e.x) for s, e in reader.poll()] == [(1, 2.0)]


def test_reader_from_oldest_starts_at_the_oldest_retained_entry():
    ring = small_ring(4)
    for i in range(6):
        ring.append(n=i)
    reader = ring.reader(oldest=True)
    assert [s for s, _ in reader.poll()] == [2, 3, 4, 5]
    assert reader.missed == 0


def test_poll_returns_entries_in_order_with_whole_values():
    ring = small_ring(8)
    reader = ring.reader()
    for i in range(5):
        ring.append(x=i * 0.5, n=i, v=(i, i + 1, i + 2))
    got = reader.poll()
    assert [s for s, _ in got] == list(range(5))
    for s, e in got:
        assert (e.x, e.n, e.v) == (s * 0.5, s, (s, s + 1.0, s + 2.0))
    assert reader.poll() == []


def test_lapped_reader_counts_exactly_the_entries_it_missed():
    ring = small_ring(4)
    reader = ring.reader()
    for i in range(10):
        ring.append(n=i)
    assert [s for s, _ in reader.poll()] == [6, 7, 8, 9]
    assert reader.missed == 6
    assert reader.next_sequence == 10


def test_readers_are_independent():
    ring = small_ring(8)
    a, b = ring.reader(), ring.reader()
    ring.append(n=1)
    assert len(a.poll()) == 1
    ring.append(n=2)
    assert [s for s, _ in b.poll()] == [0, 1]
    assert [s for s, _ in a.poll()] == [1]


def test_reader_cannot_be_made_directly():
    with pytest.raises(TypeError):
        RingReader()


def test_rewound_ring_raises_runtime_error_on_poll():
    size = SeqRing.buffer_size(4, x="d")
    buf = mmap.mmap(-1, size)
    ring = SeqRing.create(buf, 4, x="d")
    reader = ring.reader()
    for i in range(3):
        ring.append(x=i)
    reader.poll()
    SeqRing.create(buf, 4, overwrite=True, x="d")  # head back to 0
    with pytest.raises(RuntimeError, match="rewound"):
        reader.poll()


def test_create_with_overwrite_lays_a_new_ring_over_one_of_the_previous_version():
    buf = mmap.mmap(-1, SeqRing.buffer_size(4, x="d"))
    SeqRing.create(buf, 4, x="d")
    buf[4:8] = (RING_VERSION - 1).to_bytes(4, "little")
    buf[16] ^= 1  # its lock ABI, a hash of that version's offsets: not this build's
    buf[192:195] = b"x:d"  # where version 1 kept its layout text; its lock word (80) free
    ring = SeqRing.create(buf, 4, overwrite=True, x="d")
    assert ring.reader(oldest=True).poll() == [] and SeqRing.attach(buf).fields == ("x",)


def test_create_with_overwrite_refuses_a_held_ring_whose_version_word_alone_says_older():
    """Hostile review of issue 28: a ring whose version word alone was
    rewritten to an older version's (its lock ABI still this build's) was
    laid out anew over a held lock: create(overwrite=True) looked for the
    holder at offset 80, where version 1 kept it (padding in version 2).
    Its lock ABI says the lock is this version's: refused as locked."""
    buf = mmap.mmap(-1, SeqRing.buffer_size(4, x="d"))
    SeqRing.create(buf, 4, x="d")
    buf[4:8] = (RING_VERSION - 1).to_bytes(4, "little")
    holder = HEADER_OFFSETS["holder"][0]  # a ring's lock lies as a record's
    buf[holder:holder + 8] = (0x1234).to_bytes(8, "little")  # this version's lock word, held
    with pytest.raises(ValueError, match="locked by a writer"):
        SeqRing.create(buf, 4, overwrite=True, x="d")


def rewound_reader(capacity=4):
    """(ring, reader): a reader at entry 3 of a ring then made anew over
    its buffer (head back to 0), whose poll() has said so once."""
    buf = mmap.mmap(-1, SeqRing.buffer_size(capacity, x="d"))
    ring = SeqRing.create(buf, capacity, x="d")
    reader = ring.reader()
    for i in range(3):
        ring.append(x=i)
    reader.poll()
    ring = SeqRing.create(buf, capacity, overwrite=True, x="d")
    with pytest.raises(RuntimeError, match="rewound"):
        reader.poll()
    return ring, reader


def test_a_rewound_reader_keeps_raising_once_the_new_head_passes_its_place():
    """Issue 27, defect 7: a reader told the ring was rewound has a place
    that means nothing in the new ring: its poll() raises until it is
    replaced (docs/ring.md), also once the new ring's head passes that
    place.  main: it returned the new ring's entries 3 and 4 as if they
    followed, entries 0 to 2 neither returned nor counted missed."""
    ring, reader = rewound_reader()
    for i in range(5):
        ring.append(x=10 + i)
    with pytest.raises(RuntimeError, match="rewound"):
        reader.poll()
    assert reader.missed == 0


def test_a_rewound_readers_wait_returns_at_once():
    """Issue 27, defect 7: a rewound reader's poll() has something to say
    (RuntimeError), so its wait() returns True at once, also when the new
    head stands exactly at its old place.  main: wait(0) said False (and
    an untimed wait slept) once the head reached the place."""
    ring, reader = rewound_reader()
    for i in range(3):
        ring.append(x=10 + i)
    assert reader.wait(0) is True


# ---- shared memory: create, attach, read-only ----


def test_create_and_attach_share_entries():
    size = SeqRing.buffer_size(8, x="d", n="q")
    buf = mmap.mmap(-1, size)
    writer = SeqRing.create(buf, 8, x="d", n="q")
    other = SeqRing.attach(buf)
    reader = other.reader()
    writer.append(x=2.5, n=3)
    [(seq, e)] = reader.poll()
    assert (seq, e.x, e.n) == (0, 2.5, 3)


def test_attach_reads_layout_and_capacity_from_the_buffer():
    buf = mmap.mmap(-1, SeqRing.buffer_size(32, a="16d", b="?"))
    SeqRing.create(buf, 32, a="16d", b="?")
    ring = SeqRing.attach(buf)
    assert (ring.capacity, ring.fields, ring.format) == (32, ("a", "b"), "16d?")


def test_attach_with_other_fields_raises_value_error():
    buf = mmap.mmap(-1, SeqRing.buffer_size(4, x="d"))
    SeqRing.create(buf, 4, x="d")
    with pytest.raises(ValueError, match="other fields"):
        SeqRing.attach(buf, y="d")


def test_attach_refuses_a_buffer_without_a_ring():
    with pytest.raises(ValueError, match="no SeqRing"):
        SeqRing.attach(bytearray(4096))


@pytest.mark.parametrize("declared", [True, False], ids=["fields", "no fields"])
def test_attach_of_a_ring_of_another_layout_version_names_both(declared):
    buf = mmap.mmap(-1, SeqRing.buffer_size(4, x="d"))
    SeqRing.create(buf, 4, x="d")
    buf[4:8] = (1).to_bytes(4, "little")  # the version word, where all wrote it
    with pytest.raises(ValueError, match=f"layout version 1; .* version {RING_VERSION}"):
        SeqRing.attach(buf, **({"x": "d"} if declared else {}))


@pytest.mark.parametrize("declared", [True, False], ids=["fields", "no fields"])
def test_attach_of_an_older_ring_shorter_than_this_versions_header_names_both(declared):
    # A version-1 ring of one byte and one slot ended at 272 bytes.
    buf = bytearray(SeqRing.buffer_size(1, b="B"))
    SeqRing.create(buf, 1, b="B")
    buf[4:8] = (1).to_bytes(4, "little")
    view = memoryview(buf)[:272]
    with pytest.raises(ValueError, match=f"layout version 1; .* version {RING_VERSION}"):
        SeqRing.attach(view, **({"b": "B"} if declared else {}))


def test_attach_refuses_a_header_whose_capacity_outgrows_the_buffer():
    buf = mmap.mmap(-1, SeqRing.buffer_size(4, x="d"))
    SeqRing.create(buf, 4, x="d")
    buf[24:32] = (10**9).to_bytes(8, "little")  # the header's capacity
    with pytest.raises(ValueError, match="too small"):
        SeqRing.attach(buf)


def test_create_refuses_a_buffer_that_holds_a_ring():
    buf = mmap.mmap(-1, SeqRing.buffer_size(4, x="d"))
    SeqRing.create(buf, 4, x="d")
    with pytest.raises(ValueError, match="already holds a SeqRing"):
        SeqRing.create(buf, 4, x="d")


def test_create_refuses_a_buffer_too_small():
    with pytest.raises(ValueError, match="too small"):
        SeqRing.create(bytearray(64), 4, x="d")


def test_reader_of_a_read_only_mapping_writes_nothing():
    buf = mmap.mmap(-1, SeqRing.buffer_size(8, x="d"))
    writer = SeqRing.create(buf, 8, x="d")
    ring = SeqRing.attach(memoryview(buf).toreadonly())
    reader = ring.reader(oldest=True)
    writer.append(x=1.0)
    before = bytes(buf)
    assert [e.x for _, e in reader.poll()] == [1.0]
    assert reader.wait(0.01) is False
    if importlib.util.find_spec("numpy") is not None:
        assert ring.read_last(8)[0] == 0
    assert bytes(buf) == before


def test_read_only_ring_refuses_append():
    buf = mmap.mmap(-1, SeqRing.buffer_size(8, x="d"))
    SeqRing.create(buf, 8, x="d")
    ring = SeqRing.attach(memoryview(buf).toreadonly())
    assert ring.readonly
    with pytest.raises(TypeError, match="read-only"):
        ring.append(x=1)


# ---- waiting ----


def test_wait_returns_true_once_another_thread_appends():
    ring = small_ring()
    reader = ring.reader()
    threading.Timer(0.05, ring.append, kwargs={"n": 1}).start()
    assert reader.wait(LONG) is True
    assert [s for s, _ in reader.poll()] == [0]


def test_wait_returns_at_once_when_an_entry_is_unpolled():
    ring = small_ring()
    reader = ring.reader()
    ring.append(n=1)
    assert reader.wait(0) is True


def test_wait_times_out_with_false():
    assert small_ring().reader().wait(0.05) is False


def test_wait_async_returns_true_once_an_entry_is_appended():
    ring = small_ring()
    reader = ring.reader()

    async def main():
        asyncio.get_running_loop().call_later(0.05, lambda: ring.append(n=1))
        return await reader.wait_async(LONG)

    assert asyncio.run(main()) is True


def test_wait_async_times_out_with_false():
    reader = small_ring().reader()
    assert asyncio.run(reader.wait_async(0.05)) is False


# ---- numpy: the newest entries in one call ----


def test_read_last_returns_consecutive_rows_of_the_dtype():
    np = pytest.importorskip("numpy")
    ring = small_ring(4)
    for i in range(6):
        ring.append(x=i, n=i, v=(i, i, i))
    first, rows = ring.read_last(3)
    assert first == 3 and rows.dtype == ring.dtype
    assert rows["n"].tolist() == [3, 4, 5]
    assert np.array_equal(rows["v"][0], [3, 3, 3])


def test_read_last_returns_at_most_what_was_appended():
    pytest.importorskip("numpy")
    ring = small_ring(4)
    ring.append(n=9)
    first, rows = ring.read_last(10)
    assert first == 0 and rows["n"].tolist() == [9]


def test_read_last_fills_out_from_its_first_row():
    np = pytest.importorskip("numpy")
    ring = small_ring(8)
    for i in range(3):
        ring.append(n=i)
    out = np.zeros(5, ring.dtype)
    first, rows = ring.read_last(2, out=out)
    assert first == 1 and rows["n"].tolist() == [1, 2]
    assert out["n"].tolist() == [1, 2, 0, 0, 0]


def test_read_last_refuses_an_out_of_another_dtype():
    np = pytest.importorskip("numpy")
    ring = small_ring(8)
    with pytest.raises(TypeError):
        ring.read_last(2, out=np.zeros(2, [("x", "f8")]))


@pytest.mark.parametrize("kind", ["bytearray", "elements", "2-d", "0-d"])
def test_read_last_refuses_an_out_whose_rows_are_not_entries(kind):
    """Failed (hostile review of issue 20): read_last() took any out that
    read_into() takes (bytes, an array of the record's only element type,
    an array of ring.dtype of any shape), filled it with entries, then
    returned out[:got]: got bytes, got floats (two per entry) or got rows
    of a 2-D array beside the sequence number of the first entry, and
    IndexError after filling a 0-d one."""
    np = pytest.importorskip("numpy")
    ring = SeqRing(8, x="d", y="d")
    for i in range(10):
        ring.append(x=i, y=-i)
    out = {
        "bytearray": lambda: bytearray(200),
        "elements": lambda: np.zeros(8),
        "2-d": lambda: np.zeros((2, 2), ring.dtype),
        "0-d": lambda: np.zeros((), ring.dtype),
    }[kind]()
    before = bytes(memoryview(out).cast("B"))
    with pytest.raises(TypeError, match="one-dimensional array of ring.dtype"):
        ring.read_last(2 if kind != "0-d" else 1, out=out)
    assert bytes(memoryview(out).cast("B")) == before


def test_read_last_of_a_one_field_ring_fills_an_array_of_its_type():
    """Holds: a ring of one 'd' field reads into numpy.zeros(n): one
    float per entry is one row per entry."""
    np = pytest.importorskip("numpy")
    ring = SeqRing(8, x="d")
    for i in range(5):
        ring.append(x=i)
    first, rows = ring.read_last(3, out=np.zeros(4))
    assert (first, rows.tolist()) == (2, [2.0, 3.0, 4.0])


def test_read_last_refuses_an_out_too_short():
    np = pytest.importorskip("numpy")
    ring = small_ring(8)
    with pytest.raises(ValueError, match="room"):
        ring.read_last(4, out=np.zeros(2, ring.dtype))



@pytest.mark.parametrize("kind", ["too short", "read-only", "bytes", "strided", "same-size other dtype", "not a buffer"])
def test_read_last_says_what_out_to_give_when_it_refuses_one(kind):
    """Each refusal of a bad out names read_last() and the out it takes
    (numpy.empty(n, ring.dtype)), and fills nothing.

    Seen (main 666f113, 3.11): "out has room for 2 entries, 4 asked
    for"; numpy's "buffer source array is read-only", bytes' "Object is
    not writable."; "read_into() takes a C-contiguous buffer" and
    "read_into() takes bytes ... rec.dtype" (another call's advice); "a
    bytes-like object is required, not 'int'"."""
    np = pytest.importorskip("numpy")
    ring = SeqRing(8, x="d", y="d")
    for i in range(10):
        ring.append(x=i, y=-i)
    out = {
        "too short": lambda: np.zeros(2, ring.dtype),
        "read-only": lambda: np.frombuffer(bytes(8 * ring.dtype.itemsize), ring.dtype),
        "bytes": lambda: bytes(200),
        "strided": lambda: np.zeros(8, ring.dtype)[::2],
        "same-size other dtype": lambda: np.zeros(4, np.complex128),
        "not a buffer": lambda: 5,
    }[kind]()
    with pytest.raises((TypeError, ValueError, BufferError)) as caught:
        ring.read_last(4, out=out)
    message = str(caught.value)
    assert "read_last()" in message and "numpy.empty(" in message and "ring.dtype" in message, message
    if isinstance(out, np.ndarray):
        assert not np.ascontiguousarray(out).view(np.uint8).any()


@pytest.mark.skipif(sys.version_info < (3, 12), reason="a Python buffer exporter is 3.12's (PEP 688)")
def test_read_last_refuses_an_out_it_cannot_slice_before_filling_it():
    """read_last() returns out[:got]: an out that exports a buffer but
    cannot be sliced is refused before anything is copied, saying which
    out to give.

    Seen (main 666f113, 3.13t): the rows were copied into it, then
    "TypeError: 'Exporter' object is not subscriptable"."""
    ring = SeqRing(4, x="d")
    ring.append(x=1.5)
    rows = bytearray(32)

    class Exporter:
        def __buffer__(self, flags):
            return memoryview(rows).cast("d")

    with pytest.raises(TypeError, match=r"read_last\(\)'s out .*numpy.empty\(n, ring.dtype\)"):
        ring.read_last(2, out=Exporter())
    assert rows == bytearray(32)


def test_read_last_refuses_an_out_inside_the_rings_own_memory():
    # np.frombuffer(shm.buf): rows over the ring's header, lock and slots,
    # which every process reads and appends through.
    np = pytest.importorskip("numpy")
    shm = shared_memory.SharedMemory(create=True, size=SeqRing.buffer_size(4, x="d"))
    try:
        with SeqRing.create(shm.buf, 4, x="d") as ring:
            for i in range(6):
                ring.append(x=float(i))
            before = bytes(shm.buf)
            mine = np.frombuffer(shm.buf, ring.dtype, count=4)
            try:
                with pytest.raises(ValueError, match="has open"):
                    ring.read_last(4, out=mine)
            finally:
                del mine
            assert bytes(shm.buf) == before
            assert ring.append(x=6.0) == 6
        with SeqRing.attach(shm.buf) as again:
            assert again.read_last(2)[1]["x"].tolist() == [5.0, 6.0]
    finally:
        shm.close()
        shm.unlink()


def test_read_last_refuses_an_out_inside_an_open_records_memory():
    np = pytest.importorskip("numpy")

    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(x="16d"))
    try:
        with SeqRecord.create(shm.buf, x="16d") as rec:
            ring = small_ring(4)
            ring.append(v=(1, 2, 3))
            before = bytes(shm.buf)
            theirs = np.frombuffer(shm.buf, ring.dtype, count=1)
            try:
                with pytest.raises(ValueError, match="has open"):
                    ring.read_last(1, out=theirs)
            finally:
                del theirs
            assert bytes(shm.buf) == before
            assert rec.read() == ((0.0,) * 16,)
    finally:
        shm.close()
        shm.unlink()


# ---- sequence numbers near 2**64 (a head a co-tenant wrote) ----


@pytest.mark.parametrize("head", [2**64 - 1, 2**64 - 7, 2**63 - 1])
def test_a_head_written_near_2_64_wraps_and_readers_made_after_it_follow(head):
    """Held (hostile review of issue 20): a co-tenant writes head near
    2**64; appends go on from it and wrap to 0, readers made before the
    wrap say the ring was rewound, a reader made after it gets every
    entry retained, in order, each whole."""
    cap = 5
    buf = mmap.mmap(-1, SeqRing.buffer_size(cap, x="q"))
    ring = SeqRing.create(buf, cap, x="q")
    at = SeqRing.buffer_size(cap, x="q") - cap * 16 - 128  # head's line
    buf[at:at + 8] = head.to_bytes(8, "little")
    before = ring.reader()
    seqs = [ring.append(x=i) for i in range(8)]
    assert seqs == [(head + i) % 2**64 for i in range(8)]
    entries = ring.reader(oldest=True).poll()
    end = (head + 8) % 2**64  # the head now; the oldest retained: at most cap back, not below 0
    assert [(seq, e.x) for seq, e in entries] == [
        (seq, (seq - head) % 2**64) for seq in range(end - min(cap, end), end)]
    if head + 8 > 2**64:
        with pytest.raises(RuntimeError, match="rewound"):
            before.poll()
    else:
        assert [e.x for _, e in before.poll()] == [3, 4, 5, 6, 7] and before.missed == 3


# ---- close ----


def test_close_makes_the_ring_and_its_readers_raise_value_error():
    ring = small_ring()
    reader = ring.reader()
    ring.close()
    assert ring.closed
    for call in (reader.poll, lambda: reader.wait(0), lambda: ring.append(x=1),
                 ring.reader, lambda: ring.read_last(1)):
        with pytest.raises(ValueError, match="^the ring is closed$"):
            call()


def test_with_block_closes_the_ring_and_releases_its_buffer():
    buf = mmap.mmap(-1, SeqRing.buffer_size(4, x="d"))
    with SeqRing.create(buf, 4, x="d") as ring:
        ring.append(x=1)
    assert ring.closed
    buf.close()  # no export left


def test_close_wakes_a_waiting_reader_with_value_error():
    ring = small_ring()
    reader = ring.reader()
    outcome = []

    def wait():
        try:
            reader.wait(LONG)
        except ValueError as e:
            outcome.append(e)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.05)
    ring.close()
    t.join(SHORT)
    assert not t.is_alive() and len(outcome) == 1


def test_ring_cannot_be_pickled():
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(small_ring())


def test_pickling_a_ring_or_its_reader_says_to_attach_shared_it_by_name():
    import pickle

    ring = small_ring()
    with pytest.raises(TypeError, match=r"cannot pickle.*SeqRing\.attach_shared\(name\)"):
        pickle.dumps(ring)
    with pytest.raises(TypeError, match=r"cannot pickle.*attach_shared\(name\).*reader\(\)"):
        pickle.dumps(ring.reader())


def test_a_ring_constructed_on_a_buffer_points_to_create_and_attach():
    buf = bytearray(4096)
    for call in (lambda: SeqRing(buf, 4, x="d"), lambda: SeqRing(buf, 4), lambda: SeqRing(buf, x="d")):
        with pytest.raises(TypeError, match=r"takes no buffer.*SeqRing\.create\(buffer.*SeqRing\.attach\(buffer") as caught:
            call()
        assert "not both" not in str(caught.value)


# ---- capacities beyond memory ----

# A child that cannot fill the machine's memory whatever it asks for: its
# address space is what it maps now plus argv[1] bytes.  A regression
# fails the test; it does not make the kernel's OOM killer pick a process.
LIMITED_RING = """
import resource, sys
from seqlock_py import SeqRing
mapped = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:")][0]
limit = mapped + int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    # qemu-user maps the guest itself and ignores RLIMIT_AS.
    import mmap
    mmap.mmap(-1, int(sys.argv[1]) + (64 << 20)).close()
    print("limit not enforced")
except OSError:
    pass
capacity = int(sys.argv[2])
fields = dict(f.split("=") for f in sys.argv[3:])
try:
    print("size", SeqRing.buffer_size(capacity, **fields))
except BaseException as e:
    print("size raised", type(e).__name__, e)
try:
    SeqRing(capacity, **fields)
    print("made")
except BaseException as e:
    print("raised", type(e).__name__, e)
"""


def test_a_capacity_beyond_the_machines_memory_is_refused_naming_the_bytes():
    # Found: SeqRing(2**40, x="d") grew to 24 GB on 3.13t (mimalloc
    # reserves the 16 TiB, the layout zeroes it) and the OOM killer ended
    # it; 3.11 raised a MemoryError with an empty message.
    code, out = run_python(LIMITED_RING, str(1 << 30), str(2**40), "x=d")
    assert code == 0, out
    size = int(out.split("size ")[1].split()[0])
    assert f"raised MemoryError SeqRing({2**40}, ...) needs {size} bytes" in out, out
    assert "more than this machine's memory" in out, out


def test_a_ring_that_cannot_be_allocated_raises_memory_error_naming_the_bytes():
    # 1 GiB: within the machine's memory, beyond the child's address space.
    code, out = run_python(LIMITED_RING, str(256 << 20), str(2**26), "x=d")
    assert code == 0, out
    if "limit not enforced" in out:
        pytest.skip("this machine ignores RLIMIT_AS (qemu-user maps the guest itself)")
    size = int(out.split("size ")[1].split()[0])
    assert f"raised MemoryError cannot allocate the {size} bytes of SeqRing({2**26}, ...)" in out, out


def test_a_ring_whose_size_overflows_a_size_t_is_refused_naming_its_entries():
    # 2**40 entries of 2**24 + 8 bytes: more than 2**64.  buffer_size()
    # and SeqRing() raised an empty MemoryError.
    code, out = run_python(LIMITED_RING, str(1 << 30), str(2**40), f"x={2**21}d")
    assert code == 0, out
    assert f"size raised OverflowError a ring of {2**40} entries of {2**24 + 8} bytes" in out, out
    assert f"raised MemoryError a ring of {2**40} entries of {2**24 + 8} bytes takes more than" in out, out


# ---- the stress test: reader processes, one lapped on purpose ----

READER_CODE = r"""
import json, sys, time
from record_helpers import map_shared_memory
from seqlock_py import SeqRing
name, total, role = sys.argv[1], int(sys.argv[2]), sys.argv[3]
mem = map_shared_memory(name)
ring = SeqRing.attach(mem)
reader = ring.reader(oldest=True)
print("ready", flush=True)
delivered = torn = disorder = 0
last = -1
while reader.next_sequence < total:
    if role == "slow":
        # lapped on purpose: poll only once the writers are more than a
        # ring ahead (or done)
        while ring.head - reader.next_sequence <= ring.capacity and ring.head < total:
            time.sleep(0.0005)
    else:
        reader.wait(1.0)
    for seq, e in reader.poll():
        delivered += 1
        if seq <= last:
            disorder += 1
        last = seq
        if not (e.n == seq and e.x == seq * 0.5 and e.neg == -seq
                and e.v == (float(seq % 1000),) * 3):
            torn += 1
print("result", json.dumps({"delivered": delivered, "missed": reader.missed,
                            "torn": torn, "disorder": disorder, "last": last}),
      flush=True)
ring.close()
mem.close()
"""


def test_every_entry_is_delivered_in_order_or_counted_missed_across_processes():
    total, capacity = 20000, 64
    size = SeqRing.buffer_size(capacity, n="q", x="d", neg="q", v="3f")
    shm = shared_memory.SharedMemory(create=True, size=size)
    try:
        ring = SeqRing.create(shm.buf, capacity, n="q", x="d", neg="q", v="3f")
        with PythonProcess(READER_CODE, shm.name, total, "fast") as fast, \
                PythonProcess(READER_CODE, shm.name, total, "slow") as slow:
            fast.expect("ready")
            slow.expect("ready")
            for seq in range(total):
                assert ring.append(n=seq, x=seq * 0.5, neg=-seq,
                                   v=(seq % 1000,) * 3) == seq
                if seq % 32 == 31:
                    time.sleep(0.0002)  # the fast reader keeps up, mostly
            results = {}
            for role, child in (("fast", fast), ("slow", slow)):
                results[role] = json.loads(child.expect("result").split(" ", 1)[1])
                code, out = child.finish()
                assert code == 0, out
        for role, r in results.items():
            assert r["torn"] == 0 and r["disorder"] == 0, (role, r)
            assert r["delivered"] + r["missed"] == total, (role, r)
            assert r["last"] == total - 1, (role, r)
        assert results["slow"]["missed"] > 0, results
        print("ring stress:", results)
        ring.close()
    finally:
        shm.close()
        shm.unlink()


@pytest.mark.timeout(120)
def test_close_racing_every_call_from_other_threads_ends_each_with_value_error():
    """Held (3.11, 3.13t; the ASan build): 20 rounds of 6 threads calling
    append, poll, wait, wait_async, read_last(out=), reader() and the
    attributes of a ring in shared memory (close() unmaps it) and of one
    in process memory while the main thread closes it: every call returns
    or raises ValueError("the ring is closed") (RuntimeError: a reader in
    use by another thread), no crash, no thread left waiting."""
    np = pytest.importorskip("numpy")
    rng = random.Random(20)
    outcomes = {"ok": 0, "closed": 0, "busy": 0}
    count = threading.Lock()
    for round_ in range(20):
        if round_ % 2:
            ring = SeqRing(16, x="d", v="4q")
        else:
            ring = SeqRing.create_shared(f"seqlock_test_ring_{os.getpid()}_{uuid.uuid4().hex[:8]}", 16,
                                         x="d", v="4q")
        readers = [ring.reader(oldest=True) for _ in range(3)]
        out = np.zeros(16, ring.dtype)
        start = threading.Barrier(7)

        def worker(i):
            reader, mine = readers[i % 3], random.Random(i)
            start.wait()
            for _ in range(5000):
                k = mine.randrange(7)
                try:
                    if k == 0:
                        ring.append(x=1.0, v=(1, 2, 3, 4))
                    elif k == 1:
                        reader.poll()
                    elif k == 2:
                        reader.wait(0.001)
                    elif k == 3:
                        asyncio.run(reader.wait_async(0.001))
                    elif k == 4:
                        ring.read_last(8, out=out if i == 0 else None)
                    elif k == 5:
                        ring.reader()
                    else:
                        (ring.head, ring.recoveries, reader.missed, repr(ring))
                    key = "ok"
                except ValueError as exc:
                    assert "closed" in str(exc)
                    key = "closed"
                except RuntimeError as exc:
                    assert "in use by another thread" in str(exc)
                    key = "busy"
                with count:
                    outcomes[key] += 1
                if key == "closed":
                    return

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        start.wait()
        time.sleep(rng.uniform(0, 0.1))
        ring.close()
        for t in threads:
            t.join(LONG)
        assert not any(t.is_alive() for t in threads)
    print(outcomes)
    assert outcomes["closed"] == 20 * 6 or outcomes["ok"] > 0
    assert outcomes["closed"] > 0


@pytest.mark.skipif(sys.version_info < (3, 12), reason="__release_buffer__ is 3.12's (PEP 688)")
def test_a_reader_of_a_ring_the_collector_cleared_finds_it_closed():
    from test_record_close import CLEARED_CYCLES

    code = CLEARED_CYCLES + """
def ring_with_an_entry(e):
    ring = SeqRing.create(e, 4, x="d")
    ring.append(x=1.0)
    return ring

readers = cleared(ring_with_an_entry, SeqRing.buffer_size(4, x="d"),
                  keep=lambda ring: ring.reader(oldest=True))
for reader in readers:
    for call in (reader.poll, reader.wait):
        try:
            call()
        except ValueError as exc:
            assert "closed" in str(exc), exc
        else:
            raise AssertionError("a reader of a cleared ring read")
print("ok", len(readers))
"""
    assert_clean_exit(run_python(code, timeout=60), "a cleared ring's reader kept alive")


def test_poll_with_max_entries_returns_at_most_that_many_and_keeps_the_rest():
    ring = SeqRing(16, n="q")
    reader = ring.reader()
    for i in range(10):
        ring.append(n=i)
    assert [e.n for _, e in reader.poll(max_entries=3)] == [0, 1, 2]
    assert [e.n for _, e in reader.poll(4)] == [3, 4, 5, 6]
    assert [e.n for _, e in reader.poll()] == [7, 8, 9]
    assert reader.poll(max_entries=1) == []


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError), ("2", TypeError)])
def test_poll_refuses_a_max_entries_that_is_not_a_positive_int(bad, error):
    reader = SeqRing(4, n="q").reader()
    with pytest.raises(error, match="max_entries"):
        reader.poll(max_entries=bad)


def test_poll_takes_no_other_argument():
    reader = SeqRing(4, n="q").reader()
    with pytest.raises(TypeError):
        reader.poll(limit=2)
    with pytest.raises(TypeError):
        reader.poll(1, 2)


# ---- poll()'s batches and decoding ----


def test_poll_of_more_entries_than_its_first_batch_returns_them_all_in_order():
    ring = SeqRing(256, x="d", y="d", z="d", u="d", v="d")
    reader = ring.reader()
    for i in range(200):
        ring.append(x=i, y=-i, z=0.5 * i, u=i + 1, v=i - 1)
    got = reader.poll()
    assert [s for s, _ in got] == list(range(200))
    assert [tuple(e) for _, e in got] == [(i, -i, 0.5 * i, i + 1, i - 1) for i in range(200)]
    assert reader.poll() == [] and reader.missed == 0


def test_poll_of_entries_larger_than_the_stack_buffer_returns_each_whole():
    ring = SeqRing(8, a="100d", n="q")
    reader = ring.reader()
    for i in range(5):
        ring.append(a=[i + k for k in range(100)], n=i)
    got = reader.poll(max_entries=3) + reader.poll()
    assert [(s, e.n) for s, e in got] == [(i, i) for i in range(5)]
    assert all(e.a == tuple(float(s + k) for k in range(100)) for s, e in got)


def test_poll_with_max_entries_beyond_one_batch_stops_there_and_keeps_the_rest():
    ring = SeqRing(256, n="q")
    reader = ring.reader()
    for i in range(100):
        ring.append(n=i)
    assert [e.n for _, e in reader.poll(max_entries=30)] == list(range(30))
    assert [e.n for _, e in reader.poll(max_entries=1000)] == list(range(30, 100))


def test_a_lapped_reader_with_max_entries_skips_to_the_oldest_retained_entry():
    ring = SeqRing(16, n="q")
    reader = ring.reader()
    for i in range(40):
        ring.append(n=i)
    assert [e.n for _, e in reader.poll(max_entries=5)] == list(range(24, 29))
    assert reader.missed == 24
    assert [e.n for _, e in reader.poll()] == list(range(29, 40))


class _Floats(typing.NamedTuple):
    x: float
    y: float


@pytest.mark.parametrize("fields, values", [
    (dict(x="d", y="d", z="d"), dict(x=1.5, y=-2.0, z=0.1)),  # floats in consecutive words
    (dict(x="d"), dict(x=0.1)),
    (dict(x="d", n="q", y="d"), dict(x=1.5, n=-2, y=0.1)),    # an int among them
    (dict(f="f", x="d"), dict(f=0.1, x=0.1)),                 # float32, then padding
    (dict(v="3d", x="d"), dict(v=(1.0, 2.0, 3.0), x=4.0)),    # an array field
    (dict(x="d", ok="?", b="b"), dict(x=1.0, ok=True, b=-7)),
    (_Floats, dict(x=1.5, y=0.1)),                            # a declared class of floats
], ids=lambda v: v.__name__ if isinstance(v, type) else repr(v))
def test_poll_gives_each_entry_as_read_gives_a_record_of_the_same_fields(fields, values):
    declared = isinstance(fields, type)
    ring = SeqRing(4, fields) if declared else SeqRing(4, **fields)
    rec = SeqRecord(fields) if declared else SeqRecord(**fields)
    rec.update(**values)
    reader = ring.reader()
    ring.append(**values)
    [(seq, entry)] = reader.poll()
    snap = rec.read()
    assert seq == 0
    assert type(entry) is type(snap)
    assert tuple(entry) == tuple(snap)
    assert [type(v) for v in entry] == [type(v) for v in snap]


# ---- poll_one(): the next entry alone ----


def test_poll_one_returns_each_entry_in_order_then_none():
    ring = small_ring(8)
    reader = ring.reader()
    for i in range(3):
        ring.append(x=i * 0.5, n=i, v=(i, i + 1, i + 2))
    got = []
    while (entry := reader.poll_one()) is not None:
        got.append((reader.next_sequence - 1, entry))
    assert [(s, e.n, e.x) for s, e in got] == [(i, i, i * 0.5) for i in range(3)]
    assert reader.poll_one() is None and reader.poll() == []


def test_poll_one_gives_the_entry_poll_gives():
    ring = SeqRing(8, _Floats)
    one, many = ring.reader(), ring.reader()
    ring.append(x=1.5, y=0.1)
    entry = one.poll_one()
    [(seq, same)] = many.poll()
    assert type(entry) is type(same) is _Floats and entry == same and seq == one.next_sequence - 1


def test_a_lapped_poll_one_skips_to_the_oldest_retained_entry_counting_the_rest():
    ring = small_ring(4)
    reader = ring.reader()
    for i in range(10):
        ring.append(n=i)
    assert reader.poll_one().n == 6
    assert (reader.missed, reader.next_sequence) == (6, 7)
    assert [e.n for _, e in reader.poll()] == [7, 8, 9]


def test_poll_one_of_an_entry_larger_than_the_stack_buffer_returns_it_whole():
    ring = SeqRing(4, a="100d", n="q")
    reader = ring.reader()
    ring.append(a=[float(k) for k in range(100)], n=7)
    entry = reader.poll_one()
    assert entry.n == 7 and entry.a == tuple(float(k) for k in range(100))


def test_poll_one_of_a_rewound_ring_raises_and_keeps_raising():
    buf = mmap.mmap(-1, SeqRing.buffer_size(4, x="d"))
    ring = SeqRing.create(buf, 4, x="d")
    reader = ring.reader()
    for i in range(3):
        ring.append(x=i)
    reader.poll()
    ring = SeqRing.create(buf, 4, overwrite=True, x="d")
    with pytest.raises(RuntimeError, match="rewound"):
        reader.poll_one()
    for i in range(5):
        ring.append(x=i)
    with pytest.raises(RuntimeError, match="rewound"):
        reader.poll_one()


def test_poll_one_of_a_closed_ring_raises_value_error():
    ring = small_ring(4)
    reader = ring.reader()
    ring.append(n=1)
    ring.close()
    with pytest.raises(ValueError, match="closed"):
        reader.poll_one()


def test_poll_one_takes_no_argument():
    reader = small_ring(4).reader()
    with pytest.raises(TypeError):
        reader.poll_one(1)
    with pytest.raises(TypeError):
        reader.poll_one(max_entries=1)
