"""SeqRecord's element types and shapes: f, b h i, B H I, ? arrays, counts of
every kind, and shapes such as "(3,3)d", laid out and packed as ``struct``
does with rec.format.

One behaviour per test; the test names read as the specification.
"""

from __future__ import annotations

import array
import math
import struct
from multiprocessing import shared_memory

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqlock_py import SeqRecord

pytestmark = pytest.mark.timeout(120)

RANGES = {
    "b": (-(2**7), 2**7 - 1),
    "B": (0, 2**8 - 1),
    "h": (-(2**15), 2**15 - 1),
    "H": (0, 2**16 - 1),
    "i": (-(2**31), 2**31 - 1),
    "I": (0, 2**32 - 1),
    "q": (-(2**63), 2**63 - 1),
    "Q": (0, 2**64 - 1),
}
KINDS = ["d", "f", "?", *RANGES]


def values_of(kind):
    """A strategy for the values a field of this kind holds exactly."""
    if kind == "d":
        return st.floats(allow_nan=False)
    if kind == "f":
        return st.floats(width=32, allow_nan=False)
    if kind == "?":
        return st.booleans()
    lo, hi = RANGES[kind]
    return st.integers(lo, hi)


def flat(value):
    if isinstance(value, tuple):
        return [x for item in value for x in flat(item)]
    return [value]


def shaped(items, shape):
    """items (flat) as nested tuples of shape, numpy's tolist() order."""
    if len(shape) == 1:
        return tuple(items)
    step = len(items) // shape[0]
    return tuple(shaped(items[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0]))


# ---- layout ----


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_lays_out_as_struct_calcsize(kind):
    rec = SeqRecord(flag="?", x=kind, n="b", y=kind)
    assert rec.nbytes == struct.calcsize(rec.format)


@pytest.mark.parametrize("kind", KINDS)
def test_counts_of_every_kind_are_arrays(kind):
    rec = SeqRecord(v=f"3{kind}")
    assert rec.format == f"3{kind}"
    assert len(rec["v"]) == 3


def test_a_shape_flattens_to_its_count_in_format():
    rec = SeqRecord(flag="?", m="(3,3)d", t="(2,3,4)f")
    assert rec.format == "?9d24f"
    assert rec.nbytes == struct.calcsize("?9d24f")


def test_a_shaped_field_reads_as_nested_tuples_of_its_shape():
    rec = SeqRecord(m="(2,3)q")
    rec.update(m=[[1, 2, 3], [4, 5, 6]])
    assert rec["m"] == ((1, 2, 3), (4, 5, 6))


def test_a_one_dimensional_shape_is_a_count():
    assert SeqRecord(v="(4,)d").format == "4d"
    assert SeqRecord(v="(4)d")["v"] == (0.0,) * 4


def test_shape_spellings_attach_alike():
    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(m="(3,3)d"))
    try:
        rec = SeqRecord.create(shm.buf, m="(3, 3)d")
        other = SeqRecord.attach(shm.buf, m="(3,3)d")
        assert other.format == rec.format == "9d"
        del rec, other
    finally:
        shm.close()
        shm.unlink()


def test_attach_without_fields_reads_new_kinds_and_shapes():
    fields = {"m": "(3,3)d", "f": "f", "u": "4B", "flags": "8?", "i": "i"}
    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**fields))
    try:
        rec = SeqRecord.create(shm.buf, **fields)
        rec.update(m=[[1, 0, 0], [0, 2, 0], [0, 0, 3]], u=[1, 2, 3, 255], i=-7)
        other = SeqRecord.attach(shm.buf)
        assert other.fields == tuple(fields)
        assert other.format == rec.format
        assert other.read() == rec.read()
        del rec, other
    finally:
        shm.close()
        shm.unlink()


def test_a_bad_code_names_the_accepted_forms():
    with pytest.raises(ValueError, match=r"'\(3,3\)d'") as info:
        SeqRecord(x="l")
    assert "'16d'" in str(info.value) and "'B'" in str(info.value)


# ---- range checks ----


@pytest.mark.parametrize("kind", list(RANGES))
def test_an_integer_out_of_range_raises_overflow_error(kind):
    lo, hi = RANGES[kind]
    rec = SeqRecord(x=kind)
    for bad in (lo - 1, hi + 1):
        with pytest.raises(OverflowError, match="out of range for field 'x'"):
            rec.update(x=bad)
    assert rec.sequence == 0


def test_an_out_of_range_element_writes_nothing():
    rec = SeqRecord(v="4B")
    with pytest.raises(OverflowError, match=r"uint8: 0\.\.255"):
        rec.update(v=[1, 2, 300, 4])
    assert rec["v"] == (0, 0, 0, 0)


def test_a_float32_too_large_raises_overflow_error_as_struct_does():
    rec = SeqRecord(x="f")
    with pytest.raises(OverflowError, match="float32"):
        rec.update(x=1e300)
    with pytest.raises(OverflowError):
        struct.pack("<f", 1e300)  # struct's standard 'f' (and native 'f' from 3.12)


def test_a_float32_keeps_infinity_and_nan():
    rec = SeqRecord(x="f", y="f")
    rec.update(x=math.inf, y=math.nan)
    x, y = rec.read()
    assert x == math.inf and math.isnan(y)


def test_a_float32_rounds_as_struct_does():
    rec = SeqRecord(x="f")
    rec.update(x=0.1)
    assert rec["x"] == struct.unpack("f", struct.pack("f", 0.1))[0]


def test_a_small_int_field_refuses_a_float():
    with pytest.raises(TypeError, match="takes an int"):
        SeqRecord(x="h").update(x=1.5)


# ---- shapes written from sequences ----


def test_a_shaped_field_refuses_a_flat_sequence():
    rec = SeqRecord(m="(2,2)d")
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        rec.update(m=[1.0, 2.0, 3.0, 4.0, 5.0])
    with pytest.raises(TypeError, match="nested"):
        rec.update(m=[1.0, 2.0])


def test_a_shaped_field_refuses_a_ragged_sequence():
    rec = SeqRecord(m="(2,2)d")
    with pytest.raises(ValueError, match=r"shape \(2, 2\)"):
        rec.update(m=[[1.0, 2.0], [3.0]])
    assert rec.sequence == 0


# ---- round trips: what is written is read, as struct packs it ----


@st.composite
def layouts(draw):
    n = draw(st.integers(1, 5))
    fields = {}
    for i in range(n):
        kind = draw(st.sampled_from(KINDS))
        form = draw(st.sampled_from(["scalar", "count", "shape"]))
        if form == "scalar":
            fields[f"f{i}"] = (kind, ())
        elif form == "count":
            fields[f"f{i}"] = (kind, (draw(st.integers(1, 5)),))
        else:
            shape = tuple(draw(st.lists(st.integers(1, 3), min_size=2, max_size=3)))
            fields[f"f{i}"] = (kind, shape)
    values = {}
    for name, (kind, shape) in fields.items():
        count = math.prod(shape) if shape else 1
        items = draw(st.lists(values_of(kind), min_size=count, max_size=count))
        values[name] = shaped(items, shape) if shape else items[0]
    return fields, values


def code_of(kind, shape):
    if not shape:
        return kind
    if len(shape) == 1:
        return f"{shape[0]}{kind}"
    return "(" + ",".join(map(str, shape)) + ")" + kind


@settings(max_examples=150, deadline=None)
@given(layouts())
def test_every_kind_round_trips_as_struct_packs_it(layout):
    fields, values = layout
    rec = SeqRecord(**{name: code_of(*spec) for name, spec in fields.items()})
    rec.update(**values)
    assert rec.read() == tuple(values.values())
    snapshot = bytearray(rec.nbytes)
    rec.read_into(snapshot)
    flat_values = [x for v in values.values() for x in flat(v)]
    assert struct.unpack(rec.format, snapshot) == tuple(flat_values)
    assert bytes(snapshot) == struct.pack(rec.format, *flat_values)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([k for k in KINDS if k != "?"]), st.data())
def test_an_array_field_takes_a_matching_array_array(kind, data):
    items = data.draw(st.lists(values_of(kind), min_size=4, max_size=4))
    if kind == "d" or kind == "f":
        items = [float(x) for x in items]
    code = {"q": "q", "Q": "Q"}.get(kind, kind)
    rec = SeqRecord(v=f"4{kind}")
    rec.update(v=array.array(code, items))
    assert rec["v"] == tuple(items)
