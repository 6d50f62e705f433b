/*
 * args.h - one converter per kind of argument (timeouts,
 * sequence numbers, retry budgets), so that each kind is checked the same
 * way, with the same errors, wherever it is passed (args.c).
 */
#ifndef SEQLOCK_PY_ARGS_H
#define SEQLOCK_PY_ARGS_H

#include "compat.h"

#include <stdint.h>

/* The check of a hot method that takes no arguments.  Such methods are
 * METH_FASTCALL rather than METH_NOARGS: CPython 3.11 specializes the call
 * of a bound builtin (f = rec.read; f()) for the former only (about 120
 * instructions a call).  0, or -1 with TypeError. */
static inline int
takes_no_arguments(const char *fname, Py_ssize_t nargs)
{
    if (nargs != 0) {
        PyErr_Format(PyExc_TypeError, "%s() takes no arguments (%zd given)",
                     fname, nargs);
        return -1;
    }
    return 0;
}

/* A timeout argument: None or -1 wait for ever (*ns = -1); else seconds,
 * not negative, rounded up to a whole nanosecond (a tiny positive timeout
 * still waits).  Returns 0, or -1 with ValueError/OverflowError/TypeError. */
int timeout_to_ns(PyObject *timeout, int64_t *ns);

/* A timeout converted by timeout_to_ns(), as the package's Python layer
 * takes it (seqlock_py._news, _ring): None (for ever) or seconds as a
 * float.  So that Python never converts the caller's object a second
 * time, differently, and -1 ("for ever") is never an event loop's timer
 * of -1 s.  New reference, or NULL with an exception. */
PyObject *timeout_ns_to_seconds(int64_t ns);

/* threading.Lock.acquire(blocking, timeout) conventions, to *ns. */
int acquire_args_to_ns(int blocking, PyObject *timeout, int64_t *ns);

/* The `timeout=None` keyword of a write() factory, to *ns. */
int write_timeout_arg(PyObject *args, PyObject *kwargs, int64_t *ns);

/* Argument `seq` of fname(): a sequence number, an int from 0 to
 * 2**64 - 1.  0, or -1 with TypeError (not an int), ValueError (negative)
 * or OverflowError (2**64 or more), each naming fname. */
int sequence_from_object(const char *fname, PyObject *obj, uint64_t *seq);

/* A max_retries value: an int from 0 to INT_MAX; -1 with an exception. */
int max_retries_from_object(PyObject *value);

/* A batch bound (poll(max_entries=)): None or NULL (not given) -> *bound 0,
 * no bound; else an int >= 1 (beyond 64 bits: UINT64_MAX).  0, or -1 with
 * TypeError or ValueError. */
int max_entries_from_object(PyObject *value, uint64_t *bound);

#endif /* SEQLOCK_PY_ARGS_H */
