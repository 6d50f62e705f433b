/*
 * bus_guard.h - run a reader over memory a file backs, which another
 * process may truncate: a bus error there becomes EFAULT (bus_guard.c).
 * No Python.
 */
#ifndef SEQLOCK_BUS_GUARD_H
#define SEQLOCK_BUS_GUARD_H

#include <stddef.h>

/* *result = fn(arg), unless fn touches [memory, +len) where the file
 * behind it is gone (SIGBUS): then EFAULT, fn abandoned where it was.
 * fn must hold no lock and leave nothing half done that a jump out of it
 * would break (readers' copies and waits).  0 or EFAULT. */
int guarded_call(const void *memory, size_t len, int (*fn)(void *arg),
                 void *arg, int *result);

#endif /* SEQLOCK_BUS_GUARD_H */
