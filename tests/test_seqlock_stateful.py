"""One SeqLock driven from one thread against a model, by Hypothesis.

The model is two numbers: whether this thread holds the write lock, and
how many writes completed.  Every rule says what the real lock must do
(including the exact exception for misuse) and updates the model; the
invariants compare sequence, parity and locked() with it after each step.
"""
from __future__ import annotations

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from seqlock_py import SeqLock

NEGATIVE_SEQ = st.integers(max_value=-1)
TOO_LARGE_SEQ = st.integers(min_value=2**64)
NON_INT_SEQ = st.one_of(st.floats(), st.text(max_size=3), st.none(), st.binary(max_size=3))


class SeqLockMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.lock = SeqLock()
        self.held = False
        self.completed = 0
        self.section = None  # a write() context this thread is inside, if any
        self.pending_seqs = []  # read_begin() results not yet checked

    # ---- the model's view ----

    def expected_sequence(self):
        return 2 * self.completed + (1 if self.held else 0)

    def _release_in_model(self):
        self.held = False
        self.completed += 1

    # ---- writes ----

    @precondition(lambda self: not self.held)
    @rule(blocking=st.booleans(), timeout=st.sampled_from([-1, 0, 0.01, 1.5, None]))
    def acquire_write_when_free(self, blocking, timeout):
        if timeout is None:
            taken = self.lock.acquire_write(blocking)
        elif not blocking and timeout != -1:
            with pytest.raises(ValueError):
                self.lock.acquire_write(blocking, timeout)
            return
        else:
            taken = self.lock.acquire_write(blocking=blocking, timeout=timeout)
        assert taken is True
        self.held = True

    @precondition(lambda self: self.held)
    @rule(blocking=st.booleans(), timeout=st.sampled_from([-1, 0, 0.01]))
    def nested_acquire_write_raises_runtime_error(self, blocking, timeout):
        if not blocking and timeout != -1:
            expected = ValueError  # argument check comes first
        else:
            expected = RuntimeError
        with pytest.raises(expected):
            self.lock.acquire_write(blocking=blocking, timeout=timeout)

    @precondition(lambda self: self.held)
    @rule()
    def nested_with_raises_runtime_error(self):
        with pytest.raises(RuntimeError):
            with self.lock:
                pass

    @precondition(lambda self: self.held and self.section is None)
    @rule()
    def release_write(self):
        assert self.lock.release_write() is None
        self._release_in_model()

    @precondition(lambda self: not self.held)
    @rule()
    def release_write_unheld_raises_runtime_error(self):
        with pytest.raises(RuntimeError):
            self.lock.release_write()

    @precondition(lambda self: not self.held)
    @rule(timeout=st.sampled_from([None, 0, 0.01, 2.0]))
    def enter_write_context(self, timeout):
        self.section = self.lock.write(timeout=timeout)
        assert self.section.__enter__() is self.lock
        self.held = True

    @precondition(lambda self: self.section is not None)
    @rule(raise_in_body=st.booleans())
    def exit_write_context(self, raise_in_body):
        exc = ValueError("body failed") if raise_in_body else None
        args = (type(exc), exc, None) if exc else (None, None, None)
        assert self.section.__exit__(*args) is False  # never swallows
        self.section = None
        self._release_in_model()

    @precondition(lambda self: not self.held)
    @rule(raise_in_body=st.booleans())
    def with_lock_block(self, raise_in_body):
        class BodyError(Exception):
            pass

        try:
            with self.lock as target:
                assert target is self.lock
                assert self.lock.sequence == self.expected_sequence() + 1
                if raise_in_body:
                    raise BodyError
        except BodyError:
            assert raise_in_body
        self.completed += 1

    @rule(timeout=st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False)
          .filter(lambda t: t != -1))
    def negative_timeout_raises_value_error(self, timeout):
        with pytest.raises(ValueError, match="timeout value must be positive"):
            self.lock.acquire_write(timeout=timeout)
        with pytest.raises(ValueError, match="timeout value must be positive"):
            self.lock.write(timeout=timeout)

    @rule(timeout=st.sampled_from([float("inf"), 1e300, 1e12]))
    def too_large_timeout_raises_overflow_error(self, timeout):
        with pytest.raises(OverflowError):
            self.lock.acquire_write(timeout=timeout)

    # ---- reads ----

    @precondition(lambda self: not self.held)
    @rule()
    def read_begin(self):
        seq = self.lock.read_begin()
        assert seq == self.expected_sequence()
        self.pending_seqs.append((seq, self.completed))

    @precondition(lambda self: self.pending_seqs)
    @rule(data=st.data())
    def read_retry(self, data):
        i = data.draw(st.integers(0, len(self.pending_seqs) - 1))
        seq, completed_then = self.pending_seqs.pop(i)
        overlapped = self.held or self.completed != completed_then
        assert self.lock.read_retry(seq) is overlapped

    @precondition(lambda self: not self.held)
    @rule(value=st.integers() | st.text(max_size=3), raises=st.booleans())
    def read_fn(self, value, raises):
        calls = []

        def fn(x, *, key):
            calls.append(None)
            if raises:
                raise LookupError(x)
            return (x, key)

        if raises:
            with pytest.raises(LookupError):
                self.lock.read(fn, value, key=1)
        else:
            assert self.lock.read(fn, value, key=1) == (value, 1)
        assert len(calls) == 1  # nothing overlapped: exactly one run

    @precondition(lambda self: not self.held)
    @rule(exc=st.sampled_from([KeyboardInterrupt, SystemExit]))
    def read_fn_base_exception_propagates(self, exc):
        def fn():
            raise exc()

        with pytest.raises(exc):
            self.lock.read(fn)

    @precondition(lambda self: self.held)
    @rule()
    def read_while_holding_raises_runtime_error(self):
        with pytest.raises(RuntimeError):
            self.lock.read(lambda: None)
        with pytest.raises(RuntimeError):
            self.lock.read_begin()

    @rule(fn=st.sampled_from([None, 0, "fn"]))
    def read_non_callable_raises_type_error(self, fn):
        with pytest.raises(TypeError):
            self.lock.read(fn)

    @rule(seq=NON_INT_SEQ)
    def read_retry_non_int_raises_type_error(self, seq):
        with pytest.raises(TypeError):
            self.lock.read_retry(seq)

    @rule(seq=NEGATIVE_SEQ)
    def read_retry_of_a_negative_value_raises_value_error(self, seq):
        with pytest.raises(ValueError):
            self.lock.read_retry(seq)

    @rule(seq=TOO_LARGE_SEQ)
    def read_retry_of_2_to_the_64_or_more_raises_overflow_error(self, seq):
        with pytest.raises(OverflowError):
            self.lock.read_retry(seq)

    # ---- invariants ----

    @invariant()
    def sequence_parity_matches_whether_the_lock_is_held(self):
        assert self.lock.sequence % 2 == (1 if self.held else 0)

    @invariant()
    def sequence_counts_completed_writes(self):
        assert self.lock.sequence == self.expected_sequence()

    @invariant()
    def locked_matches_the_model(self):
        assert self.lock.locked() is self.held

    def teardown(self):
        if self.held:
            self.lock.release_write()


SeqLockMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None
)
TestSeqLockAgainstAModel = SeqLockMachine.TestCase
