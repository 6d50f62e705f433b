"""The write lock a SeqLock and a SeqRecord share, specified once.

Both types hold a write lock taken by a write section (``x.write()``, and
for a SeqLock also ``with lock:``), with one sequence count (even between
sections, odd inside one, two more per section however it ends), the same
timeouts and the same refusals.  As CPython's Lib/test/lock_tests.py does
for its locks, the tests live here once, in ``WriteLockTests``, and each
type's test file runs them by subclassing it (pytest collects the
subclass: tests/test_seqlock.py::TestWriteLock and
tests/test_record.py::TestWriteLock) with:

- ``make()``: a new object;
- ``sections(obj)``: the ways to open a write section on it, each a
  callable returning a context manager;
- ``binds(obj, target)``: whether ``target`` is what ``with`` binds (the
  lock itself; a record's writer).

What only one type has (acquire_write(), read(fn), update(), a record's
rollback and fields) stays in its own file.  Each test makes its own
object, so every test here can run in several threads at once
(pytest-run-parallel).
"""
from __future__ import annotations

import copy
import gc
import pickle
import threading
import time
import weakref

import pytest

from conftest import held_by_another_thread
from workers import Call

#: "Returns promptly": generous, because the machine is noisy.
PROMPT = 5.0

COPIERS = [copy.copy, copy.deepcopy] + [
    lambda o, p=p: pickle.dumps(o, protocol=p) for p in range(pickle.HIGHEST_PROTOCOL + 1)
]
COPIER_IDS = ["copy", "deepcopy"] + [f"pickle-{p}" for p in range(pickle.HIGHEST_PROTOCOL + 1)]


class WriteLockTests:
    """The write-lock contract; subclasses say what the object is."""

    def make(self):
        raise NotImplementedError

    def sections(self, obj):
        raise NotImplementedError

    def binds(self, obj, target):
        raise NotImplementedError

    def holding(self, obj):
        """The object's write lock held by a helper thread for a block."""
        return held_by_another_thread(obj, section=self.sections(obj)[-1])

    # ---- the sequence count and locked() ----

    def test_a_new_object_has_sequence_zero_and_is_unlocked(self):
        obj = self.make()
        assert obj.sequence == 0 and obj.locked() is False

    def test_sequence_is_odd_inside_a_write_section(self):
        obj = self.make()
        for section in self.sections(obj):
            with section():
                assert obj.sequence % 2 == 1

    def test_sequence_advances_by_two_per_write_section(self):
        obj = self.make()
        n = 0
        for _ in range(2):
            for section in self.sections(obj):
                with section():
                    pass
                n += 1
                assert obj.sequence == 2 * n

    def test_sequence_is_odd_while_another_thread_writes(self):
        obj = self.make()
        with self.holding(obj):
            assert obj.sequence == 1
        assert obj.sequence == 2

    def test_sequence_is_read_only(self):
        obj = self.make()
        with pytest.raises(AttributeError):
            obj.sequence = 2
        assert obj.sequence == 0

    def test_locked_is_true_only_inside_a_write_section(self):
        obj = self.make()
        for section in self.sections(obj):
            assert obj.locked() is False
            with section():
                assert obj.locked() is True
            assert obj.locked() is False

    def test_locked_is_true_while_another_thread_writes(self):
        obj = self.make()
        with self.holding(obj):
            assert obj.locked() is True
        assert obj.locked() is False

    # ---- write sections ----

    def test_with_binds_what_the_type_documents(self):
        obj = self.make()
        for section in self.sections(obj):
            with section() as target:
                assert self.binds(obj, target)

    @pytest.mark.parametrize("error", [ZeroDivisionError, KeyError])
    def test_a_section_whose_body_raises_releases_the_lock_and_ends_the_section(self, error):
        obj = self.make()
        for n, section in enumerate(self.sections(obj), 1):
            with pytest.raises(error):
                with section():
                    raise error("boom")
            assert not obj.locked()
            assert obj.sequence == 2 * n

    def test_a_write_context_can_be_entered_again_after_it_exited(self):
        obj = self.make()
        section = obj.write(timeout=1)
        with section:
            pass
        with section:
            pass
        assert obj.sequence == 4

    def test_a_nested_write_section_from_the_owning_thread_raises_runtime_error(self):
        obj = self.make()
        for outer in self.sections(obj):
            for inner in self.sections(obj):
                with outer():
                    seq = obj.sequence
                    with pytest.raises(RuntimeError):
                        with inner():
                            pytest.fail("entered a section nested in its own")
                    assert obj.locked() and obj.sequence == seq
                assert obj.sequence == seq + 1

    # ---- timeouts ----

    @pytest.mark.parametrize("timeout", [0.05, 0], ids=["0.05", "0"])
    def test_write_times_out_while_another_thread_holds_the_lock(self, timeout):
        obj = self.make()
        with self.holding(obj):
            with pytest.raises(TimeoutError):
                with obj.write(timeout=timeout):
                    pytest.fail("entered a write section held by another thread")
            assert obj.sequence == 1
        assert obj.sequence == 2  # the holder's section only

    def test_write_with_a_timeout_succeeds_when_the_lock_is_free(self):
        obj = self.make()
        with obj.write(timeout=0):
            assert obj.locked()
        assert obj.sequence == 2

    def test_write_waits_until_the_other_writer_finishes(self):
        obj = self.make()
        results = []

        def write():
            with obj.write(timeout=PROMPT * 4):
                results.append(obj.sequence)

        with self.holding(obj):
            waiter = threading.Thread(target=write)
            waiter.start()
            time.sleep(0.1)
            assert waiter.is_alive(), "the second writer did not wait"
        waiter.join(PROMPT)
        assert results == [3]
        assert obj.sequence == 4

    @pytest.mark.parametrize("timeout", [-0.5, -2, -2.0, -1.5])
    def test_write_rejects_a_negative_timeout_with_value_error(self, timeout):
        with pytest.raises(ValueError, match="timeout value must be positive"):
            self.make().write(timeout=timeout)

    @pytest.mark.parametrize("timeout", [float("inf"), 1e300, 10.0 * threading.TIMEOUT_MAX])
    def test_write_rejects_a_too_large_timeout_with_overflow_error(self, timeout):
        with pytest.raises(OverflowError):
            self.make().write(timeout=timeout)

    def test_write_rejects_a_timeout_that_is_not_a_number_with_type_error(self):
        with pytest.raises(TypeError):
            self.make().write(timeout="1")

    @pytest.mark.parametrize(
        "timeout, outcome",
        [
            (1e-10, TimeoutError),      # rounds up to 1 ns: a short wait, not a hang
            (-0.0, TimeoutError),       # zero: a try
            (True, TimeoutError),       # 1 s, as threading takes it
            (float("nan"), ValueError),
            (1e300, OverflowError),
            (float("inf"), OverflowError),
            (-1e-300, ValueError),
        ],
        ids=["1e-10", "-0.0", "True", "nan", "1e300", "inf", "-1e-300"],
    )
    def test_extreme_timeouts_against_a_held_lock(self, timeout, outcome):
        """Holds: timeouts at the edges end in the documented exception
        within their time (from issue 12's hostile review)."""
        obj = self.make()
        ready, release = threading.Event(), threading.Event()

        def holder():
            with self.sections(obj)[-1]():
                ready.set()
                release.wait(10)

        h = Call(holder)
        assert ready.wait(10)
        started = time.monotonic()
        try:
            with pytest.raises(outcome):
                with obj.write(timeout=timeout):
                    pass
        finally:
            release.set()
            h.join(10)
        assert time.monotonic() - started < 3

    # ---- identity: not copyable, weakly referenceable ----

    @pytest.mark.parametrize("copier", COPIERS, ids=COPIER_IDS)
    def test_pickling_and_copying_raise_type_error(self, copier):
        with pytest.raises(TypeError, match="pickle"):
            copier(self.make())

    def test_it_can_be_weakly_referenced_and_the_reference_dies_with_it(self):
        obj = self.make()
        ref = weakref.ref(obj)
        assert ref() is obj
        del obj
        gc.collect()
        assert ref() is None

    def test_a_write_context_keeps_its_object_alive(self):
        obj = self.make()
        ref = weakref.ref(obj)
        section = obj.write()
        del obj
        gc.collect()
        with section as target:
            assert ref() is not None and self.binds(ref(), target)
        del section, target
        gc.collect()
        assert ref() is None
