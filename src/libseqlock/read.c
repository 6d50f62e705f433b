/*
 * read.c - readers' slow path and readers that wait for news: one loop
 * that waits for the count to be even (and, for news, other than the
 * count the caller saw), spinning first for a reader, within the caller's
 * deadline, and sleeping on the count (count.h).  Readers write no data:
 * a writable reader writes only its announcement (wake_from); a read-only
 * one writes nothing and polls.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "count.h"
#include "thread.h"

#include <sched.h>

/* Not a public flag: wait as read_seqbegin() does (spin, then yield, then
 * nap as a reader; a dead writer reported at once, ETIMEDOUT at once for
 * timeout_ns 0). */
#define WAIT_AS_READER (1u << 31)
/* No count the caller saw: any even count will do.  Odd, so never one. */
#define ANY_EVEN_COUNT UINT64_MAX

/* A read-only waiter's next nap: it cannot announce itself, so it looks
 * again soon after a change and ever less often while nothing changes. */
static int64_t
poll_nap_ns(int64_t last)
{
    if (last <= 0) {
        return POLL_FIRST_NAP_NS;
    }
    return last >= POLL_NAP_NS / 2 ? POLL_NAP_NS : 2 * last;
}

/* Wait until the count is even and not seq.  Returns 0 with *now set, or
 * ETIMEDOUT, ECANCELED, EINTR, EDEADLK or EOWNERDEAD, as
 * seqlock_read_begin_timed() and seqlock_wait_for_change_flags() say. */
static int
wait_for_count(const seqlock_t *sl, uint64_t seq, int64_t timeout_ns,
               const _Atomic uint32_t *cancel, unsigned flags, uint64_t *now)
{
    seqlock_t *lock = (seqlock_t *)sl; /* sleeping announces; data untouched */
    int saved_errno = errno;
    uint64_t me = current_token();
    unsigned busy_rounds = (flags & WAIT_AS_READER)
                               ? SPIN_ROUNDS + YIELD_ROUNDS : 0;
    /* A cancel's wake-up finds nobody if it lands between our look at
     * *cancel and our futex wait (the count, our futex word, does not
     * change): a cancellable wait naps short, unless its caller chose
     * long naps (SEQLOCK_WAIT_LONG_NAPS: cheap idling, a racing cancel
     * seen within the waiter's nap). */
    int64_t cap = (flags & WAIT_AS_READER) ? READER_NAP_NS
                  : cancel != NULL && !(flags & SEQLOCK_WAIT_LONG_NAPS)
                      ? CANCELLABLE_NAP_NS
                      : WAITER_NAP_NS;
    int64_t deadline = -2; /* computed when first needed */
    int64_t poll_nap = 0;
    int woken = 0;
    int result;
    for (unsigned round = 0;; round++) {
        uint64_t s = atomic_load_explicit(&lock->seqcount.sequence,
                                          memory_order_acquire);
        if (!(s & 1u) && s != seq) {
            *now = s;
            result = 0;
            break;
        }
        if (cancel != NULL
            && atomic_load_explicit(cancel, memory_order_acquire)) {
            result = ECANCELED;
            break;
        }
        if (woken) { /* SEQLOCK_WAIT_WAKE_RETURNS, nothing changed */
            result = EINTR;
            break;
        }
        if (me != 0
            && atomic_load_explicit(&lock->holder, memory_order_relaxed)
                   == me) {
            result = EDEADLK;
            break;
        }
        if (round < busy_rounds) {
            if (timeout_ns == 0) {
                result = ETIMEDOUT;
                break;
            }
            if (round < SPIN_ROUNDS) {
                cpu_relax();
            }
            else {
                sched_yield();
            }
            continue;
        }
        if (!(flags & SEQLOCK_WAIT_THROUGH_DEATH) && (s & 1u)
            && seqlock_owner_died(lock)) {
            result = EOWNERDEAD; /* nobody will end this section */
            break;
        }
        if (deadline == -2) {
            deadline = timeout_ns == 0 ? 0 : seqlock_deadline(timeout_ns);
        }
        int64_t nap_cap = cap;
        if (flags & SEQLOCK_WAIT_READ_ONLY) {
            poll_nap = poll_nap_ns(poll_nap);
            nap_cap = poll_nap < cap ? poll_nap : cap;
        }
        int64_t nap = next_nap_ns(deadline, nap_cap);
        if (nap == 0) {
            result = ETIMEDOUT;
            break;
        }
        int slept = (flags & SEQLOCK_WAIT_READ_ONLY)
                        ? seqlock_park_(low_half(&lock->seqcount.sequence),
                                        (uint32_t)s, nap)
                        : sleep_while_count_is(lock, s, nap);
        if (slept == EINTR) {
            result = EINTR;
            break;
        }
        woken = slept == 0 && (flags & SEQLOCK_WAIT_WAKE_RETURNS);
    }
    errno = saved_errno;
    return result;
}

int
seqlock_read_begin_timed(const seqlock_t *sl, int64_t timeout_ns,
                         uint64_t *seq)
{
    return wait_for_count(sl, ANY_EVEN_COUNT, timeout_ns, NULL,
                          WAIT_AS_READER, seq);
}

int
seqlock_wait_for_change_flags(const seqlock_t *sl, uint64_t seq,
                              int64_t timeout_ns,
                              const _Atomic uint32_t *cancel, unsigned flags,
                              uint64_t *now)
{
    return wait_for_count(sl, seq, timeout_ns, cancel,
                          flags & ~WAIT_AS_READER, now);
}

int
seqlock_wait_for_change(const seqlock_t *sl, uint64_t seq,
                        int64_t timeout_ns, const _Atomic uint32_t *cancel,
                        uint64_t *now)
{
    return wait_for_count(sl, seq, timeout_ns, cancel, 0, now);
}

void
seqlock_wake_waiters(const seqlock_t *sl)
{
    seqlock_t *lock = (seqlock_t *)sl;
    atomic_thread_fence(memory_order_seq_cst); /* the caller's *cancel */
    seqlock_unpark_all_(low_half(&lock->seqcount.sequence));
}

uint64_t
seqlock_read_wait_(const seqlock_t *sl)
{
    uint64_t seq = 0;
    for (;;) {
        switch (seqlock_read_begin_timed(sl, -1, &seq)) {
        case 0:
            return seq;
        case EDEADLK:
            seqlock_die_("read_seqbegin: this thread holds the write lock "
                         "(a signal handler reading data its own thread is "
                         "writing? use write_seqlock_irqsave)");
            break;
        case EOWNERDEAD:
            seqlock_die_("read_seqbegin: the writer died holding the lock "
                         "(use seqlock_read_begin_timed to recover)");
            break;
        default: /* EINTR: a handler ran; keep waiting */
            break;
        }
    }
}
