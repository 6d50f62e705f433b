"""Every public entry point, given bad input, raises the exact exception
documented for it, and leaves no lock held and no sequence odd.

One row per misuse: (name, call, expected exception).  ``call`` receives a
fresh SeqLock and a fresh SeqRecord(x="d", n="q", u="Q", flag="?", v="4d").
"""

import array
import copy
import pickle
import threading

import pytest

from seqlock_py import SeqLock, SeqRecord

FIELDS = dict(x="d", n="q", u="Q", flag="?", v="4d")


def from_another_thread(fn):
    """Run fn in another thread; re-raise what it raised here."""
    raised = []

    def run():
        try:
            fn()
        except BaseException as e:
            raised.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join(30)
    if raised:
        raise raised[0]


def while_writing(lock, fn):
    with lock:
        fn()


def while_writing_record(rec, fn):
    with rec.write():
        fn()


def writer_used_after_its_section(rec):
    with rec.write() as w:
        pass
    w.x = 1.0


def writer_used_by_another_thread(rec):
    with rec.write() as w:
        from_another_thread(lambda: setattr(w, "x", 1.0))


def array_index(rec, i):
    with rec.write() as w:
        w.v[i] = 1.0


CASES = [
    # ---- SeqLock: construction and settings
    ("SeqLock(positional)", lambda lock, rec: SeqLock(1), TypeError),
    ("SeqLock(unknown=)", lambda lock, rec: SeqLock(x=1), TypeError),
    ("SeqLock(max_retries=-1)", lambda lock, rec: SeqLock(max_retries=-1), ValueError),
    ("SeqLock(max_retries='1')", lambda lock, rec: SeqLock(max_retries="1"), TypeError),
    ("max_retries = 2**40", lambda lock, rec: setattr(lock, "max_retries", 2**40), OverflowError),
    ("del max_retries", lambda lock, rec: delattr(lock, "max_retries"), TypeError),
    ("sequence = 2", lambda lock, rec: setattr(lock, "sequence", 2), AttributeError),
    ("pickle SeqLock", lambda lock, rec: pickle.dumps(lock), TypeError),
    ("copy SeqLock", lambda lock, rec: copy.copy(lock), TypeError),
    ("deepcopy SeqLock", lambda lock, rec: copy.deepcopy(lock), TypeError),
    # ---- SeqLock: timeouts
    ("write(timeout=-2)", lambda lock, rec: lock.write(timeout=-2), ValueError),
    ("write(timeout='1')", lambda lock, rec: lock.write(timeout="1"), TypeError),
    ("write(timeout=nan)", lambda lock, rec: lock.write(timeout=float("nan")), ValueError),
    ("write(timeout=1e300)", lambda lock, rec: lock.write(timeout=1e300), OverflowError),
    ("write(1, 2)", lambda lock, rec: lock.write(1, 2), TypeError),
    ("acquire_write(timeout=-0.5)", lambda lock, rec: lock.acquire_write(timeout=-0.5), ValueError),
    ("acquire_write(False, 1)", lambda lock, rec: lock.acquire_write(False, 1), ValueError),
    ("acquire_write(timeout=None)", lambda lock, rec: lock.acquire_write(timeout=None), TypeError),
    ("acquire_write(1, 2, 3)", lambda lock, rec: lock.acquire_write(1, 2, 3), TypeError),
    # ---- SeqLock: readers
    ("read()", lambda lock, rec: lock.read(), TypeError),
    ("read(non-callable)", lambda lock, rec: lock.read(42), TypeError),
    ("read_retry('0')", lambda lock, rec: lock.read_retry("0"), TypeError),
    ("read_retry(-2)", lambda lock, rec: lock.read_retry(-2), ValueError),
    ("read_retry(2**64)", lambda lock, rec: lock.read_retry(2**64), OverflowError),
    ("read_retry()", lambda lock, rec: lock.read_retry(), TypeError),
    ("read_begin(1)", lambda lock, rec: lock.read_begin(1), TypeError),
    # ---- SeqLock: re-entrancy and cross-thread misuse
    ("release_write unlocked", lambda lock, rec: lock.release_write(), RuntimeError),
    ("nested with", lambda lock, rec: while_writing(lock, lambda: lock.acquire_write()), RuntimeError),
    ("read inside own write", lambda lock, rec: while_writing(lock, lambda: lock.read(int)), RuntimeError),
    ("read_begin inside own write", lambda lock, rec: while_writing(lock, lock.read_begin), RuntimeError),
    (
        "release_write by another thread",
        lambda lock, rec: while_writing(lock, lambda: from_another_thread(lock.release_write)),
        RuntimeError,
    ),
    # ---- SeqRecord: construction
    ("SeqRecord()", lambda lock, rec: SeqRecord(), TypeError),
    ("SeqRecord(positional)", lambda lock, rec: SeqRecord("d"), TypeError),
    ("format 'z'", lambda lock, rec: SeqRecord(x="z"), ValueError),
    ("format '0d'", lambda lock, rec: SeqRecord(x="0d"), ValueError),
    ("format '4l'", lambda lock, rec: SeqRecord(x="4l"), ValueError),
    ("format 'dd'", lambda lock, rec: SeqRecord(x="dd"), ValueError),
    ("format 8", lambda lock, rec: SeqRecord(x=8), TypeError),
    ("format '99999999d'", lambda lock, rec: SeqRecord(x="99999999d"), ValueError),
    ("field name 'update'", lambda lock, rec: SeqRecord(update="d"), ValueError),
    ("field name 'a;b'", lambda lock, rec: SeqRecord(**{"a;b": "d"}), ValueError),
    ("pickle SeqRecord", lambda lock, rec: pickle.dumps(rec), TypeError),
    ("buffer_size(positional)", lambda lock, rec: SeqRecord.buffer_size(1), TypeError),
    # ---- SeqRecord: shared buffers
    ("create(too small)", lambda lock, rec: SeqRecord.create(bytearray(8), **FIELDS), ValueError),
    ("create(read-only)", lambda lock, rec: SeqRecord.create(bytes(4096), **FIELDS), BufferError),
    ("create(not a buffer)", lambda lock, rec: SeqRecord.create(42, **FIELDS), TypeError),
    ("create(misaligned)", lambda lock, rec: SeqRecord.create(memoryview(bytearray(4096))[1:], **FIELDS), ValueError),
    ("create() no buffer", lambda lock, rec: SeqRecord.create(**FIELDS), TypeError),
    ("attach(empty)", lambda lock, rec: SeqRecord.attach(bytearray(4096), **FIELDS), ValueError),
    # ---- SeqRecord: readers
    ("rec['nope']", lambda lock, rec: rec["nope"], KeyError),
    ("rec[0]", lambda lock, rec: rec[0], KeyError),
    ("get()", lambda lock, rec: rec.get(), TypeError),
    ("get(a, b, c)", lambda lock, rec: rec.get("x", 1, 2), TypeError),
    ("read_into(too small)", lambda lock, rec: rec.read_into(bytearray(3)), ValueError),
    ("read_into(read-only)", lambda lock, rec: rec.read_into(bytes(256)), BufferError),
    ("read_into(not a buffer)", lambda lock, rec: rec.read_into([0.0] * 16), TypeError),
    ("read_into(small buffer)", lambda lock, rec: rec.read_into(bytearray(8)), ValueError),
    ("read_into(array of float64)", lambda lock, rec: rec.read_into(array.array("d", [0.0] * 16)), TypeError),
    ("update inside own write", lambda lock, rec: while_writing_record(rec, lambda: rec.update(x=2.0)), RuntimeError),
    # ---- SeqRecord: writers
    ("update(positional)", lambda lock, rec: rec.update(1), TypeError),
    ("update(unknown)", lambda lock, rec: rec.update(nope=1), TypeError),
    ("update(x='a')", lambda lock, rec: rec.update(x="a"), TypeError),
    ("update(n=1.5)", lambda lock, rec: rec.update(n=1.5), TypeError),
    ("update(n=2**63)", lambda lock, rec: rec.update(n=2**63), OverflowError),
    ("update(u=-1)", lambda lock, rec: rec.update(u=-1), OverflowError),
    ("update(flag='yes')", lambda lock, rec: rec.update(flag="yes"), TypeError),
    ("update(v=[1])", lambda lock, rec: rec.update(v=[1.0]), ValueError),
    ("update(v='abcd')", lambda lock, rec: rec.update(v="abcd"), TypeError),
    ("update(v=5)", lambda lock, rec: rec.update(v=5), TypeError),
    ("update(good, bad)", lambda lock, rec: rec.update(x=1.0, n="bad"), TypeError),
    ("write(timeout=-3)", lambda lock, rec: rec.write(timeout=-3), ValueError),
    ("nested record write", lambda lock, rec: while_writing_record(rec, lambda: rec.update(x=1.0)), RuntimeError),
    ("writer after its section", lambda lock, rec: writer_used_after_its_section(rec), RuntimeError),
    ("writer from another thread", lambda lock, rec: writer_used_by_another_thread(rec), RuntimeError),
    ("w.nope = 1", lambda lock, rec: while_writing_record(rec, lambda: None) or setattr(rec.write(), "nope", 1), AttributeError),
    ("w.v[4] = 1", lambda lock, rec: array_index(rec, 4), IndexError),
    ("w.v[-5] = 1", lambda lock, rec: array_index(rec, -5), IndexError),
]


@pytest.mark.parametrize("name, call, error", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_and_leaves_nothing_held(name, call, error):
    lock, rec = SeqLock(), SeqRecord(**FIELDS)
    rec.update(x=1.5, n=7)
    before = rec.read()
    with pytest.raises(error):
        call(lock, rec)
    assert not lock.locked() and lock.sequence % 2 == 0
    assert not rec.locked() and rec.sequence % 2 == 0
    assert rec.read() == before  # a failed call never writes


# ---- one converter per kind of argument: the same errors everywhere ----

SEQUENCE_TAKERS = {
    "SeqLock.read_retry": lambda lock, rec, seq: lock.read_retry(seq),
    "SeqLock.wait": lambda lock, rec, seq: lock.wait(seq, 0),
    "SeqRecord.wait": lambda lock, rec, seq: rec.wait(seq, 0),
    "SeqLock.wait_async": lambda lock, rec, seq: lock.wait_async(seq, 0),
    "SeqRecord.wait_async": lambda lock, rec, seq: rec.wait_async(seq, 0),
}


@pytest.mark.parametrize(
    "seq, error",
    [("0", TypeError), (1.0, TypeError), (-2, ValueError), (2**64, OverflowError)],
    ids=["str", "float", "negative", "2**64"],
)
@pytest.mark.parametrize("taker", SEQUENCE_TAKERS, ids=list(SEQUENCE_TAKERS))
def test_every_call_taking_a_sequence_number_refuses_a_bad_one_alike(taker, seq, error):
    lock, rec = SeqLock(), SeqRecord(**FIELDS)
    method = taker.split(".")[1]
    with pytest.raises(error, match=rf"^{method}\(\) argument 'seq' must be "):
        SEQUENCE_TAKERS[taker](lock, rec, seq)
