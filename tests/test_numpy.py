"""SeqRecord with numpy, which it does not depend on: rec.dtype, read_into()
a structured array, array fields written from buffers by one copy, write
sections' array fields as buffers, one field read into an ndarray.

One behaviour per test; the test names read as the specification.  Skips
if numpy is missing (test_without_numpy_everything_else_works runs a child
with numpy blocked).
"""

from __future__ import annotations

import array
import subprocess
import sys
import textwrap
from multiprocessing import shared_memory

import pytest

from seqlock_py import SeqRecord

np = pytest.importorskip("numpy")

pytestmark = pytest.mark.timeout(60)

STATE = {"n": "q", "state": "1000d", "pose": "(3,3)d", "gain": "f", "ok": "?"}


@pytest.fixture
def rec():
    return SeqRecord(**STATE)


# ---- rec.dtype ----


def test_dtype_has_the_record_layout(rec):
    dtype = rec.dtype
    assert dtype.names == tuple(STATE)
    assert dtype.itemsize == rec.nbytes
    assert [dtype.fields[name][1] for name in dtype.names] == [0, 8, 8008, 8080, 8084]
    assert dtype["state"].shape == (1000,) and dtype["pose"].shape == (3, 3)
    assert dtype["gain"] == np.float32 and dtype["n"] == np.int64


@pytest.mark.parametrize(
    "fields",
    [
        {"a": "?", "b": "d"},
        {"a": "b", "b": "h", "c": "i", "d": "q", "e": "B", "f": "H", "g": "I", "h": "Q"},
        {"a": "8?", "b": "(2,3,4)f", "c": "3H"},
    ],
)
def test_dtype_reads_what_struct_reads(fields):
    import struct

    rec = SeqRecord(**fields)
    raw = bytearray(rec.nbytes)
    rec.read_into(raw)
    assert rec.dtype.itemsize == struct.calcsize(rec.format)
    assert np.frombuffer(raw, rec.dtype).shape == (1,)


def test_numpy_cannot_parse_rec_format_which_is_why_dtype_exists(rec):
    with pytest.raises(TypeError):
        np.dtype(rec.format)


# ---- read_into() ----


def test_read_into_fills_a_structured_array_of_rec_dtype(rec):
    rec.update(n=7, state=np.arange(1000.0), pose=np.eye(3), gain=0.5, ok=True)
    out = np.zeros((), rec.dtype)
    assert rec.read_into(out) == rec.sequence
    assert out["n"] == 7 and out["state"][999] == 999.0 and out["gain"] == 0.5
    assert (out["pose"] == np.eye(3)).all() and out["ok"]


def test_read_into_fills_one_element_of_an_equal_handwritten_dtype(rec):
    rec.update(n=-3)
    dtype = np.dtype(
        {
            "names": list(STATE),
            "formats": ["i8", ("f8", (1000,)), ("f8", (3, 3)), "f4", "?"],
            "offsets": [0, 8, 8008, 8080, 8084],
            "itemsize": rec.nbytes,
        }
    )
    out = np.zeros(1, dtype)
    rec.read_into(out)
    assert out["n"][0] == -3


def test_read_into_refuses_a_float_array_for_a_mixed_record():
    rec = SeqRecord(n="q", x="1000d")
    with pytest.raises(TypeError, match="rec.dtype"):
        rec.read_into(np.empty(1002))


def test_read_into_refuses_a_structured_array_with_other_names(rec):
    other = np.dtype({"names": ["m", *list(STATE)[1:]], "formats": [rec.dtype[i] for i in range(5)],
                      "offsets": [0, 8, 8008, 8080, 8084], "itemsize": rec.nbytes})
    with pytest.raises(TypeError, match="rec.dtype"):
        rec.read_into(np.zeros(1, other))


def test_read_into_refuses_a_strided_array(rec):
    with pytest.raises(ValueError, match="C-contiguous"):
        rec.read_into(np.zeros(4, rec.dtype)[::2])


@pytest.mark.parametrize("field", [None, "state"])
def test_read_into_refuses_a_buffer_inside_the_records_own_memory(field):
    # np.frombuffer(shm.buf): a view of the record itself, not a copy of it;
    # copying a snapshot there would overwrite the header, lock or copies
    # every process reads.
    fields = {"n": "q", "state": "4d"}
    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**fields))
    try:
        with SeqRecord.create(shm.buf, **fields) as rec:
            rec.update(n=1, state=np.arange(4.0))
            before = bytes(shm.buf)
            mine = np.frombuffer(shm.buf, np.uint8) if field is None else np.frombuffer(shm.buf, np.float64, 4)
            try:
                with pytest.raises(ValueError, match="has open"):
                    rec.read_into(mine, field=field)
            finally:
                del mine
            assert bytes(shm.buf) == before
        with SeqRecord.attach(shm.buf) as again:
            assert again.read() == (1, (0.0, 1.0, 2.0, 3.0))
    finally:
        shm.close()
        shm.unlink()



def test_read_into_refuses_a_buffer_inside_another_open_records_memory():
    fields = {"state": "4d"}
    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**fields))
    try:
        with SeqRecord.create(shm.buf, **fields) as theirs:
            theirs.update(state=np.arange(4.0))
            before = bytes(shm.buf)
            mine = SeqRecord(**fields)
            inside = np.frombuffer(shm.buf, np.float64, 4)
            try:
                with pytest.raises(ValueError, match="has open"):
                    mine.read_into(inside, field="state")
            finally:
                del inside
            assert bytes(shm.buf) == before
    finally:
        shm.close()
        shm.unlink()


def test_read_into_refuses_a_buffer_inside_an_open_rings_memory():
    from seqlock_py import SeqRing

    shm = shared_memory.SharedMemory(create=True, size=SeqRing.buffer_size(4, x="d"))
    try:
        with SeqRing.create(shm.buf, 4, x="d") as ring:
            ring.append(x=1.0)
            before = bytes(shm.buf)
            rec = SeqRecord(x="d")
            inside = np.frombuffer(shm.buf, np.uint8, rec.nbytes)
            try:
                with pytest.raises(ValueError, match="has open"):
                    rec.read_into(inside)
            finally:
                del inside
            assert bytes(shm.buf) == before
            assert ring.append(x=2.0) == 1
    finally:
        shm.close()
        shm.unlink()


def test_a_closed_records_memory_takes_copies_like_any_buffer():
    fields = {"state": "4d"}
    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**fields))
    try:
        SeqRecord.create(shm.buf, **fields).close()
        rec = SeqRecord(**fields)
        rec.update(state=np.arange(4.0))
        inside = np.frombuffer(shm.buf, np.float64, 4)
        try:
            rec.read_into(inside, field="state")
            assert inside.tolist() == [0.0, 1.0, 2.0, 3.0]
        finally:
            del inside
    finally:
        shm.close()
        shm.unlink()


def test_read_into_takes_raw_bytes_as_before(rec):
    rec.update(n=11)
    out = np.zeros(rec.nbytes, np.uint8)
    rec.read_into(out)
    assert out.view(rec.dtype)["n"][0] == 11


# ---- one field into an ndarray ----


def test_read_into_a_field_fills_a_preallocated_array(rec):
    rec.update(state=np.arange(1000.0) * 2)
    out = np.empty(1000)
    assert rec.read_into(out, field="state") == rec.sequence
    assert out[10] == 20.0


def test_read_into_a_shaped_field_fills_an_array_of_its_shape(rec):
    rec.update(pose=np.arange(9.0).reshape(3, 3))
    out = np.empty((3, 3))
    rec.read_into(out, field="pose")
    assert out[2, 1] == 7.0


@pytest.mark.parametrize(
    "out, error",
    [
        (np.empty(1000, np.float32), TypeError),
        (np.empty(999), ValueError),
        (np.empty((10, 100)), ValueError),
        (np.empty(2000)[::2], ValueError),
    ],
    ids=["dtype", "length", "shape", "stride"],
)
def test_read_into_a_field_refuses_the_wrong_array(rec, out, error):
    with pytest.raises(error, match="field 'state'"):
        rec.read_into(out, field="state")


def test_read_into_an_unknown_field_raises_key_error(rec):
    with pytest.raises(KeyError):
        rec.read_into(np.empty(1000), field="nope")


# ---- writing arrays from buffers ----


def test_update_takes_an_ndarray_of_the_field_dtype(rec):
    rec.update(state=np.full(1000, 1.5), pose=np.eye(3))
    assert rec["state"][0] == 1.5 and rec["pose"][1] == (0.0, 1.0, 0.0)


@pytest.mark.parametrize(
    "value, error",
    [
        (np.zeros(1000, np.float32), TypeError),
        (np.zeros(1000, np.int64), TypeError),
        (np.zeros(999), ValueError),
        (np.zeros((10, 100)), ValueError),
        (np.zeros(2000)[::2], ValueError),
    ],
    ids=["float32", "int64", "length", "ndim", "stride"],
)
def test_update_refuses_the_wrong_array_and_writes_nothing(rec, value, error):
    with pytest.raises(error, match="field 'state'"):
        rec.update(n=1, state=value)
    assert rec.sequence == 0 and rec["n"] == 0


def test_a_shaped_field_takes_a_buffer_of_its_shape_only(rec):
    with pytest.raises(ValueError, match=r"shape \(3, 3\)"):
        rec.update(pose=np.zeros(9))


def test_a_shaped_field_takes_np_eye():
    rec = SeqRecord(m="9d")
    with pytest.raises(ValueError, match=r"shape \(3, 3\)|\(9,\)"):
        rec.update(m=np.eye(3))
    shaped = SeqRecord(m="(3,3)d")
    shaped.update(m=np.eye(3))
    assert shaped["m"][2] == (0.0, 0.0, 1.0)


def test_a_list_still_writes_an_array_field(rec):
    rec.update(state=[float(i) for i in range(1000)])
    assert rec["state"][-1] == 999.0


def test_array_array_of_the_element_type_is_a_buffer_too():
    rec = SeqRecord(v="4i")
    rec.update(v=array.array("i", [1, -2, 3, -4]))
    assert rec["v"] == (1, -2, 3, -4)


# ---- write sections ----


def test_assigning_an_ndarray_in_a_write_section(rec):
    with rec.write() as w:
        w.state = np.ones(1000)
        w.pose[:] = np.eye(3) * 2
    assert rec["state"][5] == 1.0 and rec["pose"][0][0] == 2.0


def test_slices_of_an_array_field_read_and_write(rec):
    with rec.write() as w:
        w.state[2:5] = np.array([1.0, 2.0, 3.0])
        w.state[10:13] = [4.0, 5.0, 6.0]
        w.state[-1] = 9.0
        assert w.state[1:5] == (0.0, 1.0, 2.0, 3.0)
        assert len(w.state) == 1000 and w.state.tolist()[-1] == 9.0
        assert list(w.state)[10:13] == [4.0, 5.0, 6.0]
    assert rec["state"][2:5] == (1.0, 2.0, 3.0)


def test_a_slice_of_the_wrong_length_is_refused(rec):
    with rec.write() as w, pytest.raises(ValueError):
        w.state[0:3] = [1.0, 2.0]


def test_a_shaped_field_reads_as_nested_lists_in_a_section(rec):
    rec.update(pose=np.eye(3))
    with rec.write() as w:
        assert w.pose.tolist() == np.eye(3).tolist()
        assert len(w.pose) == 3
        with pytest.raises(TypeError, match="numpy.asarray"):
            w.pose[0]


def test_an_array_field_exports_a_writable_buffer_in_a_section(rec):
    with rec.write() as w:
        view = np.asarray(w.state)
        assert view.dtype == np.float64 and view.shape == (1000,)
        view[:] = 3.0
        assert w.state[7] == 3.0  # the section sees it at once
        pose = np.asarray(w.pose)
        assert pose.shape == (3, 3)
        pose[1, 1] = 5.0
    assert rec["state"][999] == 3.0 and rec["pose"][1][1] == 5.0


def test_an_exported_view_cannot_write_the_record_after_the_section(rec):
    with rec.write() as w:
        view = np.asarray(w.state)
    sequence = rec.sequence
    view[:] = 42.0  # a copy nothing reads any more
    assert rec["state"][0] == 0.0 and rec.sequence == sequence


def test_an_exported_view_is_rolled_back_with_its_section(rec):
    with pytest.raises(KeyError):
        with rec.write() as w:
            np.asarray(w.state)[:] = 7.0
            raise KeyError
    assert rec["state"][0] == 0.0


def _owners(view):
    """Every object behind a buffer: view.obj, its .obj, and so on."""
    found, obj = [], view
    while (obj := getattr(obj, "obj", None)) is not None and len(found) < 8:
        found.append(obj)
    return found


def test_a_sections_exported_copy_is_no_object_whose_size_can_change(rec):
    with rec.write() as w:
        view = memoryview(w.state)
        owners = _owners(view)
        assert owners, "the view names what exports it"
        exporter = owners[-1]  # what owns the memory, behind any views
        assert not isinstance(exporter, (bytearray, array.array, memoryview)), exporter
        assert not hasattr(exporter, "clear") and not hasattr(exporter, "__delitem__"), exporter
        view.release()


RESIZE_THE_SECTIONS_COPY = textwrap.dedent(
    """
    from seqlock_py import SeqRecord
    rec = SeqRecord(state="1000d")
    rec.update(state=[float(i) for i in range(1000)])
    with rec.write() as w:
        view = memoryview(w.state)
        owners, obj = [], view
        while (obj := getattr(obj, "obj", None)) is not None and len(owners) < 8:
            owners.append(obj)
        view.release()
        for owner in owners:  # let go of every view in the chain
            if isinstance(owner, memoryview):
                owner.release()
        for owner in owners:  # then shrink whatever can be shrunk
            for shrink in (lambda o: o.clear(), lambda o: o.__delitem__(slice(None))):
                try:
                    shrink(owner)
                except Exception:
                    pass
        w.state[999] = 2.5
    state = rec["state"]
    assert state[:999] == tuple(float(i) for i in range(999)), state[:4]
    assert state[999] == 2.5
    print("ok", flush=True)
    """
)


def test_shrinking_what_a_sections_view_exports_cannot_corrupt_the_record():
    """Issue 27, defect 1: the section's staging copy was a bytearray,
    reachable as memoryview(w.state).obj.obj; shrunk or cleared, the
    section copied the field's declared size into and out of it (a heap
    overflow, a SIGSEGV, heap bytes committed to the record)."""
    done = subprocess.run([sys.executable, "-P", "-c", RESIZE_THE_SECTIONS_COPY],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])


def test_an_array_field_exports_no_buffer_outside_its_section(rec):
    with rec.write() as w:
        field = w.state
    with pytest.raises(RuntimeError, match="not open"):
        memoryview(field)


def test_element_writes_and_the_exported_view_agree(rec):
    with rec.write() as w:
        view = np.asarray(w.state)
        w.state[0] = 1.0
        w.update(state=np.full(1000, 2.0))
        assert view[0] == 2.0
        view[1] = 3.0
    assert rec["state"][:2] == (2.0, 3.0)


def test_a_bool_array_field_exports_bools():
    rec = SeqRecord(flags="8?")
    with rec.write() as w:
        view = np.asarray(w.flags)
        assert view.dtype == np.bool_
        view[3] = True
    assert rec["flags"][3] is True



@pytest.mark.parametrize(
    "value",
    [np.bool_(True), np.zeros(3).any() | True, np.ones(2, np.bool_)[0], np.array(True)],
    ids=["np.bool_", "arr.any()", "an element of a bool array", "a 0-d bool array"],
)
def test_a_bool_field_takes_numpys_bool(value):
    # As 'd' and 'q' fields take numpy's floats and ints.
    rec = SeqRecord(ok="?", flags="2?")
    rec.update(ok=value, flags=(value, False))
    assert rec.read() == (True, (True, False))
    rec.update(ok=np.bool_(False))
    assert rec["ok"] is False


def test_a_bool_field_takes_an_element_of_its_own_array():
    rec = SeqRecord(ok="?", flags="2?")
    rec.update(flags=(False, True))
    snap = np.zeros((), rec.dtype)
    rec.read_into(snap)
    rec.update(ok=snap["flags"][1])
    assert rec["ok"] is True


@pytest.mark.parametrize("value", [np.array([True, False]), np.uint8(1), b"\x01"])
def test_a_bool_field_refuses_what_is_not_one_bool(value):
    rec = SeqRecord(ok="?")
    with pytest.raises(TypeError, match="bool"):
        rec.update(ok=value)
    assert rec.sequence == 0


# ---- without numpy ----


def test_without_numpy_everything_else_works():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["numpy"] = None
        from seqlock_py import SeqRecord
        rec = SeqRecord(n="q", v="4d", m="(2,2)f", b="8?")
        rec.update(n=1, v=[1.0, 2.0, 3.0, 4.0], m=[[1, 2], [3, 4]])
        with rec.write() as w:
            w.v[1:3] = [5.0, 6.0]
            w.b[0] = True
            view = memoryview(w.v)
            assert view.format == "d" and view.shape == (4,)
        raw = bytearray(rec.nbytes)
        rec.read_into(raw)
        out = memoryview(bytearray(16)).cast("f", (2, 2))
        rec.read_into(out, field="m")
        assert out.tolist() == [[1.0, 2.0], [3.0, 4.0]]
        assert rec.read()[1] == (1.0, 5.0, 6.0, 4.0)
        try:
            rec.dtype
        except ImportError:
            print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
