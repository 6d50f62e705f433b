/*
 * binding.h - what the files of the _seqlock extension share: the module
 * state, the type specs, and the waiting glue of wait.c.
 */
#ifndef SEQLOCK_PY_BINDING_H
#define SEQLOCK_PY_BINDING_H

#include "compat.h"
#include "record.h"
#include "seqlock.h"

typedef struct {
    PyTypeObject *seqlock_type;
    PyTypeObject *write_section_type;
    PyTypeObject *seqrecord_type;
    PyTypeObject *record_writer_type;
    PyTypeObject *array_field_type;
} module_state;

extern PyType_Spec seqlock_type_spec;
extern PyType_Spec write_section_type_spec;
extern PyType_Spec seqrecord_type_spec;
extern PyType_Spec record_writer_type_spec;
extern PyType_Spec array_field_type_spec;

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
/* Validate value for field f and write its bytes to out (f->count *
 * f->item_size of them); -1 with TypeError/ValueError/OverflowError. */
int field_encode(const field_spec *f, PyObject *value, unsigned char *out);
int item_encode(const field_spec *f, PyObject *value, unsigned char *out);
/* The Python value of field f (a tuple for an array) from its bytes. */
PyObject *field_decode(const field_spec *f, const unsigned char *in);
PyObject *item_decode(const field_spec *f, const unsigned char *in);

/* ---- wait.c: never wait attached ---- */

/* Outcomes of the waits below (besides -1: an exception is set). */
enum {
    WAIT_TIMED_OUT = 0,
    WAIT_DONE = 1,
    WAIT_OWNER_DIED = 2, /* the write lock's owner thread no longer exists */
};

/* A timeout argument: None or -1 wait for ever (*ns = -1); else seconds,
 * not negative.  Returns 0, or -1 with ValueError/OverflowError/TypeError. */
int timeout_to_ns(PyObject *timeout, int64_t *ns);

/* threading.Lock.acquire(blocking, timeout) conventions, to *ns. */
int acquire_args_to_ns(int blocking, PyObject *timeout, int64_t *ns);

/* Take sl's write lock: try first; if it is busy, wait detached from the
 * interpreter in slices, running signal handlers between them.  Returns
 * WAIT_DONE, WAIT_OWNER_DIED (taken over; data may be half-written),
 * WAIT_TIMED_OUT, or -1 (RuntimeError if this thread holds it already, or
 * the exception a signal handler raised). */
int wait_write_lock(seqlock_t *sl, int64_t timeout_ns);

/* For a context manager's __enter__: 0 if a wait_write_lock-style result
 * took the lock; -1 if it failed or (TimeoutError) timed out. */
int entered_or_timed_out(int taken);

/* Wait detached until sl's sequence is even and store it in *seq.
 * Returns WAIT_DONE, WAIT_OWNER_DIED, or -1 (RuntimeError if this thread
 * holds the write lock, or a signal handler's exception). */
int wait_read_begin(const seqlock_t *sl, unsigned *seq);

/* Take sl's lock word only (read_seqlock_excl), waiting as above with no
 * timeout.  Returns WAIT_DONE, WAIT_OWNER_DIED (taken over: the sequence
 * may be odd), or -1. */
int wait_lock_excl(seqlock_t *sl);

/* ---- fork: making a process-private lock usable in a child ---- */

/* Which thread last took a process-private lock: its PyThread ident, which
 * (unlike its Linux thread id) the forking thread keeps in the child. */
typedef struct {
    _Atomic unsigned long holder;
} fork_guard;

static inline void
fork_guard_note(fork_guard *g)
{
    atomic_store_explicit(&g->holder, PyThread_get_thread_ident(),
                          memory_order_relaxed);
}

/* If sl's lock word names a live thread of another process (for a private
 * lock: the process we were forked from), make the lock usable here, as
 * CPython does for its own locks: the forking thread keeps a lock it held;
 * a lock another thread held is released, and a half-done write section is
 * closed: undone first if undo names the record's header, else as it
 * stands.  Call on slow paths only.  Returns 1 if it changed the lock. */
int fork_guard_repair(fork_guard *g, seqlock_t *sl, record_header *undo);

/* Take sl's lock word for a reader's locking pass (read_seqlock_excl):
 * try; else repair a fork's leftover (if guard is given) and wait.  If the
 * owner died mid-write, its section is closed, undone first if undo names
 * the record's header.  Returns 0, 1 (taken over from a dead owner), or
 * -1 with an exception. */
int take_lock_excl(seqlock_t *sl, fork_guard *guard, record_header *undo);

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

/* The getset entries max_retries, read_retries and read_fallbacks of a
 * type whose objects hold a read_budget at offset `offset`. */
#define READ_BUDGET_GETSETS(offset)                                          \
    {"max_retries", read_budget_get_max, read_budget_set_max,                \
     PyDoc_STR("Overlapped copies a read retries lock-free before it copies " \
               "once with writers locked out (default 16)."),                \
     (void *)(offset)},                                                      \
    {"read_retries", read_budget_get_retries, NULL,                          \
     PyDoc_STR("Copies discarded because a write overlapped them."),         \
     (void *)(offset)},                                                      \
    {"read_fallbacks", read_budget_get_fallbacks, NULL,                      \
     PyDoc_STR("Reads that ran out of retries and took the lock."),          \
     (void *)(offset)}

PyObject *read_budget_get_max(PyObject *self, void *offset);
int read_budget_set_max(PyObject *self, PyObject *value, void *offset);
PyObject *read_budget_get_retries(PyObject *self, void *offset);
PyObject *read_budget_get_fallbacks(PyObject *self, void *offset);

/* __reduce__ of an object that cannot be pickled or copied (a lock). */
PyObject *reduce_refused(PyObject *self, PyObject *unused);

/* Start a read: the fast path inline, the wait out of line. */
static inline int
read_begin(const seqlock_t *sl, unsigned *seq)
{
    if (SEQLOCK_UNLIKELY(!seqlock_read_try_begin(sl, seq))) {
        return wait_read_begin(sl, seq);
    }
    return WAIT_DONE;
}

#endif /* SEQLOCK_PY_BINDING_H */
