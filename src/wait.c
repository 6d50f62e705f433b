/*
 * wait.c - waiting for a seqlock from Python without blocking anyone else.
 *
 * Try first without waiting.  If we must wait, detach from the interpreter
 * (release the GIL; on a free-threaded build, let a stop-the-world pause
 * proceed without us) around each slice of the wait, and run signal
 * handlers between slices, so that the writer we wait for can finish, a
 * garbage collection it triggers cannot deadlock against us, and Ctrl-C
 * interrupts the wait.  A signal that arrives while the main thread sleeps
 * ends its slice at once (EINTR); the slice length bounds the delay in
 * every other case.
 */
#include "binding.h"

#include <errno.h>
#include <math.h>
#include <time.h>

#define WAIT_SLICE_NS (50 * 1000 * 1000LL)
#define NS_PER_SEC 1e9

static int64_t
monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int
timeout_to_ns(PyObject *timeout, int64_t *ns)
{
    if (timeout == NULL || timeout == Py_None) {
        *ns = -1;
        return 0;
    }
    double seconds = PyFloat_AsDouble(timeout);
    if (seconds == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    if (isnan(seconds)) {
        PyErr_SetString(PyExc_ValueError, "timeout value must not be NaN");
        return -1;
    }
    if (seconds == -1.0) {
        *ns = -1;
        return 0;
    }
    if (seconds < 0) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be positive");
        return -1;
    }
    if (seconds * NS_PER_SEC >= (double)INT64_MAX) {
        PyErr_SetString(PyExc_OverflowError, "timeout value is too large");
        return -1;
    }
    *ns = (int64_t)(seconds * NS_PER_SEC);
    return 0;
}

int
acquire_args_to_ns(int blocking, PyObject *timeout, int64_t *ns)
{
    if (timeout == Py_None) { /* as threading.Lock.acquire: -1, not None */
        PyErr_SetString(PyExc_TypeError,
                        "timeout must be a number (-1 waits for ever), not "
                        "None");
        return -1;
    }
    if (timeout_to_ns(timeout, ns) < 0) {
        return -1;
    }
    if (!blocking) {
        if (*ns != -1) {
            PyErr_SetString(PyExc_ValueError,
                            "can't specify a timeout for a non-blocking call");
            return -1;
        }
        *ns = 0;
    }
    return 0;
}

/* The shape shared by both waits: slices of at most WAIT_SLICE_NS until
 * the core says something other than "not yet". */
typedef int (*core_wait)(seqlock_t *sl, int64_t timeout_ns, unsigned *seq);

static int
wait_in_slices(core_wait wait, seqlock_t *sl, int64_t timeout_ns,
               unsigned *seq)
{
    int err = wait(sl, 0, seq);
    if (err != ETIMEDOUT || timeout_ns == 0) {
        return err;
    }
    int64_t deadline = timeout_ns < 0 ? -1 : monotonic_ns() + timeout_ns;
    for (;;) {
        int64_t slice = WAIT_SLICE_NS;
        if (deadline >= 0) {
            int64_t left = deadline - monotonic_ns();
            if (left <= 0) {
                return ETIMEDOUT;
            }
            slice = left < slice ? left : slice;
        }
        Py_BEGIN_ALLOW_THREADS
        err = wait(sl, slice, seq);
        Py_END_ALLOW_THREADS
        if (err != ETIMEDOUT && err != EINTR) {
            return err;
        }
        if (PyErr_CheckSignals() < 0) {
            return -1;
        }
    }
}

static int
core_write_lock(seqlock_t *sl, int64_t timeout_ns, unsigned *unused)
{
    (void)unused;
    return seqlock_write_lock_timed(sl, timeout_ns);
}

static int
core_lock_excl(seqlock_t *sl, int64_t timeout_ns, unsigned *unused)
{
    (void)unused;
    return seqlock_lock_excl_timed(sl, timeout_ns);
}

static int
core_read_begin(seqlock_t *sl, int64_t timeout_ns, unsigned *seq)
{
    return seqlock_read_begin_timed(sl, timeout_ns, seq);
}

/* A core result as a WAIT_* outcome; EDEADLK becomes RuntimeError(why). */
static int
outcome(int err, const char *why)
{
    switch (err) {
    case 0:
        return WAIT_DONE;
    case EOWNERDEAD:
        return WAIT_OWNER_DIED;
    case ETIMEDOUT:
        return WAIT_TIMED_OUT;
    case EDEADLK:
        PyErr_SetString(PyExc_RuntimeError, why);
        return -1;
    default: /* -1: a signal handler raised */
        return -1;
    }
}

int
entered_or_timed_out(int taken)
{
    if (taken == 0) {
        PyErr_SetString(PyExc_TimeoutError,
                        "timed out waiting for the write lock");
    }
    return taken > 0 ? 0 : -1;
}

#define READING_WHILE_WRITING \
    "cannot read while this thread holds the write lock"

int
wait_write_lock(seqlock_t *sl, int64_t timeout_ns)
{
    unsigned unused;
    return outcome(wait_in_slices(core_write_lock, sl, timeout_ns, &unused),
                   "this thread already holds the write lock");
}

int
wait_read_begin(const seqlock_t *sl, unsigned *seq)
{
    return outcome(wait_in_slices(core_read_begin, (seqlock_t *)sl, -1, seq),
                   READING_WHILE_WRITING);
}

int
wait_lock_excl(seqlock_t *sl)
{
    unsigned unused;
    return outcome(wait_in_slices(core_lock_excl, sl, -1, &unused),
                   READING_WHILE_WRITING);
}

int
fork_guard_repair(fork_guard *g, seqlock_t *sl, record_header *undo)
{
    uint32_t word = atomic_load_explicit(&sl->owner, memory_order_relaxed);
    uint32_t owner = word & SEQLOCK_OWNER_MASK;
    uint32_t me = seqlock_thread_id();
    /* A dead owner is not a fork's doing: the waits report it
     * (EOWNERDEAD) and the caller recovers.  Only a live thread of
     * another process, which cannot hold a private lock, is. */
    if (owner == 0 || owner == me || seqlock_thread_in_this_process(owner)
        || !seqlock_thread_alive(owner)) {
        return 0;
    }
    int forking_thread_held_it =
        atomic_load_explicit(&g->holder, memory_order_relaxed)
        == PyThread_get_thread_ident();
    if (!atomic_compare_exchange_strong_explicit(
            &sl->owner, &word, me | (word & SEQLOCK_WAITERS),
            memory_order_acquire, memory_order_relaxed)) {
        return 0; /* another thread of ours repaired it first */
    }
    if (forking_thread_held_it) {
        return 1; /* ours now under our new thread id; sequence untouched */
    }
    if (seqlock_sequence(sl) & 1u) {
        if (undo != NULL) {
            record_recover(undo); /* put the data back as they were */
        }
        write_sequnlock(sl); /* close the orphaned section, wake readers */
    }
    else {
        read_sequnlock_excl(sl);
    }
    return 1;
}

int
take_lock_excl(seqlock_t *sl, fork_guard *guard, record_header *undo)
{
    uint32_t free_word = 0;
    if (SEQLOCK_LIKELY(atomic_compare_exchange_strong_explicit(
            &sl->owner, &free_word, seqlock_thread_id(),
            memory_order_acquire, memory_order_relaxed))) {
        return 0;
    }
    if (guard != NULL) {
        (void)fork_guard_repair(guard, sl, undo);
    }
    int got = wait_lock_excl(sl);
    if (got != WAIT_OWNER_DIED) {
        return got < 0 ? -1 : 0;
    }
    if (undo != NULL) {
        record_recover(undo);
    }
    unsigned seq = seqlock_sequence(sl);
    if (seq & 1u) { /* close the dead owner's section */
        atomic_store_explicit(&sl->sequence, seq + 1, memory_order_release);
    }
    return 1;
}
