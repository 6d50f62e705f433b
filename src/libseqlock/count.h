/*
 * count.h - the count's sleepers: a section's end wakes them only if one
 * announced itself for it, so a write costs no system call while nobody
 * waits.  Internal to the core: not API.
 *
 * The pairing: a sleeper stores its announcement (wake_from), fences
 * (seq_cst) and looks at the count again before it sleeps; a section's
 * end stores the count, fences (seq_cst) and looks at wake_from.  Either
 * the writer sees the announcement or the sleeper sees the new count.
 */
#ifndef SEQLOCK_COUNT_H
#define SEQLOCK_COUNT_H

#include "parking.h"

/* Announce a sleeper waiting for the count to leave seq: wake_from only
 * ever grows (counts never repeat), so a stale announcement from a sleeper
 * that died cannot make a later section's end pay for a wake-up, and a
 * slow sleeper cannot lower a newer one's announcement. */
static inline void
announce_sleeper(seqlock_t *sl, uint64_t seq)
{
    uint64_t cur = atomic_load_explicit(&sl->wake_from, memory_order_relaxed);
    while (cur < seq && !atomic_compare_exchange_weak_explicit(
                            &sl->wake_from, &cur, seq, memory_order_seq_cst,
                            memory_order_relaxed)) {
    }
}

/* Sleep at most nap_ns while the count is still s, having announced it:
 * the announcement, a seq_cst fence, then a second look at the count pair
 * with end_section()'s store, fence, look at wake_from, so either its
 * writer sees us or we see its count.  Returns EINTR (a signal handler
 * ran), ETIMEDOUT (the nap ended), else 0: woken, or the count had
 * moved. */
static inline int
sleep_while_count_is(seqlock_t *sl, uint64_t s, int64_t nap_ns)
{
    announce_sleeper(sl, s);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&sl->seqcount.sequence, memory_order_relaxed)
        != s) {
        return 0;
    }
    return seqlock_park_(low_half(&sl->seqcount.sequence), (uint32_t)s,
                         nap_ns);
}

/* The section that opened at `start` (even) ends: the count becomes start
 * + 2, then the sleepers are woken if one announced itself for this
 * section.  The count's store is a latch switch (its first fence publishes
 * the section's stores; its second orders the count before the caller's
 * stores to the other copy, seqlock_latch()); the seq_cst fence pairs with
 * the sleeper's announce-then-fence-then-check (sleep_while_count_is), so
 * either we see its announcement or it sees the new count. */
static inline void
end_section(seqlock_t *sl, uint64_t start)
{
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&sl->seqcount.sequence, start + 2,
                          memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    /* A sleeper announces the count it saw: this section's (start + 1)
     * or one before.  Not wake_from + 1 > start: that overflows for a
     * sleeper announced on the count 2**64 - 1. */
    if (atomic_load_explicit(&sl->wake_from, memory_order_relaxed)
        >= start) {
        seqlock_unpark_all_(low_half(&sl->seqcount.sequence));
    }
}

#endif /* SEQLOCK_COUNT_H */
