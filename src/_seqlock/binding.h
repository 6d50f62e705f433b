/*
 * binding.h - what the files of the _seqlock extension share: the module
 * state, the type specs, the one locking path of lock_path.c, the reader's
 * retry budget, and record_layout.c's fields.
 */
#ifndef SEQLOCK_PY_BINDING_H
#define SEQLOCK_PY_BINDING_H

#include "compat.h" /* first: Python.h sets the feature macros */
#include "bus_guard.h"
#include "record.h"
#include "seqlock.h"

typedef struct {
    PyTypeObject *seqlock_type;
    PyTypeObject *write_section_type;
    PyTypeObject *seqrecord_type;
    PyTypeObject *record_writer_type;
    PyTypeObject *array_field_type;
    PyTypeObject *waiter_type;
} module_state;

extern PyType_Spec seqlock_type_spec;
extern PyType_Spec write_section_type_spec;
extern PyType_Spec seqrecord_type_spec;
extern PyType_Spec record_writer_type_spec;
extern PyType_Spec array_field_type_spec;
extern PyType_Spec waiter_type_spec;

/* ---- record_layout.c: a SeqRecord's fields ---- */

typedef struct {
    PyObject *name;   /* str */
    char kind;        /* 'd' float64, 'q' int64, 'Q' uint64, '?' bool */
    int is_array;     /* declared with a count ("16d"): values are tuples */
    Py_ssize_t count; /* elements; 1 for a scalar */
    size_t item_size; /* bytes per element */
    size_t offset;    /* native struct offset of the first element */
} field_spec;

typedef struct {
    Py_ssize_t nfields;
    size_t data_bytes;     /* struct.calcsize(format) */
    PyObject *names;       /* tuple of str, in order */
    PyObject *index;       /* dict: name -> position */
    PyObject *format;      /* str: native struct format of all fields */
    PyObject *descriptor;  /* bytes: "name:code;..." stored in the header */
    field_spec fields[];
} record_layout;

/* The layout SeqRecord(**kwargs) describes; NULL with an exception. */
record_layout *layout_from_kwargs(PyObject *kwargs);
void layout_free(record_layout *layout);
/* The field called name, or NULL (an exception only if lookup failed). */
const field_spec *layout_find(const record_layout *layout, PyObject *name);
/* Convert value for field f to its bytes in out (f->count * f->item_size
 * of them); -1 with TypeError/ValueError/OverflowError, or whatever the
 * value's own conversion methods raised.  Runs user code (__float__,
 * __index__, __bool__, a sequence's items): callers check their state
 * after it, not before. */
int field_encode(const field_spec *f, PyObject *value, unsigned char *out);
int item_encode(const field_spec *f, PyObject *value, unsigned char *out);
/* The Python value of field f (a tuple for an array) from its bytes. */
PyObject *field_decode(const field_spec *f, const unsigned char *in);
PyObject *item_decode(const field_spec *f, const unsigned char *in);

/* ---- lock_path.c: timeouts ---- */

/* A timeout argument: None or -1 wait for ever (*ns = -1); else seconds,
 * not negative, rounded up to a whole nanosecond (a tiny positive timeout
 * still waits).  Returns 0, or -1 with ValueError/OverflowError/TypeError. */
int timeout_to_ns(PyObject *timeout, int64_t *ns);

/* threading.Lock.acquire(blocking, timeout) conventions, to *ns. */
int acquire_args_to_ns(int blocking, PyObject *timeout, int64_t *ns);

/* The `timeout=None` keyword of a write() factory, to *ns. */
int write_timeout_arg(PyObject *args, PyObject *kwargs, int64_t *ns);

/* ---- the reader's retry budget (read_budget.c) ---- */

#define DEFAULT_MAX_RETRIES 16

/* How many overlapped copies a reader retries lock-free before its locking
 * pass, and how often either happened.  The counters are written only on
 * those slow paths, never by a read that succeeds first time. */
typedef struct {
    _Atomic int max_retries;
    _Atomic uint64_t retries;
    _Atomic uint64_t fallbacks;
} read_budget;

void read_budget_init(read_budget *b, int max_retries);

static inline int
read_budget_max(read_budget *b)
{
    return atomic_load_explicit(&b->max_retries, memory_order_relaxed);
}

static inline void
read_budget_count(_Atomic uint64_t *counter)
{
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
}

/* A max_retries value: an int from 0 to INT_MAX; -1 with an exception. */
int max_retries_from_object(PyObject *value);

/* ---- lock_path.c: the one path by which both types lock and wait ---- */

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
} bound_record;

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
 * news).  A read-only record's waiter writes nothing (it polls).  Waits
 * in the main thread
 * are cut in slices, to run signal handlers (Ctrl-C); elsewhere a waiter
 * sleeps until the news (or the core's 1 s nap). */
int wait_for_change(bound_lock *b, uint64_t seq, int64_t timeout_ns,
                    const _Atomic uint32_t *cancel, uint64_t *now);

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

/* The getset entries max_retries, read_retries and read_fallbacks of a
 * type whose objects hold a bound_lock at offset `offset`: a SeqLock's
 * (whose reader falls back to taking the lock) and a record's (a latch
 * reader, which never takes it). */
#define READ_BUDGET_GETSETS_DOCUMENTED(offset, max_doc, fallbacks_doc)       \
    {"max_retries", read_budget_get_max, read_budget_set_max,                \
     PyDoc_STR(max_doc), (void *)(offset)},                                  \
    {"read_retries", read_budget_get_retries, NULL,                          \
     PyDoc_STR("Copies discarded because a write overlapped them."),         \
     (void *)(offset)},                                                      \
    {"read_fallbacks", read_budget_get_fallbacks, NULL,                      \
     PyDoc_STR(fallbacks_doc), (void *)(offset)}
#define READ_BUDGET_GETSETS(offset)                                          \
    READ_BUDGET_GETSETS_DOCUMENTED(                                          \
        offset,                                                              \
        "Overlapped copies a read retries lock-free before it copies "       \
        "once with writers locked out (default 16).",                        \
        "Reads that ran out of retries and took the lock.")
#define RECORD_READ_BUDGET_GETSETS(offset)                                   \
    READ_BUDGET_GETSETS_DOCUMENTED(                                          \
        offset,                                                              \
        "Overlapped copies a read retries at full speed before it goes on "  \
        "yielding the CPU between copies, with the interpreter released "    \
        "(default 16).  A record's reader never takes the lock.",            \
        "Reads that ran out of retries and went on yielding between "        \
        "copies.")

PyObject *read_budget_get_max(PyObject *self, void *offset);
int read_budget_set_max(PyObject *self, PyObject *value, void *offset);
PyObject *read_budget_get_retries(PyObject *self, void *offset);
PyObject *read_budget_get_fallbacks(PyObject *self, void *offset);

/* __reduce__ of an object that cannot be pickled or copied (a lock). */
PyObject *reduce_refused(PyObject *self, PyObject *unused);

/* ---- news.c: readers that wait for news ---- */

/* (seq, value) for read_versioned(), stealing value; NULL if value is
 * NULL or on failure. */
PyObject *versioned(uint64_t seq, PyObject *value);
/* wait(seq, timeout=None) of both types: True once a write section has
 * ended since the state seq names, False on timeout. */
PyObject *news_wait(bound_lock *b, PyObject *args, PyObject *kwargs);
#define NEWS_WAIT_DOC                                                        \
    PyDoc_STR(                                                               \
        "wait($self, /, seq, timeout=None)\n--\n\n"                          \
        "Return True once a write section has ended since the state whose\n" \
        "sequence number is seq (at once if one has), False if timeout\n"    \
        "seconds pass first (None: wait until then).\n\n"                    \
        "The thread sleeps on the sequence word (a futex, so a writer in\n"  \
        "another process wakes it), releasing the GIL and using almost no\n" \
        "CPU (a look once a second; every 50 ms in the main thread); a\n"   \
        "write wakes sleepers only when there are any.  Ctrl-C interrupts\n" \
        "the wait.  Raises RuntimeError if this thread holds the write "      \
        "lock,\n"                                                            \
        "or if a SeqLock's writer died inside its section (as read() does);\n" \
        "a SeqRecord's dead writer's section is rolled back, which counts\n"  \
        "as a write.")

/* _waiter(seq, timeout=None): a cancellable wait, for seqlock_py._news. */
#define NEWS_WAITER_DOC                                                      \
    PyDoc_STR("_waiter($self, /, seq, timeout=None)\n--\n\n"                 \
              "A cancellable wait(seq, timeout), for the asyncio forms.")
#define NEWS_WAIT_ASYNC_DOC                                                  \
    PyDoc_STR(                                                               \
        "wait_async($self, /, seq, timeout=None)\n--\n\n"                    \
        "A coroutine: await it for wait(seq, timeout)'s answer without\n"    \
        "blocking the event loop.  The wait runs in a thread of its own;\n"  \
        "cancelling the await ends that thread's wait at once.")
/* _waiter(seq, timeout=None): a cancellable wait, for seqlock_py._news. */
PyObject *news_waiter(PyObject *owner, bound_lock *b, PyObject *args,
                      PyObject *kwargs);
/* wait_async(seq, timeout=None): seqlock_py._news.wait_async's coroutine,
 * its arguments checked now rather than at the first await. */
PyObject *news_wait_async(PyObject *owner, PyObject *args, PyObject *kwargs);
/* changes(*, timeout=None) or changes_async(*, timeout=None) (name): the
 * generator of seqlock_py._news of that name, its timeout checked now. */
PyObject *news_changes(const char *name, PyObject *owner, PyObject *args,
                       PyObject *kwargs);

/* ---- memory a file backs (bus_guard.h) ---- */

/* *result = fn(arg) inside a guard on r's guarded memory (bus_guard.h),
 * or a plain call if it needs no guard; -1 with OSError if the file
 * behind the memory is gone.  Needs the GIL. */
int call_guarded(const bound_record *r, int (*fn)(void *arg), void *arg,
                 int *result);

/* The OSError of a record whose file was truncated. */
void set_memory_gone(void);

/* ---- memory_kind.c ---- */

/* The kind of a buffer's memory, for bound_lock_init(): BOUND_PRIVATE if
 * certainly private to this process (a bytearray, or /proc says so), else
 * BOUND_SHARED; with BOUND_READ_ONLY if the buffer is read-only or its
 * mapping is not writable; with BOUND_FILE if a file backs it (another
 * process may truncate it: readers then guard their accesses). */
int buffer_memory_kind(const Py_buffer *view);

#endif /* SEQLOCK_PY_BINDING_H */
