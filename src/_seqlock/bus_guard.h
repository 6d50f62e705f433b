/*
 * bus_guard.h - readers over memory a file backs, which another process
 * may truncate: a bus error there jumps back out of the reader, which
 * reports EFAULT instead of dying (bus_guard.c).  No Python.
 *
 *     bus_guard g;
 *     bus_guard_arm(&g, memory, len);
 *     if (bus_guard_enter(&g) != 0) {
 *         bus_guard_left(&g);        the jump landed here: the file is gone
 *         return EFAULT;
 *     }
 *     ... read memory: copy, wait ...
 *     bus_guard_leave(&g);
 *
 * bus_guard_enter() is sigsetjmp(), which must run in the frame that stays
 * live while memory is read, as the whole controlling expression of an if
 * (or compared with a constant there: C11 7.13.1.1).  Between enter and
 * leave
 * the code must hold no lock and leave nothing half done that a jump out
 * of it would break (readers' copies and waits qualify; writers do not).
 * Call bus_guard_install() once first (else the guard does nothing).
 * POSIX (sigsetjmp): include after Python.h, or define _POSIX_C_SOURCE.
 */
#ifndef SEQLOCK_BUS_GUARD_H
#define SEQLOCK_BUS_GUARD_H

#include <setjmp.h>
#include <stddef.h>

typedef struct bus_guard {
    sigjmp_buf env;
    const char *lo, *hi;
    struct bus_guard *outer;
} bus_guard;

/* The guard of the accesses this thread is making.  Initial-exec: the
 * handler must not make glibc allocate this thread's block of a
 * dlopen()ed module's thread-locals (if it interrupted malloc, that would
 * deadlock); one pointer fits the static TLS glibc keeps for them. */
extern _Thread_local bus_guard *bus_guard_current
    __attribute__((tls_model("initial-exec")));

/* Install the SIGBUS handler (once per process; chains to the one it
 * replaces).  0, or -1 if sigaction() refused (then guards do nothing). */
int bus_guard_install(void);

/* If installed and since replaced (faulthandler, a program's own
 * handler), install it again, chaining to its replacement.  A system
 * call: not for every read.  0, or -1 if sigaction() refused. */
int bus_guard_reassert(void);

static inline void
bus_guard_arm(bus_guard *g, const void *memory, size_t len)
{
    g->lo = (const char *)memory;
    g->hi = g->lo + len;
    g->outer = bus_guard_current;
    bus_guard_current = g;
}

/* Nonzero when a bus error in the armed range jumped back here.  No mask
 * saved: the handler runs with SA_NODEFER, so the jump leaves the mask as
 * it was (saving it would be a system call per guarded read). */
#define bus_guard_enter(g) sigsetjmp((g)->env, 0)

static inline void
bus_guard_leave(bus_guard *g)
{
    bus_guard_current = g->outer;
}

/* After the jump: the guard is off (the handler took it down). */
static inline void
bus_guard_left(bus_guard *g)
{
    bus_guard_current = g->outer;
}

#endif /* SEQLOCK_BUS_GUARD_H */
