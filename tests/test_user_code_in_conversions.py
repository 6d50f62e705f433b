"""Storing a value runs the value's own Python code, and nothing it does
can make the store tear, crash or report success with an error pending.

Converting a value to a field's C type calls its ``__float__``,
``__index__`` or ``__bool__``: arbitrary code, run while a write section
is open.  Whatever that code does (close the section, mutate the list
being stored, raise), the record ends up with a complete state, the lock
free and the sequence even, and the caller gets an exception or a clean
store.

The same holds for the other user code a call runs: update()'s keyword
names (str subclasses whose ``__hash__``/``__eq__`` run while update()
walks its keywords, and may empty them), and a wait's arguments (an int
subclass as seq is taken by its value; a timeout's ``__float__`` runs
before the wait starts, and may write, take the lock or raise).
"""
import sys
import time

import pytest

from process_helpers import assert_clean_exit, describe_exit, run_isolated, run_python
from seqlock_py import SeqLock, SeqRecord
from workers import WOKEN


def assert_nothing_stored(rec, zeros):
    assert rec.read() == zeros
    assert not rec.locked()
    assert rec.sequence % 2 == 0


# ---- a conversion that closes the section being written ----


class ClosesTheSection:
    """A number whose conversion closes the write section it is stored in."""

    def __init__(self, section):
        self.section = section

    def __float__(self):
        self.section.__exit__(None, None, None)
        return 99.0

    def __index__(self):
        self.section.__exit__(None, None, None)
        return 99


@pytest.mark.parametrize("code", ["d", "q"], ids=["__float__", "__index__"])
def test_attribute_store_whose_conversion_closes_the_section_is_refused(code):
    rec = SeqRecord(x=code)
    section = rec.write()
    w = section.__enter__()
    with pytest.raises(RuntimeError):
        w.x = ClosesTheSection(section)
    assert_nothing_stored(rec, (0,))


@pytest.mark.parametrize("code", ["d", "q"], ids=["__float__", "__index__"])
def test_writer_update_whose_conversion_closes_the_section_is_refused(code):
    rec = SeqRecord(x=code, y=code)
    section = rec.write()
    w = section.__enter__()
    with pytest.raises(RuntimeError):
        w.update(x=ClosesTheSection(section), y=7)
    assert_nothing_stored(rec, (0, 0))


@pytest.mark.parametrize("code", ["d", "q"], ids=["__float__", "__index__"])
def test_array_item_store_whose_conversion_closes_the_section_is_refused(code):
    rec = SeqRecord(v=f"2{code}")
    section = rec.write()
    w = section.__enter__()
    v = w.v
    with pytest.raises(RuntimeError):
        v[0] = ClosesTheSection(section)
    assert_nothing_stored(rec, ((0, 0),))


# ---- a conversion that mutates the list being stored ----

# argv: the mutation ("clear", "delete" or "grow") and the array length.
# The first element's __float__ mutates the list, collects garbage and
# allocates lists of strs, so memory the list freed is reused at once.
# update() must raise ValueError/RuntimeError (the list changed) and write
# nothing, or store the list as it was passed; the process must not crash.
MUTATE_THE_LIST_BEING_STORED = """
import gc, sys
from seqlock_py import SeqRecord

mutation, n = sys.argv[1], int(sys.argv[2])
rec = SeqRecord(v=f"{n}d")
garbage = []

class MutatesTheList:
    def __float__(self):
        if mutation == "clear":
            lst.clear()
        elif mutation == "delete":
            del lst[1:]
        else:  # grow: the list's storage is reallocated
            lst.extend([0.5] * (4 * n + 1000))
        gc.collect()
        garbage.append([[str(i)] * 4 for i in range(10_000)])
        return 0.0

lst = [MutatesTheList()] + [float(str(i)) for i in range(1, n)]  # fresh floats
as_passed = (0.0,) + tuple(float(i) for i in range(1, n))
try:
    rec.update(v=lst)
except (ValueError, RuntimeError):
    assert rec.sequence == 0 and rec["v"] == (0.0,) * n, "wrote after refusing"
else:
    assert rec["v"] == as_passed, "stored something else than the list passed"
print("ok")
"""


@pytest.mark.parametrize("n", [4, 1_000_000], ids=["4d", "1000000d"])
@pytest.mark.parametrize("mutation", ["clear", "delete", "grow"])
def test_update_with_a_list_mutated_by_a_conversion_does_not_crash(mutation, n):
    code, output = run_python(MUTATE_THE_LIST_BEING_STORED, mutation, n, timeout=60)
    assert code == 0 and output.strip().endswith("ok"), (
        f"{describe_exit(code)}:\n{output}"
    )


# Two threads for argv[1] seconds: one keeps changing a list between
# lengths 0, 4 and 54 (at length 4 it always holds 0.0, 1.0, 2.0, 3.0),
# the other keeps storing it in a "4d" field.  A wrong length is a
# ValueError; nothing may crash, and what is stored is the list at length 4.
STORE_A_LIST_ANOTHER_THREAD_MUTATES = """
import sys, threading, time
from seqlock_py import SeqRecord

rec = SeqRecord(v="4d")
lst = [0.0, 1.0, 2.0, 3.0]
start = threading.Barrier(2)
stop = time.monotonic() + float(sys.argv[1])
stored = []

def mutate():
    start.wait()
    while time.monotonic() < stop:
        lst.clear()
        lst.extend([float(i) for i in range(4)])
        lst.extend([float(i) for i in range(50)])
        del lst[4:]

def store():
    start.wait()
    while time.monotonic() < stop:
        try:
            rec.update(v=lst)
        except ValueError:
            continue
        stored.append(rec["v"])

threads = [threading.Thread(target=mutate), threading.Thread(target=store)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert all(s == (0.0, 1.0, 2.0, 3.0) for s in stored), set(stored)
print("ok", len(stored), "stored")
"""


@pytest.mark.skipif(
    getattr(sys, "_is_gil_enabled", lambda: True)(),
    reason="a list changes under a running conversion only without the GIL",
)
def test_update_with_a_list_another_thread_mutates_does_not_crash():
    code, output = run_python(STORE_A_LIST_ANOTHER_THREAD_MUTATES, 1.5, timeout=60)
    assert code == 0 and "ok" in output, f"{describe_exit(code)}:\n{output}"


# ---- a truth test that raises ----


class TruthTestRaises(int):
    def __bool__(self):
        raise ValueError("no truth value")


def test_bool_field_whose_truth_test_raises_writes_nothing():
    rec = SeqRecord(x="d", flag="?")
    with pytest.raises(ValueError, match="no truth value"):
        rec.update(x=5.0, flag=TruthTestRaises(1))
    assert_nothing_stored(rec, (0.0, False))
    assert rec.sequence == 0


def test_bool_field_whose_truth_test_raises_in_a_write_section_rolls_it_back():
    rec = SeqRecord(x="d", flag="?")
    reached_after_the_store = False
    with pytest.raises(ValueError, match="no truth value"):
        with rec.write() as w:
            w.x = 5.0
            w.flag = TruthTestRaises(1)
            reached_after_the_store = True
    assert not reached_after_the_store
    assert_nothing_stored(rec, (0.0, False))


# ---- keyword names are str subclasses: their __hash__/__eq__ run while
# update() walks its keywords ------------------------------------------------


# Keys that compare unequal to each other while the dict is built, and
# equal to the field's name when update() looks them up: 200 keywords that
# all name field x of a two-field record.
KEYWORDS_NAMING_ONE_FIELD_TWICE = """
from seqlock_py import SeqRecord

building = True

class Name(str):
    def __hash__(self):
        return str.__hash__(self)
    def __eq__(self, other):
        return self is other if building else str.__eq__(self, other)

values = {Name("x"): float(i) for i in range(200)}
building = False
rec = SeqRecord(x="d", y="d")
try:
    rec.update(**values)
except (TypeError, ValueError):
    assert rec.sequence == 0 and rec.read() == (0.0, 0.0), "wrote after refusing"
else:
    x, y = rec.read()
    assert y == 0.0 and x in range(200), rec.read()
junk = [[str(i)] for i in range(100_000)]  # reuse what was freed
print("ok")
"""


def test_update_with_several_keywords_naming_one_field_does_not_overflow():
    """Seen: update() writes one pointer per keyword into an array sized
    for the record's fields (encode_values' which[]): 200 keywords that all
    look up field x overflow it (PYTHONMALLOC=debug: "bad trailing pad
    byte", abort; without it, SIGSEGV), on both interpreters."""
    assert_clean_exit(
        run_isolated(KEYWORDS_NAMING_ONE_FIELD_TWICE, env={"PYTHONMALLOC": "debug"}),
        "update() with 200 keywords for one field",
    )


# The keyword's __eq__ (run by the field lookup) empties the keywords
# dict update() is iterating (found through gc.get_referrers), so the
# value update() borrowed from it is freed before it is converted.
KEYWORDS_EMPTIED_BY_A_NAME_COMPARISON = """
import gc
from seqlock_py import SeqRecord

class Value:
    def __float__(self):
        return 1.0

class Name(str):
    armed = True
    def __hash__(self):
        return str.__hash__(self)
    def __eq__(self, other):
        if Name.armed:
            Name.armed = False
            for referrer in gc.get_referrers(self):
                if type(referrer) is dict and referrer is not globals():
                    referrer.clear()  # update()'s own keywords dict
            gc.collect()
            junk = [[i] * 3 for i in range(50_000)]  # reuse what was freed
        return str.__eq__(self, other)

rec = SeqRecord(x="d", y="d")
try:
    rec.update(**{Name("x"): Value()})
except (TypeError, ValueError, RuntimeError):
    pass
assert rec.read() in ((0.0, 0.0), (1.0, 0.0)), rec.read()
assert not rec.locked() and rec.sequence % 2 == 0
print("ok")
"""


def test_update_survives_a_keyword_name_whose_comparison_empties_the_keywords():
    """Seen: encode_values() holds borrowed name/value pointers from
    PyDict_Next while layout_find() runs the name's __eq__; emptying the
    dict frees the value, which is then converted: SIGSEGV on 3.11, heap
    corruption on 3.13t (GC spins for ever at exit)."""
    assert_clean_exit(
        run_isolated(KEYWORDS_EMPTIED_BY_A_NAME_COMPARISON, env={"PYTHONMALLOC": "debug"}, timeout=60),
        "update() whose keyword comparison empties the keywords",
    )


# ---- a wait's arguments run user code -------------------------------------


class IntWithOddEq(int):
    """An int whose == lies and whose __index__ says something else."""

    def __eq__(self, other):
        return True

    __hash__ = int.__hash__

    def __index__(self):
        return 12345


def test_a_seq_int_subclass_is_taken_by_its_value_not_its_methods():
    """Held: wait() reads an int subclass's value; its __eq__/__index__
    are not consulted."""
    lock = SeqLock()
    with lock:
        pass
    assert lock.wait(IntWithOddEq(2), 0) is False
    assert lock.wait(IntWithOddEq(0), 0) is True


class TimeoutThat:
    def __init__(self, action):
        self.action = action

    def __float__(self):
        self.action()
        return 5.0


def test_a_timeout_whose_float_writes_makes_the_wait_return_at_once():
    """Held: __float__ runs before the wait starts: its write is news."""
    rec = SeqRecord(x="q")
    seq = rec.sequence
    start = time.monotonic()
    assert rec.wait(seq, TimeoutThat(lambda: rec.update(x=1))) is True
    assert time.monotonic() - start < WOKEN


def test_a_timeout_whose_float_takes_the_write_lock_gets_runtime_error():
    """Held: a __float__ that leaves the calling thread holding the lock
    makes wait() raise (it could never be woken) instead of deadlocking."""
    lock = SeqLock()
    try:
        with pytest.raises(RuntimeError, match="holds the write lock"):
            lock.wait(lock.sequence, TimeoutThat(lock.acquire_write))
    finally:
        lock.release_write()


def test_a_timeout_whose_float_raises_raises_before_any_wait():
    """Held: the error of __float__ comes out at once, for wait() and for
    wait_async() (at the call, not at the first await)."""
    lock = SeqLock()

    def boom():
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        lock.wait(lock.sequence, TimeoutThat(boom))
    with pytest.raises(ZeroDivisionError):
        lock.wait_async(lock.sequence, TimeoutThat(boom))
