/*
 * args.c - one converter per kind of argument (args.h): timeouts, sequence
 * numbers and retry budgets are checked here and nowhere else.
 */
#include "args.h"
#include "seqlock.h" /* SEQLOCK_NS_PER_SEC */

#include <limits.h>
#include <math.h>

/* ---- timeouts ---- */

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
    double whole_ns = ceil(seconds * (double)SEQLOCK_NS_PER_SEC); /* round up, as threading */
    if (whole_ns >= (double)INT64_MAX) {
        PyErr_SetString(PyExc_OverflowError, "timeout value is too large");
        return -1;
    }
    *ns = (int64_t)whole_ns;
    return 0;
}

PyObject *
timeout_ns_to_seconds(int64_t ns)
{
    if (ns < 0) {
        return Py_NewRef(Py_None);
    }
    return PyFloat_FromDouble((double)ns / (double)SEQLOCK_NS_PER_SEC);
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

int
write_timeout_arg(PyObject *args, PyObject *kwargs, int64_t *ns)
{
    static char *keywords[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:write", keywords,
                                     &timeout)) {
        return -1;
    }
    return timeout_to_ns(timeout, ns);
}

/* ---- sequence numbers ---- */

int
sequence_from_object(const char *fname, PyObject *obj, uint64_t *seq)
{
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s() argument 'seq' must be int, not %.200s", fname,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow;
    long long small = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (small == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow < 0 || (overflow == 0 && small < 0)) {
        PyErr_Format(PyExc_ValueError,
                     "%s() argument 'seq' must be a sequence number (0 or "
                     "more)", fname);
        return -1;
    }
    unsigned long long value = (unsigned long long)small;
    if (overflow > 0) {
        value = PyLong_AsUnsignedLongLong(obj);
        if (value == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Format(PyExc_OverflowError,
                         "%s() argument 'seq' must be a sequence number "
                         "below 2**64", fname);
            return -1;
        }
    }
    *seq = value;
    return 0;
}

/* ---- retry budgets ---- */

int
max_retries_from_object(PyObject *value)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "cannot delete max_retries");
        return -1;
    }
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError, "max_retries must be an int, not %.200s",
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    int overflow;
    long n = PyLong_AsLongAndOverflow(value, &overflow);
    if (n == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow < 0 || (!overflow && n < 0)) {
        PyErr_SetString(PyExc_ValueError, "max_retries must not be negative");
        return -1;
    }
    if (overflow > 0 || n > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "max_retries is too large");
        return -1;
    }
    return (int)n;
}

int
max_entries_from_object(PyObject *value, uint64_t *bound)
{
    *bound = 0;
    if (value == NULL || value == Py_None) {
        return 0;
    }
    if (!PyLong_Check(value)) {
        PyErr_Format(PyExc_TypeError,
                     "max_entries must be an int or None, not %.100s",
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    int overflow;
    long long n = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (n == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow < 0 || (overflow == 0 && n < 1)) {
        PyErr_SetString(PyExc_ValueError,
                        "max_entries must be at least 1 (or None: up to "
                        "the ring's capacity)");
        return -1;
    }
    *bound = overflow > 0 ? UINT64_MAX : (uint64_t)n;
    return 0;
}
