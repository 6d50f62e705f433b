/*
 * lock_path.h - the one path by which SeqLock and SeqRecord
 * take, wait for and release their lock from Python (lock_path.c), and the
 * lock-free reader built on it.
 */
#ifndef SEQLOCK_PY_LOCK_PATH_H
#define SEQLOCK_PY_LOCK_PATH_H

#include "compat.h"
#include "bus_guard.h"
#include "in_use.h"
#include "read_budget.h"
#include "record.h"
#include "seqlock.h"

/* A record as the locking path sees it.  A SeqRecord embeds one. */
typedef struct {
    record_view view;    /* where it is: this process's own geometry */
    int readonly;        /* attached to memory it may not write: writes
                            refused, waits write nothing */
    const void *guarded; /* in a file another process may truncate: its
                            readers and waiters touch [guarded,
                            +guarded_len) inside a bus_guard; NULL if its
                            memory needs no guard */
    size_t guarded_len;
    /* RECORD_OPEN until close() (seqrecord_type.c): then no call touches
     * the memory, which close() lets go once no thread is inside one
     * (record_pin()). */
    _Atomic uint32_t closed;
    /* in_use_forks_ when a write section through it was last opened
     * (begin_write(), pinned): another count means that a thread the
     * fork left behind opened it. */
    _Atomic uint32_t held_forks;
    const char *kind; /* "ring" for a SeqRing's, in its errors; NULL: a record */
} bound_record;

enum { RECORD_OPEN = 0, RECORD_CLOSING = 1, RECORD_CLOSED = 2 };

struct unheld_anchor; /* unheld.h */

/* A seqlock as a Python object holds it.  Both types embed one. */
typedef struct {
    seqlock_t *sl;
    const bound_record *record; /* a record kept as a latch (record.h): its
                              readers never wait; NULL for a SeqLock */
    PyObject *object;      /* the owner (borrowed): a thread of this
                              process holding the lock keeps it alive */
    _Atomic uint64_t held_refs; /* references taken so through this
                              binding and not given back: any but the
                              holder's own are a dead thread's */
    read_budget budget;
    seqlock_private_t private; /* tracked if the memory is private */
    /* Made by the first wait that holds no reference to the owner
     * (unheld.h), NULL before: the owner's deallocation ends such waits. */
    _Atomic(struct unheld_anchor *) anchor;
} bound_lock;

/* Outcomes of taking a lock (habit: one status type for every layer). */
typedef enum {
    LOCK_FAILED = -1,    /* an exception is set */
    LOCK_TIMED_OUT = 0,
    LOCK_TAKEN = 1,
    LOCK_TAKEN_OVER = 2, /* from a holder that died: a record's section
                            was discarded; a SeqLock's is the caller's */
} lock_status;

/* Bind sl to its owner.  memory: BOUND_PRIVATE if sl lives in memory no
 * other process shares, so it is repaired in a fork's child (seqlock.h);
 * BOUND_READ_ONLY if this process may not write it (a record attached to
 * a read-only buffer).  The owner calls bound_lock_fini() from its
 * dealloc. */
#define BOUND_SHARED 0
#define BOUND_PRIVATE 1
#define BOUND_READ_ONLY 2
#define BOUND_FILE 4
void bound_lock_init(bound_lock *b, seqlock_t *sl,
                     const bound_record *record, PyObject *owner, int memory);
void bound_lock_fini(bound_lock *b);

/* Open a write section within timeout_ns (-1: for ever): try, then wait
 * detached from the interpreter in slices, running signal handlers between
 * them.  A record's section changes copy 0 while readers read copy 1.
 * RuntimeError if this thread holds the lock already or the lock's words
 * are corrupted; TypeError for a read-only record. */
lock_status lock_write(bound_lock *b, int64_t timeout_ns);

/* Close the write section the calling thread holds and release the lock
 * (a record's changes become visible together).  0, or -1 with
 * RuntimeError if it holds none (not the holder, or a locking pass rather
 * than a write section), or if the lock's beacon could not be released
 * (corrupted: the owner then stays alive for good, its memory mapped). */
int unlock_write(bound_lock *b);

/* The lock word alone, for a caller with a protocol of its own (a ring's
 * append, seqring_type.c): take it within timeout_ns as lock_write() does
 * (LOCK_TAKEN_OVER: from a holder that died; the caller repairs what it
 * left), and give it back (0, or -1 with RuntimeError as unlock_write()).
 * `misuse` is the RuntimeError's message if this thread holds it already.
 * No section is opened or closed here. */
lock_status take_lock_word(bound_lock *b, int64_t timeout_ns,
                           const char *misuse);
int release_lock(bound_lock *b);

/* As unlock_write(), first putting a record back as the section found
 * it (its body raised). */
int abort_write(bound_lock *b);

/* Take the lock word without opening a section (read_seqlock_excl), within
 * timeout_ns (-1: for ever): the sequence stays even, so lock-free readers
 * carry on.  A dead holder's section is discarded (a record) and closed
 * first; a SeqLock's raises RuntimeError (and stays open, abandoned). */
lock_status lock_excl(bound_lock *b, int64_t timeout_ns);
void unlock_excl(bound_lock *b);

/* A SeqLock reader's locking pass: copy(ctx, *seq) run holding the lock
 * word against writers, its result in *result.  1 if the pass counts; 0
 * if copy() waited for something (another lock, news) and so gave the
 * lock word up (no thread sleeps holding a locking pass: see
 * lock_path.c) and a write then overlapped it: retry; -1 with an
 * exception if the lock could not be taken. */
int locking_pass_of(bound_lock *b, int (*copy)(void *ctx, uint64_t seq),
                    void *ctx, uint64_t *seq, int *result);

/* The slow half of begin_read() (a SeqLock's readers; a record's never
 * wait): wait detached until no writer is active.  RuntimeError if the
 * writer died inside its section (its Python objects cannot be put
 * back).  0 or -1. */
int begin_read_waiting(bound_lock *b, uint64_t *seq);

/* Start a lock-free read pass: *seq is the even count to check against. */
static inline int
begin_read(bound_lock *b, uint64_t *seq)
{
    if (SEQLOCK_LIKELY(seqlock_read_try_begin(b->sl, seq))) {
        return 0;
    }
    return begin_read_waiting(b, seq);
}

/* Wait detached until a write section has ended since the state whose
 * count is seq (seqlock_wait_for_change()): 1 with *now set to the new
 * (even) count; 0 if timeout_ns (-1: for ever) passed first or *cancel
 * (may be NULL) was set; -1 with RuntimeError if this thread holds the
 * lock or a SeqLock's writer died in its section, with OSError if the
 * file behind a record was truncated, or with what a signal handler
 * raised.  A record's waiter is a reader: it never takes the lock; a dead
 * writer's section is waited through (the next writer's commit is the
 * news).  A read-only record's waiter writes nothing (it polls).  A
 * signal ends the main thread's sleep (EINTR) and its handlers run
 * (Ctrl-C), with a 1 s backstop slice for a signal that lands just
 * before the sleep; elsewhere a waiter sleeps until the news (or the
 * core's 1 s nap).  long_naps: a cancellable wait naps as long as an
 * uncancellable one (SEQLOCK_WAIT_LONG_NAPS: idle-cheap, a cancel that
 * races its falling asleep seen within 1 s). */
int wait_for_change(bound_lock *b, uint64_t seq, int64_t timeout_ns,
                    const _Atomic uint32_t *cancel, int long_naps,
                    uint64_t *now);

/* wait_for_change() for a thread that holds no reference to b's owner,
 * which may be freed meanwhile (unheld.h: the asyncio watcher's sleep).
 * The whole wait runs detached and runs no Python code: pinned through
 * key (unheld_key(b), computed while the owner was known alive) with
 * *gone checked (in_use_enter_fenced()), it reads b only once pinned,
 * and the owner's deallocation sets *gone and wakes it (unheld_let_go()).
 * Returns as wait_for_change(); ValueError once the owner is closed or
 * freed (kind names it: "record", "ring", "lock").  Needs no signal handler to run:
 * for threads other than the main one.  The caller reasserts the SIGBUS
 * guard first if the memory is a file's (bus_guard_reassert()). */
int wait_for_change_unheld(bound_lock *b, const void *key, const char *kind,
                           const _Atomic uint32_t *gone, uint64_t seq,
                           int64_t timeout_ns, const _Atomic uint32_t *cancel,
                           uint64_t *now);

/* For a context manager's __enter__: 0 if lock_write() took the lock; -1
 * if it failed or (TimeoutError) timed out. */
int entered_or_timed_out(lock_status taken);

/*
 * read_consistently - a SeqLock's reader: run copy(ctx, seq) until no
 * write overlapped it
 *
 * Each pass waits while a writer is active (begin_read), then copies.
 * copy() returns 0, or -1 with an exception; after a pass a write
 * overlapped, discard(ctx) drops what it produced (whatever it saw may be
 * torn) and returns 0 to retry or -1 to give up with the exception set.
 * After max_retries overlapped passes in a row, the next ones run holding
 * the lock word against writers (locking_pass_of()), so a reader always
 * finishes.  *seq is the count the state was copied at.  Returns copy()'s
 * result for the pass that counted.  (A record's reader is a latch
 * reader, which never waits and never locks: seqrecord_type.c.)
 */
static inline int
read_consistently(bound_lock *b, int (*copy)(void *ctx, uint64_t seq),
                  int (*discard)(void *ctx), void *ctx, uint64_t *seq)
{
    int max_retries = read_budget_max(&b->budget);
    for (int failed = 0;; failed++) {
        int result;
        if (SEQLOCK_UNLIKELY(failed > max_retries)) {
            int counted = locking_pass_of(b, copy, ctx, seq, &result);
            if (counted < 0) {
                return -1;
            }
            if (counted) {
                read_budget_count(&b->budget.fallbacks);
                return result;
            }
        }
        else {
            if (begin_read(b, seq) < 0) {
                return -1;
            }
            result = copy(ctx, *seq);
            if (SEQLOCK_LIKELY(!seqlock_read_retry(b->sl, *seq))) {
                return result;
            }
        }
        read_budget_count(&b->budget.retries);
        if (discard(ctx) < 0) {
            return -1;
        }
    }
}

/* *result = fn(arg) inside a guard on r's guarded memory (bus_guard.h),
 * or a plain call if it needs no guard; -1 with OSError if the file
 * behind the memory is gone.  Needs the GIL. */
int call_guarded(const bound_record *r, int (*fn)(void *arg), void *arg,
                 int *result);

/* The OSError of a record whose file was truncated. */
void set_memory_gone(void);

/* The ValueError of a closed record (or ring: r->kind); -1. */
int set_record_closed(const bound_record *r);

static inline int
record_is_closed(const bound_record *r)
{
    return atomic_load_explicit(&r->closed, memory_order_relaxed)
           != RECORD_OPEN;
}

/* close()'s first step: 1 once this thread has marked r closing (it then
 * closes it, or puts RECORD_OPEN back), 0 if r is closed already; while
 * another thread closes it, waits (interpreter released) for its outcome. */
int claim_close(bound_record *r);

/* A record's or ring's memory joins the process's open memory
 * (open_memory.h), which no copy into a caller's buffer may overlap.
 * 0, or -1 with MemoryError. */
int record_memory_opened(const bound_record *r, const void *memory,
                         size_t len);

/* A view of a record or ring (np.frombuffer(shm.buf)) is no place for a
 * copy: it would overwrite what every process reads.  -1 with ValueError
 * naming call if [p, p + len) overlaps memory this process has open
 * (another mapping of the same memory cannot be told), else 0. */
int refuse_open_memory(const char *call, const void *p, size_t len);

/* Let the memory of r go: r is marked closing, leaves the open memory and
 * its lock's binding b ends, and only then is view (if held) released;
 * then r is closed.  The release may run Python code (a buffer exporter's
 * __release_buffer__, 3.12+), which may keep the object alive or call it:
 * it finds the object closed, as every later call does (a close() from
 * there returns at once; another thread's waits for the release).  For
 * close() and for the collector's clear. */
void record_memory_gone(bound_record *r, bound_lock *b, Py_buffer *view);

/* record_pin()'s failures as exceptions; -1. */
int record_pin_failed(const bound_record *r, in_use_status status);

/*
 * record_pin - enter a stretch of code that touches r's memory
 * Returns 0, and then close() waits until record_unpin() before it lets
 * the memory go; or -1 with ValueError if the record is closed (or
 * closing), MemoryError, or RuntimeError if IN_USE_SLOTS pins nest on
 * this thread.  Costs a store to the thread's own slot and a seq_cst
 * fence (in_use.h).  Where the GIL is held from a record_is_closed()
 * check to the last touch, no pin is needed: close() holds the GIL too
 * whenever it looks.  Code that releases the GIL, or may run Python
 * code (a signal handler), in between pins; so does every touch on a
 * free-threaded build.
 */
static inline int
record_pin(const bound_record *r)
{
    in_use_status status = in_use_enter(r, &r->closed);
    return SEQLOCK_LIKELY(status == IN_USE_ENTERED) ? 0
                                                    : record_pin_failed(r, status);
}

static inline void
record_unpin(const bound_record *Py_UNUSED(r))
{
    in_use_leave();
}

/* The pin of a free-threaded build's every touch, where the GIL build
 * only checks closed (see record_pin()): 0 or -1 with an exception. */
static inline int
record_pin_ft(const bound_record *r)
{
#ifdef Py_GIL_DISABLED
    return record_pin(r);
#else
    return record_is_closed(r) ? set_record_closed(r) : 0;
#endif
}

static inline void
record_unpin_ft(const bound_record *r)
{
#ifdef Py_GIL_DISABLED
    record_unpin(r);
#else
    (void)r;
#endif
}

#endif /* SEQLOCK_PY_LOCK_PATH_H */
