"""SeqRecord against a dict model: Hypothesis drives updates (valid and
invalid), write sections (completing, raising, failing an assignment),
timeouts against another thread's section, misuse inside a section and
retry-budget changes, and checks every way of reading after each step."""

from __future__ import annotations

import struct
import threading

import pytest

try:
    import numpy
except ImportError:  # NumPy may not install on a free-threaded build
    numpy = None
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from seqlock_py import SeqRecord
from workers import run_each

pytestmark = pytest.mark.timeout(300)

FIELDS = {"x": "d", "flag": "?", "n": "q", "y": "d", "arr": "5d", "u": "Q", "ids": "3q"}
ZERO = {"x": 0.0, "flag": False, "n": 0, "y": 0.0, "arr": (0.0,) * 5, "u": 0, "ids": (0,) * 3}

floats = st.floats(allow_nan=False, width=64)
int64 = st.integers(-(2**63), 2**63 - 1)
uint64 = st.integers(0, 2**64 - 1)
VALUE = {
    "x": floats,
    "y": floats,
    "flag": st.booleans(),
    "n": int64,
    "u": uint64,
    "arr": st.tuples(*[floats] * 5),
    "ids": st.tuples(*[int64] * 3),
}
ARRAYS = {"arr": (5, floats), "ids": (3, int64)}

valid_updates = st.fixed_dictionaries({}, optional=VALUE)

# (field, bad value, the exception update() must raise)
invalid_values = st.one_of(
    st.tuples(st.sampled_from(["x", "y"]), st.sampled_from(["1.0", None, [1.0]]), st.just(TypeError)),
    st.tuples(st.just("flag"), st.sampled_from([1.5, None, "yes"]), st.just(TypeError)),
    st.tuples(st.sampled_from(["n", "u"]), st.sampled_from([1.5, "1", None]), st.just(TypeError)),
    st.tuples(st.just("n"), st.sampled_from([2**63, -(2**63) - 1, 2**100]), st.just(OverflowError)),
    st.tuples(st.just("u"), st.sampled_from([-1, 2**64, -(2**70)]), st.just(OverflowError)),
    st.tuples(st.just("arr"), st.sampled_from([(1.0,) * 4, (1.0,) * 6, ()]), st.just(ValueError)),
    st.tuples(st.just("ids"), st.sampled_from([(1,) * 2, (1,) * 4]), st.just(ValueError)),
    st.tuples(st.just("ids"), st.sampled_from([(1, 2, 2**64), (-(2**64), 0, 0)]), st.just(OverflowError)),
    st.tuples(st.just("arr"), st.sampled_from(["abcde", 5.0, (1.0, 2.0, "3", 4.0, 5.0)]), st.just(TypeError)),
    st.tuples(st.sampled_from(["nope", "X", "arr2"]), st.just(1), st.just(TypeError)),
)

# One step inside a write section: set a field, set an array element
# (possibly with a negative index), or w.update(...) several fields.
section_steps = st.one_of(
    st.sampled_from(sorted(FIELDS)).flatmap(lambda f: VALUE[f].map(lambda v: ("set", f, v))),
    st.sampled_from(sorted(ARRAYS)).flatmap(
        lambda f: st.tuples(
            st.just("item"),
            st.just(f),
            st.integers(-ARRAYS[f][0], ARRAYS[f][0] - 1),
            ARRAYS[f][1],
        )
    ),
    valid_updates.map(lambda d: ("update", d)),
)


def flatten(values):
    flat = []
    for name in FIELDS:
        v = values[name]
        flat.extend(v if isinstance(v, tuple) else (v,))
    return tuple(flat)


class RecordMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.rec = SeqRecord(**FIELDS)
        self.model = dict(ZERO)
        self.sections = 0  # write sections ended: completed or rolled back

    # ---- writes ----

    @rule(values=valid_updates)
    def update(self, values):
        self.rec.update(**values)
        self.model.update({k: tuple(v) if isinstance(v, tuple) else v for k, v in values.items()})
        self.sections += 1

    @rule(good=valid_updates, bad=invalid_values)
    def update_with_one_bad_value(self, good, bad):
        name, value, error = bad
        values = {**good, name: value}
        seq = self.rec.sequence
        with pytest.raises(error):
            self.rec.update(**values)
        assert self.rec.sequence == seq  # nothing written, no section

    @rule(steps=st.lists(section_steps, max_size=8), raise_at_end=st.booleans())
    def write_section(self, steps, raise_at_end):
        staged = dict(self.model)

        class Abort(Exception):
            pass

        try:
            with self.rec.write() as w:
                for step in steps:
                    if step[0] == "set":
                        _, name, value = step
                        setattr(w, name, value)
                        staged[name] = value
                    elif step[0] == "item":
                        _, name, index, value = step
                        w_arr = getattr(w, name)
                        w_arr[index] = value
                        items = list(staged[name])
                        items[index] = value
                        staged[name] = tuple(items)
                        assert w_arr[index] == value
                    else:
                        (_, values) = step
                        w.update(**values)
                        staged.update(values)
                    for name in FIELDS:  # the section reads its own writes
                        got = getattr(w, name)
                        got = tuple(got) if name in ARRAYS else got
                        assert got == staged[name]
                    # ... and readers, even this thread, the committed state
                    assert self.rec.read() == tuple(self.model[n] for n in FIELDS)
                if raise_at_end:
                    raise Abort
        except Abort:
            pass
        else:
            self.model = staged
        self.sections += 1

    @rule(steps=st.lists(section_steps, max_size=4), bad=invalid_values)
    def write_section_with_a_bad_assignment(self, steps, bad):
        name, value, error = bad
        if name not in FIELDS:
            error = AttributeError
        with pytest.raises(error):
            with self.rec.write() as w:
                for step in steps:
                    if step[0] == "set":
                        setattr(w, step[1], step[2])
                    elif step[0] == "item":
                        getattr(w, step[1])[step[2]] = step[3]
                    else:
                        w.update(**step[1])
                setattr(w, name, value)
        self.sections += 1  # rolled back, but it was a section

    # ---- timeouts and misuse: each leaves the model as it was ----

    @rule(timeout=st.sampled_from([0, 0.001, 0.01]))
    def write_times_out_while_another_thread_writes(self, timeout):
        holding, done = threading.Event(), threading.Event()

        def hold():
            with self.rec.write():
                holding.set()
                done.wait(30)

        def try_to_write():
            assert holding.wait(30)
            try:
                with pytest.raises(TimeoutError):
                    with self.rec.write(timeout=timeout):
                        pass
            finally:
                done.set()

        run_each([hold, try_to_write])
        self.sections += 1  # the holder's section, which changed nothing

    @rule(misuse=st.sampled_from(["update", "nested"]))
    def misuse_inside_a_write_section(self, misuse):
        calls = {
            "update": lambda: self.rec.update(x=1.0),
            "nested": lambda: self.rec.write(timeout=1).__enter__(),
        }
        with self.rec.write():
            with pytest.raises(RuntimeError):
                calls[misuse]()
        self.sections += 1

    @rule()
    def writer_used_after_its_section(self):
        with self.rec.write() as w:
            pass
        self.sections += 1
        with pytest.raises(RuntimeError):
            w.x = 1.0
        with pytest.raises(RuntimeError):
            w.x  # noqa: B018 - reading a field outside the section

    @rule(n=st.integers(0, 100))
    def set_max_retries(self, n):
        self.rec.max_retries = n
        assert self.rec.max_retries == n

    @precondition(lambda self: numpy is not None)
    @rule()
    def read_into_a_numpy_array(self):
        out = numpy.zeros(self.rec.nbytes, dtype=numpy.uint8)
        assert self.rec.read_into(out) == self.rec.sequence
        assert struct.unpack(self.rec.format, out.tobytes()) == flatten(self.model)

    # ---- what every read must show ----

    @invariant()
    def read_matches_the_model(self):
        assert self.rec.read() == tuple(self.model[name] for name in FIELDS)

    @invariant()
    def read_dict_matches_the_model(self):
        snap = self.rec.read_dict()
        assert list(snap) == list(FIELDS) and snap == self.model

    @invariant()
    def single_field_reads_match_the_model(self):
        for name in FIELDS:
            assert self.rec[name] == self.model[name]
            assert self.rec.get(name, "missing") == self.model[name]
        assert self.rec.get("nope", "missing") == "missing"

    @invariant()
    def read_into_unpacks_to_the_model(self):
        buf = bytearray(self.rec.nbytes)
        seq = self.rec.read_into(buf)
        assert seq == self.rec.sequence
        assert struct.unpack(self.rec.format, buf) == flatten(self.model)

    @invariant()
    def sequence_is_even_and_counts_the_sections(self):
        assert self.rec.sequence % 2 == 0
        assert self.rec.sequence == 2 * self.sections
        assert not self.rec.locked()
        assert self.rec.recoveries == 0


RecordMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestRecordAgainstModel = RecordMachine.TestCase
