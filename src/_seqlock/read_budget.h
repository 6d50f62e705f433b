/*
 * read_budget.h - the reader's retry budget: how many
 * overlapped copies a reader retries before it changes course, and the
 * counters and attributes that show it (read_budget.c).
 */
#ifndef SEQLOCK_PY_READ_BUDGET_H
#define SEQLOCK_PY_READ_BUDGET_H

#include "compat.h"

#include <stdatomic.h>
#include <stdint.h>

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

#endif /* SEQLOCK_PY_READ_BUDGET_H */
