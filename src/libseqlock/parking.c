/*
 * parking.c - deadlines, sleeping on a word and waking its sleepers
 * (parking.h), and the core's fatal-misuse exit.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "parking.h"

#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

int64_t
seqlock_monotonic_ns_(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_SEC + ts.tv_nsec;
}

int64_t
seqlock_deadline(int64_t timeout_ns)
{
    if (timeout_ns < 0) {
        return -1;
    }
    int64_t now = monotonic_ns();
    return timeout_ns > INT64_MAX - now ? INT64_MAX : now + timeout_ns;
}

int64_t
seqlock_time_left(int64_t deadline)
{
    if (deadline < 0) {
        return -1;
    }
    int64_t left = deadline - monotonic_ns();
    return left > 0 ? left : 0;
}

#ifdef __linux__
int
seqlock_park_(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    struct timespec ts = timespec_of(timeout_ns);
    if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts,
                NULL, 0) == 0) {
        return 0;
    }
    return (errno == ETIMEDOUT || errno == EINTR) ? errno : 0;
}

void
seqlock_unpark_all_(_Atomic uint32_t *word)
{
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL,
                  NULL, 0);
}
#else /* portable fallback: poll with a bounded back-off */
static _Thread_local int64_t backoff_ns;

int
seqlock_park_(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    if (atomic_load_explicit(word, memory_order_relaxed) != expected) {
        backoff_ns = 0;
        return 0;
    }
    backoff_ns = backoff_ns ? backoff_ns * 2 : 1000;
    if (backoff_ns > MS_NS) {
        backoff_ns = MS_NS;
    }
    int64_t ns = backoff_ns < timeout_ns ? backoff_ns : timeout_ns;
    struct timespec ts = timespec_of(ns);
    if (nanosleep(&ts, NULL) != 0 && errno == EINTR) {
        return EINTR;
    }
    return ns == timeout_ns ? ETIMEDOUT : 0;
}

void
seqlock_unpark_all_(_Atomic uint32_t *word)
{
    (void)word;
}
#endif

void
seqlock_die_(const char *what)
{
    /* write(2) and abort(3) only: this may run in a signal handler. */
    static const char prefix[] = "seqlock: ";
    ssize_t ignored = write(STDERR_FILENO, prefix, sizeof prefix - 1);
    ignored = write(STDERR_FILENO, what, strlen(what));
    ignored = write(STDERR_FILENO, "\n", 1);
    (void)ignored;
    abort();
}
