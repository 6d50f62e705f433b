"""A write lock names its owner so that nobody mistakes it for someone else.

A record in shared memory may be written by processes in different PID
namespaces (containers sharing /dev/shm with the host), whose thread ids
mean nothing to each other, and by processes whose pid is reused after
they die.  Whatever the lock word stores, a live writer keeps its lock
wherever its waiters run, two writers are never taken for one, and a dead
writer is recovered even when its pid now names another process.

Each scenario runs its processes through ``unshare --pid --fork`` and
skips where PID namespaces are refused (not root).
"""
import contextlib
import sys
import time
from multiprocessing import shared_memory

import pytest

from process_helpers import (
    HOLD_A_SECTION_SCRIPT,
    PythonProcess,
    free_pid_number,
    require_pid_namespaces,
    run_python,
)
from record_helpers import map_shared_memory
from seqlock_py import SeqRecord
from workers import WOKEN

FIELDS = dict(a="q", b="q", total="q")  # invariant: a + b == total
BEFORE = (1, 2, 3)  # the last complete write before each scenario
AFTER = (10, 20, 30)  # what the namespaced writer's section completes

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="needs Linux: PID namespaces, /dev/shm"
)


@pytest.fixture
def shared_record():
    """A record in a SharedMemory block (/dev/shm) holding BEFORE."""
    require_pid_namespaces()
    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(**FIELDS))
    shm.close()  # the block lives on until unlink(); the test maps it itself
    try:
        rec = SeqRecord.create(map_shared_memory(shm.name), **FIELDS)
        rec.update(**dict(zip(FIELDS, BEFORE)))
        yield {"rec": rec, "name": shm.name}
    finally:
        shm.unlink()


# Child scripts: argv[1] is the SharedMemory block's name.

# Try to write within 0.5 s: exit 0 on TimeoutError (the lock is held),
# 1 if the write went through.  Must run as pid 1 when argv[2] == "pid1".
TRY_TO_WRITE = """
import os, sys
from record_helpers import open_shared_record

if sys.argv[2:] == ["pid1"]:
    assert os.getpid() == 1, f"not pid 1 of a new namespace: {os.getpid()}"
rec = open_shared_record(sys.argv[1], a="q", b="q", total="q")
try:
    with rec.write(timeout=0.5):
        print("took the write lock while its holder was alive", flush=True)
        sys.exit(1)
except TimeoutError:
    sys.exit(0)
"""

# pid 1 of its namespace: a writer child (pid 2) dies (SIGKILL) inside a
# half-written section; a long-running process is then given the dead
# writer's pid (through ns_last_pid); read() must still recover the last
# complete state and a write must go through.
DEAD_WRITERS_PID_REUSED = """
import mmap, os, signal, subprocess, sys, threading, time
from seqlock_py import SeqRecord
from process_helpers import next_pid_will_be

def done(code, *message):
    print(*message, flush=True)
    os._exit(code)

fields = dict(a="q", b="q", total="q")
buf = mmap.mmap(-1, SeqRecord.buffer_size(**fields))  # shared with the fork
rec = SeqRecord.create(buf, **fields)
rec.update(a=1, b=2, total=3)
ready_r, ready_w = os.pipe()
writer = os.fork()
if writer == 0:
    section = rec.write()
    w = section.__enter__()
    w.a = 10  # half a write
    os.write(ready_w, b"x")
    time.sleep(60)  # killed here
    os._exit(3)
os.read(ready_r, 1)
os.kill(writer, signal.SIGKILL)
os.waitpid(writer, 0)  # reaped: its pid is free again

for attempt in range(5):
    next_pid_will_be(writer)
    sleeper = subprocess.Popen(["sleep", "60"])
    if sleeper.pid == writer:
        break
    sleeper.kill()
    sleeper.wait()
else:
    done(77, f"could not give pid {writer} to a new process")

try:
    snapshot = []
    reader = threading.Thread(target=lambda: snapshot.append(rec.read()), daemon=True)
    reader.start()
    reader.join(10)
    if not snapshot:
        done(1, f"read() still waiting after 10 s for the dead writer {writer}, "
                f"whose pid now names a live process")
    if snapshot[0] != (1, 2, 3):
        done(1, f"read() returned {snapshot[0]}, not the last complete state")
    try:
        with rec.write(timeout=5) as w:
            w.update(a=5, total=7)
    except TimeoutError:
        done(1, "write(timeout=5) timed out waiting for the dead writer")
    if rec.read() != (5, 2, 7):
        done(1, f"after the write: {rec.read()}")
finally:
    sleeper.kill()
done(0, "ok")
"""


def test_live_writer_in_another_pid_namespace_keeps_its_lock(shared_record):
    rec = shared_record["rec"]
    # The writer's thread id in its namespace is a number that names no
    # thread here, as it would on a host running the writer in a container.
    with PythonProcess(HOLD_A_SECTION_SCRIPT, shared_record["name"], free_pid_number(),
                       pid_namespace=True) as writer:
        writer.expect("ready")
        with pytest.raises(TimeoutError):
            with rec.write(timeout=0.5):
                pass
        assert rec.read() == BEFORE  # the last complete write, never half of one
        writer.tell("finish")
        code, output = writer.finish()
    assert code == 0, f"the writer's own section failed:\n{output}"
    assert rec.read() == AFTER


def test_live_writer_outside_the_pid_namespace_keeps_its_lock(shared_record):
    rec = shared_record["rec"]
    section = rec.write()
    w = section.__enter__()
    w.a = 10  # half a write
    code, output = run_python(TRY_TO_WRITE, shared_record["name"], pid_namespace=True)
    assert code == 0, f"a process in another PID namespace did not wait:\n{output}"
    w.b = 20
    w.total = 30
    section.__exit__(None, None, None)
    assert rec.read() == AFTER


def test_processes_that_are_both_pid_1_do_not_share_a_lock(shared_record):
    rec = shared_record["rec"]
    with PythonProcess(HOLD_A_SECTION_SCRIPT, shared_record["name"], pid_namespace=True) as holder:
        holder.expect("ready")
        code, output = run_python(TRY_TO_WRITE, shared_record["name"], "pid1", pid_namespace=True)
        assert code == 0, f"the second pid 1 did not wait for the first:\n{output}"
        holder.tell("finish")
        holder_code, holder_output = holder.finish()
    assert holder_code == 0, f"the holder's own section failed:\n{holder_output}"
    assert rec.read() == AFTER


def test_dead_writers_reused_pid_does_not_keep_waiters_waiting():
    require_pid_namespaces()
    code, output = run_python(DEAD_WRITERS_PID_REUSED, pid_namespace=True)
    assert code == 0, output


# ---- killed processes that had the live holder's id in their namespace -------


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


# ---- a waiter in another namespace -------------------------------------------


NAMESPACE_WAITER_SCRIPT = """
import os, sys, time
from record_helpers import open_shared_record
assert os.getpid() == 1
rec = open_shared_record(sys.argv[1], x="q")
seq = rec.sequence
print("ready", flush=True)
woken = rec.wait(seq, 20)
print("woken", woken, tuple(rec.read()), time.monotonic(), flush=True)
"""


@pytest.mark.timeout(60)
def test_a_waiter_in_another_pid_namespace_is_woken_by_a_writer_outside():
    """Held: the futex is shared (not PRIVATE), keyed by the page, so a
    waiter as pid 1 of its own namespace wakes for a writer outside."""
    require_pid_namespaces()
    from multiprocessing import shared_memory

    shm = shared_memory.SharedMemory(create=True, size=SeqRecord.buffer_size(x="q"))
    try:
        rec = SeqRecord.create(shm.buf, x="q")
        with PythonProcess(NAMESPACE_WAITER_SCRIPT, shm.name, pid_namespace=True) as child:
            child.expect("ready")
            time.sleep(0.2)
            written_at = time.monotonic()
            rec.update(x=42)
            line = child.expect("woken", timeout=10)
            code, out = child.finish()
        assert code == 0, out
        _, woken, values, when = line.split(" ", 3)
        assert woken == "True" and values == "(42,)"
        assert float(when) - written_at < WOKEN
        del rec
    finally:
        shm.close()
        shm.unlink()
