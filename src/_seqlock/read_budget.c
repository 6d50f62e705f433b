/*
 * read_budget.c - the reader's retry budget shared by SeqLock and SeqRecord:
 * its Python attributes (max_retries, read_retries, read_fallbacks).
 */
#include "read_budget.h"
#include "args.h"

#include <limits.h>

void
read_budget_init(read_budget *b, int max_retries)
{
    atomic_init(&b->max_retries, max_retries);
    atomic_init(&b->retries, 0);
    atomic_init(&b->fallbacks, 0);
}

static read_budget *
budget_of(PyObject *self, void *offset)
{
    return (read_budget *)((char *)self + (size_t)offset);
}

PyObject *
read_budget_get_max(PyObject *self, void *offset)
{
    return PyLong_FromLong(read_budget_max(budget_of(self, offset)));
}

int
read_budget_set_max(PyObject *self, PyObject *value, void *offset)
{
    int n = max_retries_from_object(value);
    if (n < 0) {
        return -1;
    }
    atomic_store_explicit(&budget_of(self, offset)->max_retries, n,
                          memory_order_relaxed);
    return 0;
}

PyObject *
read_budget_get_retries(PyObject *self, void *offset)
{
    return PyLong_FromUnsignedLongLong(atomic_load_explicit(
        &budget_of(self, offset)->retries, memory_order_relaxed));
}

PyObject *
read_budget_get_fallbacks(PyObject *self, void *offset)
{
    return PyLong_FromUnsignedLongLong(atomic_load_explicit(
        &budget_of(self, offset)->fallbacks, memory_order_relaxed));
}

