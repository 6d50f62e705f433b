"""A hostile user's and a container operator's attempts to break the lock.

Each test names the behaviour that should hold; its docstring says what
was seen when it was written.  Tests whose docstring starts with "Holds:"
passed then and cover something no other test did; the others are
regressions for defects (see the report on branch ``hostile``).

Everything that can hang has a deadline; everything that can crash runs
in a fresh interpreter.
"""
from __future__ import annotations

import contextlib
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from multiprocessing import shared_memory

import pytest

from process_helpers import (
    HOLD_A_SECTION_SCRIPT,
    CHILD_TIMEOUT,
    in_forked_child,
    PythonProcess,
    child_env,
    describe_exit,
    free_pid_number,
    python_command,
    require_pid_namespaces,
    run_python,
    wait_for_pid,
)
from record_helpers import map_shared_memory
from seqlock_py import SeqLock, SeqRecord
from workers import Call

LINUX = sys.platform.startswith("linux")
FIELDS = dict(a="q", b="q", total="q")  # invariant: a + b == total


def run_isolated(code, *args, env=None, timeout=CHILD_TIMEOUT):
    """Run ``code`` in a fresh interpreter with extra environment ``env``;
    return ``(exit code, output)``, or ``(None, output)`` if it was still
    running at ``timeout`` (then it is killed)."""
    full_env = child_env()
    full_env.update(env or {})
    try:
        proc = subprocess.run(
            python_command(code, *args), env=full_env, cwd="/",
            capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        parts = [p.decode(errors="replace") if isinstance(p, bytes) else p
                 for p in (exc.stdout, exc.stderr) if p]
        return None, "".join(parts)
    return proc.returncode, proc.stdout + proc.stderr


def assert_clean_exit(outcome, what):
    code, output = outcome
    assert code is not None, f"{what}: still running at its deadline (hang)\n{output}"
    assert code == 0 and "ok" in [line.strip() for line in output.splitlines()], (
        f"{what}: {describe_exit(code)}\n{output[-3000:]}"
    )


# ---------------------------------------------------------------------------
# Keyword names are str subclasses: their __hash__/__eq__ run while
# update() walks its keywords.
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# A SeqLock whose writer thread exited inside its section: the README says
# a reader gets RuntimeError (the Python objects cannot be put back).
# ---------------------------------------------------------------------------


def exit_inside_a_write_section(lock, state):
    """A thread takes the lock, writes half of state, and exits."""

    def die_mid_write():
        lock.acquire_write()
        state[0] = 1  # half a write: state[1] not yet

    t = threading.Thread(target=die_mid_write)
    t.start()
    t.join(CHILD_TIMEOUT)
    assert not t.is_alive()


def test_reader_locking_pass_raises_when_the_seqlock_writer_thread_died_mid_write():
    """Seen: read() whose lock-free pass overlapped the dying writer goes to
    its locking pass, takes the dead thread's lock over, closes its section
    as it stands and returns the torn state (1, 0) with only a
    RuntimeWarning; every later read() accepts (1, 0) too.  With
    max_retries=16 the same reader gets RuntimeError, as documented."""
    lock = SeqLock(max_retries=0)
    state = [0, 0]  # invariant: state[0] == state[1]
    passes = []

    def copy():
        passes.append(1)
        if len(passes) == 1:
            exit_inside_a_write_section(lock, state)
        return tuple(state)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            snapshot = lock.read(copy)
        except RuntimeError:
            return
    pytest.fail(f"read() returned {snapshot} from a dead writer's half-write")


def test_writer_refusing_a_dead_threads_seqlock_leaves_its_half_write_unpublished():
    """Seen: with RuntimeWarning as an error (-W error), `with lock:` raises
    the takeover warning but has already made the mutex consistent and
    closed the dead section: the lock is free, the sequence even, and
    readers accept the half-write (1, 0) without an error from then on."""
    lock = SeqLock()
    state = [0, 0]
    exit_inside_a_write_section(lock, state)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(RuntimeWarning):
            with lock:
                state[1] = 1  # never runs
    try:
        snapshot = lock.read(lambda: tuple(state))
    except RuntimeError:
        return
    pytest.fail(f"read() returned {snapshot}, the dead writer's half-write, without an error")


# ---------------------------------------------------------------------------
# The kernel walks at most 2048 entries of a dead thread's robust list.
# ---------------------------------------------------------------------------

MANY_LOCKS = 2100  # kernel/futex: ROBUST_LIST_LIMIT is 2048
MAX_HELD = 1024  # seqlock.h: SEQLOCK_MAX_HELD, well inside that limit


@pytest.mark.skipif(not LINUX, reason="robust futex lists are Linux's")
def test_a_thread_cannot_hold_more_locks_than_its_death_can_release():
    """Was: a thread that exits holding 2100 SeqLocks left the first 52 it
    took held for ever: the kernel marks only the 2048 most recent entries
    of a dead thread's robust list FUTEX_OWNER_DIED.  Now a thread may hold
    at most 1024 at once (RuntimeError beyond), and every one it held is
    taken over after it exits."""
    locks = [SeqLock() for _ in range(MANY_LOCKS)]
    refused = []

    def hold_all_and_exit():
        for lock in locks:
            try:
                lock.acquire_write()
            except RuntimeError as exc:
                refused.append(str(exc))
                return

    t = threading.Thread(target=hold_all_and_exit)
    t.start()
    t.join(CHILD_TIMEOUT)
    assert refused and "1024" in refused[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        taken = [locks[i].acquire_write(timeout=2) for i in (0, MAX_HELD - 1)]
        free = locks[MAX_HELD].acquire_write(timeout=2)  # never taken by it
    for i in (0, MAX_HELD - 1, MAX_HELD):
        locks[i].release_write()
    assert taken == [True, True] and free


# A writer process opens half-written sections in as many of 2100 records
# (in one shared map) as it may, and is SIGKILLed; the next writer of the
# first and of the last it held must take the section over.
WRITER_PROCESS_HOLDING_MANY_RECORDS_DIES = """
import mmap, os, signal, sys, threading
from seqlock_py import SeqRecord

n = int(sys.argv[1])
size = SeqRecord.buffer_size(x="q")
buf = mmap.mmap(-1, n * size)  # MAP_SHARED: the child writes into it
view = memoryview(buf)
recs = [SeqRecord.create(view[i * size:(i + 1) * size], x="q") for i in range(n)]
for rec in recs:
    rec.update(x=1)
ready_r, ready_w = os.pipe()
pid = os.fork()
if pid == 0:
    writers = []  # a writer dropped inside its section would undo it
    try:
        for rec in recs:
            writers.append(rec.write().__enter__())
            writers[-1].x = 2  # half a write, kept open
    except RuntimeError:
        pass  # no more than the kernel could release at its death
    os.write(ready_w, str(len(writers)).encode())
    signal.pause()
    os._exit(3)
held = int(os.read(ready_r, 16))
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
assert held == 1024, held
for i in (0, held - 1):
    assert recs[i].read() == (1,)  # readers never waited for it
    with recs[i].write(timeout=5) as w:
        assert w.x == 1  # the half-write discarded
    assert recs[i].recoveries == 1
print("ok")
os._exit(0)
"""


@pytest.mark.skipif(not LINUX, reason="robust futex lists are Linux's")
def test_a_writer_process_killed_holding_many_records_is_recovered_in_each():
    """Was: a writer process SIGKILLed inside sections of 2100 records left
    the first 52 locked for ever (2048 robust-list entries are processed at
    its death).  Now it may hold 1024, and each is taken over."""
    assert_clean_exit(
        run_isolated(WRITER_PROCESS_HOLDING_MANY_RECORDS_DIES, MANY_LOCKS, timeout=60),
        "a writer process killed inside 1024 sections",
    )


# ---------------------------------------------------------------------------
# attach() to garbage: a record whose lock word is not set up.
# ---------------------------------------------------------------------------

# A record whose seqlock_t.ready word (offset 64 + 24) is neither 0 nor
# SEQLOCK_READY: attach() must refuse it, or a timed write must time out.
CORRUPT_LOCK_WORD = """
import struct, time
from seqlock_py import SeqRecord

fields = dict(x="d")
buf = bytearray(SeqRecord.buffer_size(**fields))
SeqRecord.create(buf, **fields)
ready_at = bytes(buf[64:192]).find(struct.pack("I", 0x59444552)) + 64  # "REDY"
assert ready_at >= 64, "the lock's ready word not found in the header"
struct.pack_into("I", buf, ready_at, 0x12345678)  # garbage
try:
    rec = SeqRecord.attach(buf, **fields)
except ValueError:
    print("ok")
    raise SystemExit(0)
started = time.monotonic()
try:
    with rec.write(timeout=0.2):
        pass
except TimeoutError:
    pass
except (OSError, RuntimeError, ValueError):
    pass
took = time.monotonic() - started
assert took < 5, f"write(timeout=0.2) took {took:.1f} s"
print("ok")
"""


def test_write_with_a_timeout_returns_on_a_record_whose_lock_word_is_garbage():
    """Seen: attach() accepts a record whose lock's `ready` word is garbage
    (only magic, version, lock ABI and layout are checked), and the first
    write, even write(timeout=0.2), spins in ensure_ready() for ever,
    attached (GIL held) and deaf to Ctrl-C and to its timeout."""
    code, output = run_isolated(CORRUPT_LOCK_WORD, timeout=15)
    assert code is not None, "write(timeout=0.2) never returned (ensure_ready spins for ever)"
    assert_clean_exit((code, output), "a timed write on a garbage lock word")


# ---------------------------------------------------------------------------
# /proc/self/maps unreadable at create(): a bytearray's record is private.
# ---------------------------------------------------------------------------

BYTEARRAY_RECORD_WHILE_FDS_RUN_OUT = """
import os, threading, warnings
warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads
from seqlock_py import SeqRecord

fields = dict(x="q")
buf = bytearray(SeqRecord.buffer_size(**fields))
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass  # EMFILE: /proc/self/maps cannot be opened now
rec = SeqRecord.create(buf, **fields)
for fd in fds:
    os.close(fd)

held, finish = threading.Event(), threading.Event()

def hold():
    with rec.write() as w:
        w.x = 1
        held.set()
        finish.wait(30)

t = threading.Thread(target=hold)
t.start()
held.wait(30)
pid = os.fork()
if pid == 0:
    try:
        with rec.write(timeout=2) as w:
            w.x = 5
    except TimeoutError:
        os._exit(3)
    os._exit(0 if rec.read() == (5,) else 4)
_, status = os.waitpid(pid, 0)
finish.set()
t.join()
code = os.waitstatus_to_exitcode(status)
assert code != 3, "the child waited for a thread of its parent (the record was taken as shared)"
assert code == 0, code
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_bytearray_record_is_private_across_fork_even_when_proc_maps_is_unreadable():
    """Seen: memory_is_shared() answers "don't know" (-1) when it cannot
    fopen /proc/self/maps (no free fd here; in a chroot or container without
    /proc always), and create() then treats a bytearray as shared memory:
    after fork() the child's write(timeout=2) times out waiting for the
    parent's thread, the defect issue 9 fixed for the normal case."""
    assert_clean_exit(run_isolated(BYTEARRAY_RECORD_WHILE_FDS_RUN_OUT), "fork with a bytearray record")


# ---------------------------------------------------------------------------
# PID namespaces: a waiter that dies while trying the lock.
# ---------------------------------------------------------------------------


@pytest.fixture
def shared_record():
    """A record in a SharedMemory block (/dev/shm) holding (1, 2, 3)."""
    require_pid_namespaces()
    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**FIELDS))
    shm.close()
    try:
        rec = SeqRecord.create(map_shared_memory(shm.name), **FIELDS)
        rec.update(a=1, b=2, total=3)
        yield {"rec": rec, "name": shm.name}
    finally:
        shm.unlink()


# pid 1 of another namespace: again and again, fork a child whose pid
# there is argv[2] (the holder's thread id in its own namespace), let it
# poll the lock with write(timeout=0) and SIGKILL it after a few ms.  Then
# try the lock itself: exit 1 if it can take it (the live holder's lock
# was marked dead), 0 after argv[3] kills or argv[4] seconds.
POLL_AND_DIE_WITH_THE_HOLDERS_ID = """
import os, random, signal, sys, time
from record_helpers import open_shared_record
from process_helpers import next_pid_will_be

rec = open_shared_record(sys.argv[1], a="q", b="q", total="q")
tid, kills, seconds = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
deadline = time.monotonic() + seconds
for i in range(kills):
    if time.monotonic() > deadline:
        break
    next_pid_will_be(tid)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(ready_w, b"x")
        while True:  # poll: a try-lock that fails at once
            try:
                rec.write(timeout=0).__enter__()
                os._exit(5)
            except TimeoutError:
                pass
    os.read(ready_r, 1)
    os.close(ready_r)
    os.close(ready_w)
    if pid != tid:
        print(f"the poller got pid {pid}, not {tid}", flush=True)
        sys.exit(77)
    time.sleep(random.uniform(0.0005, 0.003))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    try:
        with rec.write(timeout=0) as w:
            print(f"after {i + 1} killed pollers the live holder's lock was "
                  f"taken over (its half-write undone: a={w.a})", flush=True)
            sys.exit(1)
    except TimeoutError:
        pass
print("ok", i + 1, "pollers killed", flush=True)
"""


@pytest.mark.skipif(not LINUX, reason="needs Linux: PID namespaces, /dev/shm")
def test_poller_killed_in_another_pid_namespace_never_frees_a_live_holders_lock(shared_record):
    """Seen: after 27 SIGKILLed pollers the live holder's lock was taken over,
    its half-write undone and its next store refused ("the write section
    belongs to another thread").  glibc's pthread_mutex_trylock names the
    mutex as its thread's robust list_op_pending before its CAS even when
    the lock is visibly held; the kernel, at that thread's death, marks the
    word FUTEX_OWNER_DIED if the owner id in it equals the dying thread's
    id in its own namespace: the live holder's id in another namespace.
    The comment above sleep_on_mutex() counts on that window being a few
    instructions; a poller (write(timeout=0), acquire_write(False), and the
    16 yield rounds of every blocked waiter) opens it over and over."""
    rec, name = shared_record["rec"], shared_record["name"]
    tid = free_pid_number()
    with PythonProcess(HOLD_A_SECTION_SCRIPT, name, tid, pid_namespace=True) as holder:
        holder.expect("ready")
        code, output = run_python(
            POLL_AND_DIE_WITH_THE_HOLDERS_ID, name, tid, 2000, 25,
            pid_namespace=True, timeout=90,
        )
        holder.tell("finish")
        holder_code, holder_output = holder.finish()
    assert code == 0, output
    assert holder_code == 0, f"the live holder's own section failed:\n{holder_output}"
    assert rec.read() == (10, 20, 30)


# pid 1 of a namespace: a writer process is forked with a chosen pid and
# SIGKILLed after a random delay, over and over, while it writes flat out
# (blocking write() sections, no polling).
KILL_A_SAME_ID_WRITER_REPEATEDLY = """
import os, random, signal, sys, time
from record_helpers import open_shared_record
from process_helpers import next_pid_will_be

rec = open_shared_record(sys.argv[1], a="q", b="q", total="q")
tid, seconds = int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + seconds
kills = 0
while time.monotonic() < deadline:
    next_pid_will_be(tid)
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(ready_w, b"x")
        n = 1
        while True:
            with rec.write() as w:
                w.a = n
                w.b = n
                w.total = 2 * n
            n += 1
    os.read(ready_r, 1)
    os.close(ready_r)
    os.close(ready_w)
    time.sleep(random.uniform(0.0002, 0.003))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    kills += 1
print("ok", kills, "kills", flush=True)
"""

# pid 1 of another namespace: a thread whose id there is argv[2] writes
# flat out for argv[3] seconds; exit 0 only if every section went through
# (it stops at the first that does not).
WRITE_FLAT_OUT_WITH_THREAD_ID = """
import sys, threading, time, traceback
from record_helpers import open_shared_record
from process_helpers import run_in_thread_with_id

rec = open_shared_record(sys.argv[1], a="q", b="q", total="q")
seconds = float(sys.argv[3])
started = time.monotonic()
result = []

def write():
    n = 0
    try:
        while time.monotonic() < started + seconds:
            with rec.write() as w:
                w.a = -n
                w.b = n
                w.total = 0
            n += 1
        result.append(n)
    except BaseException:
        print(f"lost its lock after {n} sections, {time.monotonic() - started:.1f} s:", flush=True)
        traceback.print_exc()

run_in_thread_with_id(write, int(sys.argv[2]))
print("ok", result, flush=True)
sys.exit(0 if result else 1)
"""


@pytest.mark.skipif(not LINUX, reason="needs Linux: PID namespaces, /dev/shm")
def test_live_writer_keeps_its_lock_while_same_id_writers_die_in_another_namespace(shared_record):
    """Seen: a writer thread with id T writes flat out in one PID namespace;
    in three others, writer processes forked with pid T (blocking write()
    sections, no polling) are SIGKILLed every few ms.  The live writer's
    lock is marked dead and taken over, on 3.11 within 1 s (8 of 8 runs),
    on 3.13t within 5-15 s (4 of 4): its next store raises "the write
    section belongs to another thread"; once it died of SIGSEGV instead
    (likely: the taker linked the mutex into its own robust list, writing
    pointers valid only in its process into the mutex, which the live
    writer still had on its robust list and later unlinked through them).
    (This process's validating reads saw 0 torn: the
    Python layer's per-store holder check stops the live writer; C users
    of write_seqlock()/seqlock_write_copy() have no such check.)  Cause:
    the dying writer was inside pthread_mutex_trylock() or
    pthread_mutex_unlock() (futex wake syscall) with its robust
    list_op_pending naming the mutex, and the kernel marks a pending
    mutex whose owner id equals the dying thread's own id."""
    rec, name = shared_record["rec"], shared_record["name"]
    tid = free_pid_number()
    seconds = 20.0
    with contextlib.ExitStack() as processes:
        survivor = processes.enter_context(
            PythonProcess(WRITE_FLAT_OUT_WITH_THREAD_ID, name, tid, seconds, pid_namespace=True)
        )
        for _ in range(3):  # three namespaces, each killing its own pid-T writers
            processes.enter_context(
                PythonProcess(KILL_A_SAME_ID_WRITER_REPEATEDLY, name, tid, seconds, pid_namespace=True)
            )
        reads = torn = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and survivor.proc.poll() is None:
            a, b, total = rec.read()
            reads += 1
            torn += a + b != total
        survivor_code, survivor_output = survivor.finish()
    print(f"reads={reads} torn={torn} recoveries={rec.recoveries}")
    assert survivor_code == 0, f"the live writer lost its lock:\n{survivor_output}"
    assert torn == 0


# ---------------------------------------------------------------------------
# A write section whose writer object dies on another thread.
# ---------------------------------------------------------------------------


def test_thread_whose_record_writer_was_dropped_elsewhere_can_write_again():
    """Seen: thread B makes a RecordWriter, thread A enters it (A holds the
    section) and hands it back, B drops the last reference (a generator
    holding `with rec.write()` closed or collected on another thread does
    the same).  The dealloc runs on B and undoes nothing (not the holder's
    thread); A now holds a section no object can close: rec.update() in A
    raises "this thread already holds the write lock" for as long as A
    lives, and every reader in every process waits for ever on the odd
    sequence.  (Design-level: RLock-like ownership, but with no way back
    for the owning thread.  The writer is made on B so that 3.13t's biased
    reference counting also frees it there.)"""
    rec = SeqRecord(x="q")
    made, entered, dropped = threading.Event(), threading.Event(), threading.Event()
    box = []

    def owner():
        assert made.wait(10)
        box[0].__enter__().x = 1  # A holds the section; keeps no reference
        entered.set()
        assert dropped.wait(10)
        rec.update(x=2)  # the thread writes again
        return rec.read()

    def other():
        box.append(rec.write())
        made.set()
        assert entered.wait(10)
        box.clear()  # the last reference: RecordWriter_dealloc runs here
        dropped.set()

    a, b = Call(owner), Call(other)
    b.join(10)
    assert a.join(10) == (2,)  # if A fails, it holds the (local) record for good


# ---------------------------------------------------------------------------
# fork(): a SeqLock another thread was writing.
# ---------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_child_reader_does_not_accept_another_threads_half_write_to_a_seqlock():
    """Seen: a parent thread is half-way through `with lock:` (state[0]
    written, state[1] not) when the main thread forks; in the child, the
    repair closes that section as it stands and read() returns (1, 0), a
    torn snapshot, silently, although README's Guarantees say a reader
    never accepts one and a thread that *exits* mid-section makes readers
    raise RuntimeError.  (Conflicts with the documented fork semantics and
    test_fork.py::test_child_can_read_a_lock_another_thread_held_at_fork:
    a design decision to revisit, not an accident.)"""
    lock = SeqLock()
    state = [0, 0]
    held, finish = threading.Event(), threading.Event()

    def half_write():
        with lock:
            state[0] = 1
            held.set()
            assert finish.wait(10)
            state[1] = 1

    writer = Call(half_write)
    assert held.wait(10)

    def child():
        try:
            snapshot = lock.read(lambda: tuple(state))
        except RuntimeError:
            return True
        return snapshot in ((0, 0), (1, 1))

    try:
        code, report = in_forked_child(child)
    finally:
        finish.set()
        writer.join(10)
    assert code == 0, f"the child's read() returned a torn snapshot: {report}"


# ---------------------------------------------------------------------------
# Behaviours that hold (no other test covered them).
# ---------------------------------------------------------------------------

# One process: readers (forked) validate the invariant record; writer
# children (forked) write flat out with update() and write() sections and
# are SIGKILLed after random delays, again and again.  After each kill the
# orchestrator reads (recovering if needed) and checks: a consistent
# state, recoveries up by at most one, and by none if the writer held no
# lock when it died.
KILL_WRITERS_AT_RANDOM_POINTS = """
import mmap, os, random, signal, sys, time
from record_helpers import (INVARIANT_FIELDS, holds_for_flat, holds_for_tuple,
                            invariant_state, write_section_step)
from seqlock_py import SeqRecord

seconds, n_readers = float(sys.argv[1]), int(sys.argv[2])
buf = mmap.mmap(-1, SeqRecord.buffer_size(**INVARIANT_FIELDS))  # MAP_SHARED
rec = SeqRecord.create(buf, **INVARIANT_FIELDS)
rec.update(**invariant_state(0))
deadline = time.monotonic() + seconds

readers = []
for _ in range(n_readers):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        reads = torn = 0
        raw = bytearray(rec.nbytes)
        while time.monotonic() < deadline + 0.2:
            reads += 2
            torn += not holds_for_tuple(rec.read())
            rec.read_into(raw)
            torn += not holds_for_flat(rec.format, raw)
        os.write(w, f"{reads} {torn}".encode())
        os._exit(0)
    os.close(w)
    readers.append((pid, r))

kills = recoveries = 0
k = 1
while time.monotonic() < deadline:
    pid = os.fork()
    if pid == 0:
        k = random.randrange(1, 1 << 40)
        while True:
            if k % 2:
                write_section_step(rec, k)
            else:
                rec.update(**invariant_state(k))
            k += 1
    time.sleep(random.uniform(0, 0.004))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    kills += 1
    held = rec.locked()
    snapshot = rec.read()  # never waits, repairs nothing
    before = rec.recoveries
    with rec.write(timeout=5):  # the next writer discards a dead section
        pass
    undone = rec.recoveries - before
    assert holds_for_tuple(snapshot), f"kill {kills}: read {snapshot}"
    assert holds_for_tuple(rec.read()), f"kill {kills}: after: {rec.read()}"
    assert undone in (0, 1), f"kill {kills}: recoveries went up by {undone}"
    assert held or undone == 0, f"kill {kills}: a recovery counted with no lock held"
    assert rec.sequence % 2 == 0

total_reads = total_torn = 0
for pid, r in readers:
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    reads, torn = map(int, os.read(r, 100).split())
    total_reads += reads
    total_torn += torn
assert total_torn == 0, f"{total_torn} torn of {total_reads}"
assert rec.recoveries <= kills
print(f"kills={kills} recoveries={rec.recoveries} reads={total_reads} torn=0")
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_writers_killed_at_random_points_never_let_a_reader_see_a_torn_state():
    """Holds: ~1,000 writer processes SIGKILLed at random points of
    update() and write() sections over 3 s, 2 reader processes validating
    throughout: 0 torn, every takeover by the next writer leaves a complete
    state, and a recovery is counted only when the dead writer held the
    lock."""
    assert_clean_exit(
        run_isolated(KILL_WRITERS_AT_RANDOM_POINTS, 3.0, 2, timeout=60),
        "writers killed at random points",
    )


# A writer process opens a half-written section and stops (SIGSTOP).
HALF_WRITE_THEN_WAIT = """
import sys, time
from record_helpers import open_shared_record

rec = open_shared_record(sys.argv[1], a="q", b="q", total="q")
w = rec.write().__enter__()
w.a = 10  # half a write
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not LINUX, reason="needs /dev/shm")
def test_stopped_writer_keeps_its_lock_until_killed_then_is_taken_over():
    """Holds: a writer process stopped (SIGSTOP) mid-section keeps its lock
    (writers time out: it is alive) while readers go on with the last
    committed snapshot; SIGKILLed while stopped, it is taken over by the
    next writer, which discards its section."""
    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**FIELDS))
    shm.close()
    try:
        rec = SeqRecord.create(map_shared_memory(shm.name), **FIELDS)
        rec.update(a=1, b=2, total=3)
        with PythonProcess(HALF_WRITE_THEN_WAIT, shm.name) as writer:
            writer.expect("ready")
            os.kill(writer.proc.pid, signal.SIGSTOP)
            assert Call(rec.read).join(5) == (1, 2, 3)  # at once
            with pytest.raises(TimeoutError):
                with rec.write(timeout=0.2):
                    pass
            writer.proc.kill()  # SIGKILL reaches a stopped process
            writer.proc.wait(10)
            with rec.write(timeout=5) as w:
                assert (w.a, w.b, w.total) == (1, 2, 3)
        assert rec.recoveries == 1 and not rec.locked()
        del rec, w
    finally:
        shm.unlink()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
@pytest.mark.parametrize("kind", ["seqlock", "private", "bytearray", "shared_mmap", "shared_memory"])
def test_fork_from_a_non_main_thread_while_others_hold_and_wait(kind):
    """Holds: the main thread holds the lock (a half-written section),
    three threads wait for it, and a fourth thread forks.  In the child the
    forker can write a private lock at once (and sees the pre-section
    state); a lock in shared memory stays the parent's (write(timeout=1)
    times out).  The parent's threads all finish."""
    keep = None
    if kind == "seqlock":
        obj = SeqLock()
    elif kind == "private":
        obj = SeqRecord(**FIELDS)
    elif kind == "bytearray":
        keep = bytearray(SeqRecord.buffer_size(**FIELDS))
        obj = SeqRecord.create(keep, **FIELDS)
    elif kind == "shared_mmap":
        keep = mmap.mmap(-1, SeqRecord.buffer_size(**FIELDS))
        obj = SeqRecord.create(keep, **FIELDS)
    else:
        keep = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**FIELDS))
        obj = SeqRecord.create(keep.buf, **FIELDS)
    private = kind in ("seqlock", "private", "bytearray")
    is_lock = isinstance(obj, SeqLock)
    if not is_lock:
        obj.update(a=1, b=2, total=3)

    if is_lock:
        obj.acquire_write()
    else:
        section = obj.write()
        w = section.__enter__()
        w.a = 10

    def wait_and_write():
        if is_lock:
            with obj:
                pass
        else:
            obj.update(a=100, b=200, total=300)

    waiters = [Call(wait_and_write) for _ in range(3)]
    time.sleep(0.1)

    def fork_and_write_in_child():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            code = 0
            try:
                if is_lock:
                    code = 0 if obj.acquire_write(timeout=1) else 3
                else:
                    try:
                        with obj.write(timeout=1) as cw:
                            cw.a = 7
                        code = 0 if obj.read() == (7, 2, 3) else 4
                    except TimeoutError:
                        code = 3
            finally:
                os._exit(code)
        return wait_for_pid(pid, 20)

    child_code = Call(fork_and_write_in_child).join(30)
    if is_lock:
        obj.release_write()
    else:
        w.b = 20
        w.total = 30
        section.__exit__(None, None, None)
    for waiter in waiters:
        waiter.join(10)
    assert child_code == (0 if private else 3)
    assert not obj.locked() and obj.sequence % 2 == 0
    if not is_lock:
        assert obj.read() == (100, 200, 300)
    if kind == "shared_memory":
        del obj, section, w
        keep.close()
        keep.unlink()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_inside_fn_of_the_readers_locking_pass_leaves_both_sides_a_free_lock():
    """Holds: fn of SeqLock.read forks during the locking pass (the lock
    word held by the reader): the child's read returns and its lock is
    free; so is the parent's."""
    lock = SeqLock(max_retries=0)
    state = [0, 0]
    passes = []

    def writer():
        with lock:
            state[0] += 1
            state[1] += 1

    def copy():
        passes.append(lock.locked())
        if len(passes) == 1:
            Call(writer).join(10)  # overlaps this pass: the next one locks
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return os.fork(), tuple(state)

    pid, snapshot = lock.read(copy)
    if pid == 0:
        free = lock.acquire_write(timeout=1)
        os._exit(0 if free and snapshot == (1, 1) and passes == [False, True] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert snapshot == (1, 1) and passes == [False, True]
    assert not lock.locked() and lock.read_fallbacks == 1


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
def test_ctrl_c_interrupts_a_reader_waiting_for_its_locking_pass():
    """Holds: a read() whose lock-free pass was overlapped (max_retries=0)
    waits for the lock word held by a long writer; SIGINT ends the wait
    with KeyboardInterrupt within the 50 ms wait slice."""
    lock = SeqLock(max_retries=0)
    release = threading.Event()
    holding = threading.Event()

    def long_writer():
        with lock:
            holding.set()
            release.wait(30)

    writer = []
    passes = []

    def copy():
        passes.append(1)
        if len(passes) == 1:
            writer.append(Call(long_writer))
            holding.wait(10)
        return 1

    timer = threading.Timer(0.3, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            lock.read(copy)
    finally:
        timer.cancel()
        release.set()
        writer[0].join(10)
    assert time.monotonic() - started < 5
    assert passes == [1] and not lock.locked()


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
def test_extreme_timeouts_against_a_held_lock(timeout, outcome):
    """Holds: timeouts at the edges end in the documented exception within
    their time, for both write() factories."""
    lock, rec = SeqLock(), SeqRecord(x="d")
    for take, hold in ((lock.write, lambda: lock), (rec.write, lambda: rec.write())):
        ready, release = threading.Event(), threading.Event()

        def holder():
            with hold():
                ready.set()
                release.wait(10)

        h = Call(holder)
        assert ready.wait(10)
        started = time.monotonic()
        try:
            with pytest.raises(outcome):
                with take(timeout=timeout):
                    pass
        finally:
            release.set()
            h.join(10)
        assert time.monotonic() - started < 3


@pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs setitimer")
def test_signal_handler_writing_while_the_main_thread_waits_for_the_lock():
    """Holds: SIGALRM every 5 ms runs a handler that writes the record (and
    reads it back) while the main thread waits for, or holds, the lock that
    another thread keeps taking for 10 ms at a time.  No deadlock; inside
    the main thread's own section the handler gets RuntimeError; every
    snapshot is consistent."""
    rec = SeqRecord(a="q", b="q")
    outcomes = []

    def handler(signum, frame):
        try:
            rec.update(a=len(outcomes), b=len(outcomes))
            a, b = rec.read()
            outcomes.append("wrote" if a == b else f"torn {a} {b}")
        except RuntimeError as exc:
            assert "already holds" in str(exc), exc
            outcomes.append("refused")

    def other_writer():
        for _ in range(30):
            with rec.write() as w:
                w.a = -1
                time.sleep(0.01)
                w.b = -1
                w.a = w.b = 0

    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.005, 0.005)
    try:
        other = Call(other_writer)
        while not other.done():
            rec.update(a=5, b=5)  # waits for the other writer
            with rec.write() as w:  # holds: a handler here is refused
                w.a = 7
                time.sleep(0.001)
                w.b = 7
            a, b = rec.read()
            assert a == b, (a, b)
        other.join(30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, previous)
    assert "wrote" in outcomes
    assert not [o for o in outcomes if o.startswith("torn")]
    assert not rec.locked() and rec.sequence % 2 == 0


RECORD_WAITS = {  # a record's readers never wait: only its writers do
    "update": lambda rec: rec.update(x=1.0),
    "write": lambda rec: rec.write().__enter__(),
    "write-timeout": lambda rec: rec.write(timeout=60).__enter__(),
}


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
@pytest.mark.parametrize("wait", list(RECORD_WAITS.values()), ids=list(RECORD_WAITS))
def test_ctrl_c_interrupts_every_wait_on_a_record_another_thread_writes(wait):
    """Holds: SIGINT ends each kind of wait on a SeqRecord whose write
    section another thread holds, promptly, and leaves the record usable
    (tests/test_seqlock.py covers the SeqLock's waits)."""
    rec = SeqRecord(x="d")
    inside, release = threading.Event(), threading.Event()

    def hold():
        with rec.write() as w:
            w.x = 5.0
            inside.set()
            release.wait(30)

    holder = Call(hold)
    assert inside.wait(10)
    timer = threading.Timer(0.2, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            wait(rec)
        assert time.monotonic() - started < 5
    finally:
        timer.cancel()
        release.set()
        holder.join(10)
    assert rec.read() == (5.0,) and not rec.locked() and rec.sequence == 2
