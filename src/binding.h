/*
 * binding.h - what the files of the _seqlock extension share: the module
 * state, the type specs, and the waiting glue of wait.c.
 */
#ifndef SEQLOCK_PY_BINDING_H
#define SEQLOCK_PY_BINDING_H

#include "compat.h"
#include "seqlock.h"

typedef struct {
    PyTypeObject *seqlock_type;
    PyTypeObject *write_section_type;
} module_state;

extern PyType_Spec seqlock_type_spec;
extern PyType_Spec write_section_type_spec;

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

/* Wait detached until sl's sequence is even and store it in *seq.
 * Returns WAIT_DONE, WAIT_OWNER_DIED, or -1 (RuntimeError if this thread
 * holds the write lock, or a signal handler's exception). */
int wait_read_begin(const seqlock_t *sl, unsigned *seq);

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
