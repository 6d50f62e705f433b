/*
 * lock_path.c - the one path by which SeqLock and SeqRecord take, wait
 * for and release their lock from Python, and the timeouts they accept.
 *
 * Never wait attached: try first without waiting; if we must wait, detach
 * from the interpreter (release the GIL; on a free-threaded build, let a
 * stop-the-world pause proceed without us) around each slice of the wait,
 * and run signal handlers between slices, so that the writer we wait for
 * can finish, a garbage collection it triggers cannot deadlock against us,
 * and Ctrl-C interrupts the wait.  The core decides who holds the lock
 * (seqlock.h: a robust mutex and a per-thread token), inside the very call
 * that takes it, so no window exists in which a taken lock names someone
 * else; this file only writes what the core tells it to.
 *
 * While a thread of this process holds a lock, the lock's owner object
 * holds a reference to itself: the mutex sits on that thread's robust
 * list, so its memory must not be freed (or a buffer unmapped) under it.
 *
 * A thread never sleeps for a lock while it holds another for a reader's
 * locking pass: before it sleeps it lets those go (the pass is then
 * checked as a lock-free one), so that a read whose fn writes another
 * lock cannot deadlock against a read of that lock whose fn writes this
 * one.
 */
#include "lock_path.h"
#include "open_memory.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef __linux__
#include <sys/syscall.h>
#endif

#define WAIT_SLICE_NS (50 * 1000 * 1000LL)
/* A main thread's wait for news sleeps in one piece: a signal interrupts
 * the futex wait (EINTR: CPython installs its handlers without
 * SA_RESTART, and a futex wait with a timeout is never restarted
 * anyway), then its handlers run (PyErr_CheckSignals) and the wait goes
 * on.  This slice is only the backstop for a signal that lands between
 * that check and the next sleep, or in another thread (the kernel offers
 * a process's signal to its main thread first): its handler then runs at
 * the latest a slice later.  Long, so that an idle waiter costs about
 * nothing (CPython's own lock waits have no backstop at all). */
#define SIGNAL_BACKSTOP_NS (1000 * 1000 * 1000LL)

/* ---- binding ---- */

static void
repair_orphaned_record(void *record)
{
    (void)record_repair(&((const bound_record *)record)->view);
}

/* 1 if b is a record's that this process may not write. */
static int
read_only(const bound_lock *b)
{
    return b->record != NULL && b->record->readonly;
}

void
bound_lock_init(bound_lock *b, seqlock_t *sl, const bound_record *record,
                PyObject *owner, int memory)
{
    b->sl = sl;
    b->record = record;
    b->object = owner;
    atomic_init(&b->held_refs, 0);
    read_budget_init(&b->budget, DEFAULT_MAX_RETRIES);
    b->private.next = b->private.prev = NULL;
    atomic_init(&b->anchor, NULL);
    if ((memory & BOUND_PRIVATE) && !(memory & BOUND_READ_ONLY)) {
        seqlock_track_private(&b->private, sl,
                              record != NULL ? repair_orphaned_record : NULL,
                              (void *)record);
    }
}

void
bound_lock_fini(bound_lock *b)
{
    seqlock_untrack_private(&b->private);
}

/* ---- memory a file backs ---- */

void
set_memory_gone(void)
{
    PyObject *exc = PyObject_CallFunction(
        PyExc_OSError, "is", EFAULT,
        "the record's memory is gone: the file behind it was truncated "
        "(by another process?)");
    if (exc != NULL) {
        PyErr_SetObject(PyExc_OSError, exc);
        Py_DECREF(exc);
    }
}

int
set_record_closed(const bound_record *r)
{
    PyErr_Format(PyExc_ValueError, "the %s is closed",
                 r != NULL && r->kind != NULL ? r->kind : "record");
    return -1;
}

/* The record whose buffer this thread is releasing (record_memory_gone()),
 * else NULL: a close() of it from code the release runs has nothing to
 * wait for, where another thread's close() waits for the release. */
static _Thread_local const bound_record *releasing;

int
claim_close(bound_record *r)
{
    for (;;) {
        uint32_t state = RECORD_OPEN;
        if (atomic_compare_exchange_strong(&r->closed, &state,
                                           RECORD_CLOSING)) {
            return 1;
        }
        if (state == RECORD_CLOSED || releasing == r) {
            return 0;
        }
        struct timespec nap = {0, 100 * 1000};
        Py_BEGIN_ALLOW_THREADS
        (void)nanosleep(&nap, NULL);
        Py_END_ALLOW_THREADS
    }
}

int
record_memory_opened(const bound_record *r, const void *memory, size_t len)
{
    if (open_memory_add(r, memory, len) != 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

int
refuse_open_memory(const char *call, const void *p, size_t len)
{
    if (open_memory_overlaps_cached(p, len)) {
        PyErr_Format(PyExc_ValueError,
                     "%s cannot copy into the memory of a record or ring "
                     "this process has open (a view of the buffer it lives "
                     "in): give it a buffer of its own", call);
        return -1;
    }
    return 0;
}

void
record_memory_gone(bound_record *r, bound_lock *b, Py_buffer *view)
{
    atomic_store_explicit(&r->closed, RECORD_CLOSING, memory_order_release);
    open_memory_remove(r);
    if (view->obj != NULL) {
        Py_buffer held = *view;
        bound_lock_fini(b); /* before its memory can go */
        view->obj = NULL;
        const bound_record *outer = releasing; /* releases can nest */
        releasing = r;
        PyBuffer_Release(&held);
        releasing = outer;
    }
    atomic_store_explicit(&r->closed, RECORD_CLOSED, memory_order_release);
}

int
record_pin_failed(const bound_record *r, in_use_status status)
{
    switch (status) {
    case IN_USE_CLOSED:
        return set_record_closed(r);
    case IN_USE_NO_MEMORY:
        PyErr_NoMemory();
        return -1;
    default:
        PyErr_Format(PyExc_RuntimeError,
                     "more than %d calls into records nest on this thread "
                     "(signal handlers inside waits?)", IN_USE_SLOTS);
        return -1;
    }
}

int
call_guarded(const bound_record *r, int (*fn)(void *arg), void *arg,
             int *result)
{
    if (r == NULL || r->guarded == NULL) {
        *result = fn(arg);
        return 0;
    }
    bus_guard guard;
    bus_guard_arm(&guard, r->guarded, r->guarded_len);
    if (bus_guard_enter(&guard) != 0) {
        bus_guard_left(&guard);
        set_memory_gone();
        return -1;
    }
    *result = fn(arg);
    bus_guard_leave(&guard);
    return 0;
}

/* ---- locking passes ---- */

/* The locking passes this thread is inside (read_consistently()), the
 * innermost first: each frame lives on its reader's C stack. */
typedef struct locking_pass {
    bound_lock *lock;
    int given_up; /* its lock word let go for a wait */
    struct locking_pass *outer;
} locking_pass;

static _Thread_local locking_pass *current_pass;

/* About to sleep: let go of the lock words this thread holds for
 * locking passes.  A pass whose lock word is gone is checked, when its
 * copy returns, as a lock-free pass is (did a write overlap it?). */
static void
give_up_locking_passes(void)
{
    for (locking_pass *p = current_pass; p != NULL; p = p->outer) {
        if (!p->given_up) {
            p->given_up = 1;
            unlock_excl(p->lock);
        }
    }
}

/* ---- waiting ---- */

/* A core wait: 0 when done, else an errno value (ETIMEDOUT: not yet). */
typedef int (*core_wait)(seqlock_t *sl, int64_t timeout_ns, void *ctx);

static int check_record_lock(bound_lock *b);
static int core_lock_excl(seqlock_t *sl, int64_t timeout_ns, void *unused);

/* Slices of at most slice_ns (< 0: one slice), detached, until the core
 * says something other than "not yet" (or a signal handler raises: -1).
 * The first try is made attached; before the first sleep, this thread's
 * locking passes are given up, and a lock is not waited for if it is a
 * record's whose words say it is not set up (it was, by create()):
 * nothing would set it up. */
static int
wait_in_slices(core_wait wait, bound_lock *b, int64_t timeout_ns,
               int64_t slice_ns, void *ctx)
{
    seqlock_t *sl = b->sl;
    int err = wait(sl, 0, ctx);
    if (err != ETIMEDOUT || timeout_ns == 0) {
        return err;
    }
    give_up_locking_passes();
    if (wait == core_lock_excl && check_record_lock(b) < 0) {
        return -1;
    }
    int64_t deadline = seqlock_deadline(timeout_ns);
    for (;;) {
        int64_t slice = slice_ns;
        if (deadline >= 0) {
            int64_t left = seqlock_time_left(deadline);
            if (left == 0) {
                return ETIMEDOUT;
            }
            slice = slice < 0 || left < slice ? left : slice;
        }
        Py_BEGIN_ALLOW_THREADS
        err = wait(sl, slice, ctx);
        Py_END_ALLOW_THREADS
        if (err != ETIMEDOUT && err != EINTR) {
            return err;
        }
        if (PyErr_CheckSignals() < 0) {
            return -1;
        }
        if (b->record != NULL && record_is_closed(b->record)) {
            return set_record_closed(b->record); /* close() woke us, or will */
        }
    }
}

static int
core_lock_excl(seqlock_t *sl, int64_t timeout_ns, void *unused)
{
    (void)unused;
    return seqlock_lock_excl_timed(sl, timeout_ns);
}

static int
core_read_begin(seqlock_t *sl, int64_t timeout_ns, void *seq)
{
    return seqlock_read_begin_timed(sl, timeout_ns, seq);
}

#define WRITING_TWICE "this thread already holds the write lock"
#define LOCK_CORRUPTED                                                      \
    "the lock's words are corrupted (rewritten by another process that "  \
    "maps its memory?): it cannot be taken"
#define NAMED_BUT_NOT_HELD                                                  \
    "the lock's word names this thread, which holds no lock at this "      \
    "address: the same record or ring is open through another mapping of " \
    "its memory and written inside a section there (write through one "    \
    "mapping), or another process rewrote the word"
#define READING_WHILE_WRITING \
    "cannot read while this thread holds the write lock"

/* A core result as a lock_status; EDEADLK becomes RuntimeError(why). */
static lock_status
status_of(int err, const char *why)
{
    switch (err) {
    case 0:
        return LOCK_TAKEN;
    case EOWNERDEAD:
        return LOCK_TAKEN_OVER;
    case ETIMEDOUT:
        return LOCK_TIMED_OUT;
    case EDEADLK:
        PyErr_SetString(PyExc_RuntimeError, why);
        return LOCK_FAILED;
    case -1: /* a signal handler raised */
        return LOCK_FAILED;
    case ENOLCK:
        PyErr_Format(PyExc_RuntimeError,
                     "this thread holds %d seqlock_py locks already: the "
                     "kernel could not tell the next one's waiters if the "
                     "thread died", SEQLOCK_MAX_HELD);
        return LOCK_FAILED;
    case ENOMEM:
        PyErr_NoMemory();
        return LOCK_FAILED;
    case EINVAL:
    case ENOTRECOVERABLE:
        PyErr_SetString(PyExc_RuntimeError, LOCK_CORRUPTED);
        return LOCK_FAILED;
    default:
        PyErr_Format(PyExc_RuntimeError, "the lock's mutex is unusable: %s",
                     strerror(err));
        return LOCK_FAILED;
    }
}

#define DEAD_WRITER \
    "the write lock's owner thread exited inside a write section"
#define READ_ONLY_RECORD \
    "the record is read-only (attached to a read-only buffer): it cannot " \
    "be written"

/* A SeqLock guards Python objects, which no copy can put back: a writer
 * that takes a dead thread's section over is warned; a reader cannot use
 * it (RuntimeError).  Either way, a section that is not taken over is
 * left abandoned (seqlock_abandon): still open, for the next writer. */
static int
warn_taken_over(void)
{
    return PyErr_WarnEx(PyExc_RuntimeWarning,
                        "took over a write lock whose owner thread exited "
                        "without releasing it", 1);
}

/* The lock is ours now: take our reference to its owner, and give back
 * those of holders that died holding it (threads of this process that
 * exited inside a section, or that a fork left behind): none else can
 * hold it.  The holder alone writes held_refs. */
static void
keep_owner(bound_lock *b)
{
    Py_INCREF(b->object);
    uint64_t stale = atomic_exchange_explicit(&b->held_refs, 1,
                                              memory_order_relaxed);
    for (; stale > 0; stale--) {
        Py_DECREF(b->object); /* never the last: ours is taken */
    }
}

/* Before the lock goes: we hold no reference for it any more. */
static void
forget_owner(bound_lock *b)
{
    atomic_store_explicit(&b->held_refs, 0, memory_order_relaxed);
}

static lock_status
abandon_dead_section(bound_lock *b)
{
    PyObject *owner = b->object;
    forget_owner(b);
    if (seqlock_abandon(b->sl) == 0) {
        Py_DECREF(owner);
    } /* else the beacon may still be on our robust list: keep the memory */
    return LOCK_FAILED;
}

int
entered_or_timed_out(lock_status taken)
{
    if (taken == LOCK_TIMED_OUT) {
        PyErr_SetString(PyExc_TimeoutError,
                        "timed out waiting for the write lock");
    }
    return taken > 0 ? 0 : -1;
}

/* ---- write sections ---- */

/* 0 if the record's lock words are those of a set-up lock, else -1 with
 * RuntimeError.  A record's lock was set up by create(): a `ready` word
 * that says otherwise was rewritten, and waiting for a "first taker" to
 * set it up would wait for ever.  (The core refuses a garbage one.) */
static int
check_record_lock(bound_lock *b)
{
    if (b->record != NULL && seqlock_check(b->sl) != 0) {
        PyErr_SetString(PyExc_RuntimeError, LOCK_CORRUPTED);
        return -1;
    }
    return 0;
}

/* Take the lock word within timeout_ns, the owner kept alive while this
 * thread holds it; `misuse` is the RuntimeError's message if the thread
 * holds it already. */
lock_status
take_lock_word(bound_lock *b, int64_t timeout_ns, const char *misuse)
{
    int err = wait_in_slices(core_lock_excl, b, timeout_ns, WAIT_SLICE_NS,
                             NULL);
    if (err == EDEADLK && !seqlock_held_by_me(b->sl)) {
        /* the word names this thread, which holds no lock here */
        misuse = NAMED_BUT_NOT_HELD;
    }
    lock_status status = status_of(err, misuse);
    if (status > LOCK_TIMED_OUT) {
        keep_owner(b);
    }
    return status;
}

lock_status
lock_write(bound_lock *b, int64_t timeout_ns)
{
    if (read_only(b)) {
        PyErr_SetString(PyExc_TypeError, READ_ONLY_RECORD);
        return LOCK_FAILED;
    }
    lock_status status = take_lock_word(b, timeout_ns, WRITING_TWICE);
    if (status <= LOCK_TIMED_OUT) {
        return status;
    }
    if (b->record != NULL) {
        record_open_section(&b->record->view, status == LOCK_TAKEN_OVER);
    }
    else {
        (void)seqlock_open_section(b->sl);
    }
    if (status == LOCK_TAKEN_OVER && b->record == NULL
        && warn_taken_over() < 0) {
        return abandon_dead_section(b); /* refused: readers keep raising */
    }
    return status;
}

/* 0 if the calling thread holds a write section of b, else RuntimeError.
 * From the thread's own record of what it holds (seqlock_held()), never
 * the lock's shared words. */
static int
check_write_holder(bound_lock *b)
{
    switch (seqlock_held(b->sl)) {
    case SEQLOCK_HOLDS_SECTION:
        return 0;
    case SEQLOCK_HOLDS_WORD: /* a locking pass, not a write section */
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return -1;
    default:
        PyErr_SetString(PyExc_RuntimeError,
                        seqlock_is_locked(b->sl)
                            ? "cannot release a write lock held by another "
                              "thread"
                            : "release unlocked lock");
        return -1;
    }
}

/* Give the lock word back and our reference to the owner (last: it may
 * free b).  If the C library would not release the beacon (its words were
 * rewritten during the section), it may still be on this thread's robust
 * list: the memory must never go, so the owner keeps its reference for
 * ever (and with it the buffer's export), and RuntimeError says so. */
int
release_lock(bound_lock *b)
{
    PyObject *owner = b->object;
    forget_owner(b);
    if (seqlock_unlock(b->sl) != 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the lock's beacon was rewritten during the section "
                        "and could not be released: the lock is corrupted "
                        "(its memory is kept mapped for good)");
        return -1;
    }
    Py_DECREF(owner);
    return 0;
}

static int
end_write(bound_lock *b, int rollback)
{
    if (check_write_holder(b) < 0) {
        return -1;
    }
    if (b->record != NULL) {
        record_close_section(&b->record->view, rollback);
    }
    else {
        (void)seqlock_close_section(b->sl); /* even; wakes sleepers */
    }
    return release_lock(b);
}

int
unlock_write(bound_lock *b)
{
    return end_write(b, 0);
}

int
abort_write(bound_lock *b)
{
    return end_write(b, 1);
}

/* ---- the reader's locking pass, and readers that wait ---- */

lock_status
lock_excl(bound_lock *b, int64_t timeout_ns)
{
    lock_status status = take_lock_word(b, timeout_ns,
                                        READING_WHILE_WRITING);
    if (status != LOCK_TAKEN_OVER) {
        return status;
    }
    /* The dead holder's section: a record discards and closes it; a
     * SeqLock's reader cannot use it. */
    if (b->record != NULL) {
        record_close_dead_section(&b->record->view);
    }
    else if (seqlock_sequence(b->sl) & 1u) {
        PyErr_SetString(PyExc_RuntimeError, DEAD_WRITER);
        return abandon_dead_section(b);
    }
    return status;
}

void
unlock_excl(bound_lock *b)
{
    PyObject *pending = PyErr_GetRaisedException(); /* copy()'s, say */
    if (release_lock(b) < 0) {
        PyErr_WriteUnraisable(b->object);
    }
    PyErr_SetRaisedException(pending);
}

int
locking_pass_of(bound_lock *b, int (*copy)(void *ctx, uint64_t seq),
                void *ctx, uint64_t *seq, int *result)
{
    if (lock_excl(b, -1) < 0) {
        return -1;
    }
    locking_pass pass = {b, 0, current_pass};
    current_pass = &pass;
    *seq = seqlock_sequence(b->sl); /* even: no section is open */
    *result = copy(ctx, *seq);
    current_pass = pass.outer;
    if (!pass.given_up) {
        unlock_excl(b);
        return 1;
    }
    return !seqlock_read_retry(b->sl, *seq);
}

int
begin_read_waiting(bound_lock *b, uint64_t *seq)
{
    int err = wait_in_slices(core_read_begin, b, -1, WAIT_SLICE_NS, seq);
    if (err == EOWNERDEAD) {
        PyErr_SetString(PyExc_RuntimeError, DEAD_WRITER);
        return -1;
    }
    return status_of(err, READING_WHILE_WRITING) == LOCK_TAKEN ? 0 : -1;
}

/* ---- waiting for news ---- */

typedef struct {
    seqlock_t *sl;
    const bound_lock *b;
    uint64_t seq;
    int64_t timeout_ns;
    const _Atomic uint32_t *cancel;
    unsigned flags;
    uint64_t now;
} change_wait;

static int
wait_for_change_in(void *ctx)
{
    change_wait *w = ctx;
    return seqlock_wait_for_change_flags(w->sl, w->seq, w->timeout_ns,
                                         w->cancel, w->flags, &w->now);
}

/* The core's wait, guarded if the memory needs it (a truncated file:
 * EFAULT).  Runs detached: no exception is set here. */
static int
core_wait_for_change(seqlock_t *sl, int64_t timeout_ns, void *ctx)
{
    change_wait *w = ctx;
    w->sl = sl;
    w->timeout_ns = timeout_ns;
    const bound_record *r = w->b->record;
    if (r == NULL || r->guarded == NULL) {
        return wait_for_change_in(w);
    }
    bus_guard guard;
    bus_guard_arm(&guard, r->guarded, r->guarded_len);
    if (bus_guard_enter(&guard) != 0) {
        bus_guard_left(&guard);
        return EFAULT;
    }
    int err = wait_for_change_in(w);
    bus_guard_leave(&guard);
    return err;
}

/* CPython runs signal handlers only in its main thread (the process's
 * first, as a rule): a wait elsewhere has no handler to wake up for, so
 * it sleeps in one piece, woken only by the news (or the core's nap). */
static int
signal_handlers_run_here(void)
{
#ifdef __linux__
    return syscall(SYS_gettid) == getpid();
#else
    return 1;
#endif
}

int
wait_for_change(bound_lock *b, uint64_t seq, int64_t timeout_ns,
                const _Atomic uint32_t *cancel, int long_naps, uint64_t *now)
{
    /* A record's waiter is a reader: it never takes the lock, not even to
     * roll back a dead writer's section (the next writer does that; its
     * news is the waiter's), so it writes nothing the record's writers
     * use and trusts nothing in the record.  It waits through such a
     * section; one that may not write the record at all does not even
     * announce itself (it polls). */
    unsigned flags = long_naps ? SEQLOCK_WAIT_LONG_NAPS : 0;
    if (b->record != NULL) {
        /* Woken by close(): back here, to raise ValueError. */
        flags |= SEQLOCK_WAIT_THROUGH_DEATH | SEQLOCK_WAIT_WAKE_RETURNS
                 | (read_only(b) ? SEQLOCK_WAIT_READ_ONLY : 0);
        if (record_pin(b->record) < 0) {
            return -1;
        }
    }
    if (b->record != NULL && b->record->guarded != NULL) {
        (void)bus_guard_reassert(); /* a wait may be long: make sure */
    }
    change_wait w = {b->sl, b, seq, 0, cancel, flags, 0};
    /* Two system calls: not for a wait that only looks. */
    int64_t slice = timeout_ns != 0 && signal_handlers_run_here()
                        ? SIGNAL_BACKSTOP_NS
                        : -1;
    int err = wait_in_slices(core_wait_for_change, b, timeout_ns, slice, &w);
    if (b->record != NULL) {
        record_unpin(b->record);
    }
    switch (err) {
    case 0:
        *now = w.now;
        return 1;
    case ETIMEDOUT:
    case ECANCELED:
        return 0;
    case EDEADLK:
        PyErr_SetString(PyExc_RuntimeError,
                        "cannot wait for a write while this thread holds the "
                        "write lock");
        return -1;
    case EOWNERDEAD: /* a SeqLock's: as its readers */
        PyErr_SetString(PyExc_RuntimeError, DEAD_WRITER);
        return -1;
    case EFAULT:
        set_memory_gone();
        return -1;
    default: /* -1: a signal handler raised */
        return -1;
    }
}

/* The wait of wait_for_change_unheld(), detached: 0, a core error,
 * OWNER_CLOSED or OWNER_GONE. */
#define OWNER_CLOSED (-2)
#define OWNER_GONE (-3)

static int
sleep_unheld(bound_lock *b, const void *key, const _Atomic uint32_t *gone,
             change_wait *w, int64_t timeout_ns)
{
    switch (in_use_enter_fenced(key, gone)) {
    case IN_USE_ENTERED:
        break;
    case IN_USE_CLOSED:
        return OWNER_GONE;
    case IN_USE_NO_MEMORY:
        return ENOMEM;
    default:
        return E2BIG;
    }
    /* From here until in_use_leave() the owner's memory stays: its
     * deallocation (or close()) waits for this slot to empty. */
    const bound_record *r = b->record;
    w->sl = b->sl;
    w->b = b;
    w->flags = SEQLOCK_WAIT_LONG_NAPS | SEQLOCK_WAIT_WAKE_RETURNS;
    if (r != NULL) {
        w->flags |= SEQLOCK_WAIT_THROUGH_DEATH
                    | (read_only(b) ? SEQLOCK_WAIT_READ_ONLY : 0);
    }
    int64_t deadline = seqlock_deadline(timeout_ns);
    int err;
    for (;;) {
        if (r != NULL && record_is_closed(r)) {
            err = OWNER_CLOSED;
            break;
        }
        err = core_wait_for_change(b->sl, seqlock_time_left(deadline), w);
        if (err != EINTR) {
            break;
        }
        /* Woken without news (a closer, a deallocation, another process's
         * wake-up) or a signal meant for the main thread: look again. */
        if (atomic_load_explicit(gone, memory_order_relaxed)) {
            err = OWNER_GONE;
            break;
        }
    }
    in_use_leave();
    return err;
}

int
wait_for_change_unheld(bound_lock *b, const void *key, const char *kind,
                       const _Atomic uint32_t *gone, uint64_t seq,
                       int64_t timeout_ns, const _Atomic uint32_t *cancel,
                       uint64_t *now)
{
    change_wait w = {NULL, NULL, seq, 0, cancel, 0, 0};
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = sleep_unheld(b, key, gone, &w, timeout_ns);
    Py_END_ALLOW_THREADS
    switch (err) {
    case 0:
        *now = w.now;
        return 1;
    case ETIMEDOUT:
    case ECANCELED:
        return 0;
    case OWNER_CLOSED:
        PyErr_Format(PyExc_ValueError, "the %s is closed", kind);
        return -1;
    case OWNER_GONE:
        PyErr_Format(PyExc_ValueError, "the %s was freed", kind);
        return -1;
    case ENOMEM:
        PyErr_NoMemory();
        return -1;
    case E2BIG:
        PyErr_Format(PyExc_RuntimeError,
                     "more than %d calls into records nest on this thread",
                     IN_USE_SLOTS);
        return -1;
    case EDEADLK:
        PyErr_SetString(PyExc_RuntimeError,
                        "cannot wait for a write while this thread holds the "
                        "write lock");
        return -1;
    case EOWNERDEAD:
        PyErr_SetString(PyExc_RuntimeError, DEAD_WRITER);
        return -1;
    case EFAULT:
        set_memory_gone();
        return -1;
    default:
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
}
