/*
 * bus_guard.c - reading memory that a file backs, which another process
 * may truncate under us.
 *
 * A record in a file-backed shared mapping (a SharedMemory block is a file
 * in /dev/shm; an mmap of a file) is only as big as its file: once any
 * process with write access truncates the file, touching the mapping past
 * the new end raises SIGBUS, which kills the process.  A record's readers
 * and waiters promise to survive anything another process does to the
 * memory, so they touch it inside a guard (bus_guard.h): a SIGBUS whose
 * address lies in the guarded range jumps back out of the guarded code,
 * which reports EFAULT; any other SIGBUS goes to whatever handled it
 * before (by default it still kills the process).  The JVM turns such
 * faults in mapped buffers into exceptions the same way.  Writers are not
 * guarded: a jump out of a write section (or out of glibc's mutex code)
 * would leave the lock and the thread's robust list half changed; a
 * process that may truncate a record's file is trusted as a co-writer is.
 *
 * The handler is installed once, when the first record in a file is
 * opened, and chains to the one it replaced.  It runs with SA_NODEFER, so
 * SIGBUS is not blocked in it and the jump leaves the thread's mask as it
 * was.  A program may replace it later (faulthandler.disable() puts back
 * what faulthandler found): bus_guard_reassert() puts it back again,
 * chaining to the newcomer; the binding calls it whenever a record is
 * opened, a wait starts, or faulthandler's settings change.  No Python
 * here.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* SA_ONSTACK, siginfo_t.si_addr */
#endif
#include "bus_guard.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

_Thread_local bus_guard *bus_guard_current
    __attribute__((tls_model("initial-exec")));

static struct sigaction replaced;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static int installed;

/* The fault our guard is for: a bus error at an address it guards, or
 * one this thread raised itself while guarded (faulthandler, enabled
 * after us, reports the fault and raises it again, with our handler put
 * back: the address is gone by then). */
static int
guarded_fault(const bus_guard *g, const siginfo_t *info)
{
    if (g == NULL) {
        return 0;
    }
    if (info->si_code <= 0) { /* SI_USER, SI_TKILL: sent, not a fault */
        return info->si_pid == getpid();
    }
    const char *at = (const char *)info->si_addr;
    return at >= g->lo && at < g->hi;
}

static void
on_bus_error(int sig, siginfo_t *info, void *context)
{
    bus_guard *g = bus_guard_current;
    if (guarded_fault(g, info)) {
        bus_guard_current = g->outer;
        siglongjmp(g->env, 1);
    }
    /* Not ours: as if we had never been installed. */
    if (replaced.sa_flags & SA_SIGINFO) {
        replaced.sa_sigaction(sig, info, context);
        return;
    }
    if (replaced.sa_handler != SIG_DFL && replaced.sa_handler != SIG_IGN) {
        replaced.sa_handler(sig);
        return;
    }
    /* The default action: put it back; the faulting access runs again and
     * ends the process as it would have without us. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    (void)sigaction(SIGBUS, &dfl, NULL);
}

static struct sigaction
our_action(void)
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_bus_error;
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    return action;
}

static void
install(void)
{
    struct sigaction action = our_action();
    installed = sigaction(SIGBUS, &action, &replaced) == 0;
}

int
bus_guard_install(void)
{
    (void)pthread_once(&install_once, install);
    return installed ? 0 : -1;
}

int
bus_guard_reassert(void)
{
    if (!installed) {
        return 0;
    }
    struct sigaction now;
    if (sigaction(SIGBUS, NULL, &now) != 0) {
        return -1;
    }
    if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_bus_error) {
        return 0;
    }
    /* Chain to whoever replaced us, as to whoever we replaced at first. */
    struct sigaction action = our_action();
    replaced = now;
    return sigaction(SIGBUS, &action, NULL) == 0 ? 0 : -1;
}
