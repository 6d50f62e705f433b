/*
 * lock.c - the lock: taking and giving back the lock word and its beacon,
 * write sections, and the kernel's API's slow paths (seqlock.h).  What
 * each thread holds is in its own memory (thread.h); the beacon's glibc
 * words are read only through beacon.h; who holds the word, and whether a
 * holder found in a gap is gone, is owner.c's; sleeping is parking.h's.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "beacon.h"
#include "count.h"
#include "owner.h"

#include <limits.h>
#include <sched.h>

/*
 * The lock word and its beacon; the invariants this file keeps (why each
 * holds is told once, in docs/implementation.md, "Owner identity and
 * death"):
 *
 * - The lock word `holder` is 0 or its holder's token, taken by
 *   compare-and-swap.  The holder locks its beacon just after winning the
 *   word and unlocks it just before giving the word back; nobody else
 *   operates on a beacon, except a taker over a holder that died.  So the
 *   only pending robust-list operations on a beacon are its holder's, and
 *   only the holder's death can mark it.
 * - Between the word and the beacon lie the holder's two gaps.  A section
 *   is entered only with the beacon held (a holder in its first gap that
 *   finds the beacon taken backs off), and a holder in its second gap has
 *   closed its section: taking over a gap is safe, and when is owner.c's
 *   call.  Neither gap makes a system call (release_lock_word()).
 * - What the caller holds is kept in its own memory (thread.h), never read
 *   back from `holder` or the count; the beacon's kind is checked before
 *   glibc sees it and its owner words are put back before the unlock
 *   (beacon.h).  glibc's robust-list links inside the mutex cannot be
 *   checked: every process that can write a lock is trusted with the
 *   memory of the threads that take it; readers are not.
 */


int
seqlock_init(seqlock_t *sl)
{
    seqcount_latch_init(&sl->seqcount);
    atomic_init(&sl->wake_from, 0);
    atomic_init(&sl->holder, 0);
    atomic_init(&sl->starving, 0);
    atomic_init(&sl->gaps, 0);
    atomic_init(&sl->abandoned, 0);
    atomic_init(&sl->owner.token, 0);
    atomic_init(&sl->owner.pid_ns, 0);
    atomic_init(&sl->owner.started, 0);
    atomic_init(&sl->owner.tid, 0);
    atomic_init(&sl->owner.reserved, 0);
    int err = seqlock_beacon_init_(sl);
    atomic_init(&sl->ready, err == 0 ? SEQLOCK_READY : 0);
    return err;
}

void
seqlock_destroy(seqlock_t *sl)
{
    if (atomic_load_explicit(&sl->ready, memory_order_acquire)
        == SEQLOCK_READY) {
        (void)pthread_mutex_destroy(&sl->beacon);
        atomic_store_explicit(&sl->ready, 0, memory_order_relaxed);
    }
}

/* A SEQLOCK_UNLOCKED lock gets its beacon from the first taker.  Returns
 * 0 (ready), EBUSY (another taker is setting it up: wait as for a held
 * lock, within the caller's timeout; "Stuck locks" below) or EINVAL
 * (`ready` holds garbage: not a seqlock, or overwritten; or says
 * "initialising" on a lock already used, which nobody sets up). */
static int
ensure_ready(struct lock_thread *t, seqlock_t *sl, uint64_t me)
{
    uint32_t state = atomic_load_explicit(&sl->ready, memory_order_acquire);
    if (SEQLOCK_LIKELY(state == SEQLOCK_READY)) {
        return 0;
    }
    if (state == INITIALISING) {
        /* A first taker sets up only a lock nobody has used, and nobody
         * takes the word meanwhile: a used lock "initialising" is
         * corrupted, unless `ready` has moved on since we looked (a taker
         * won the word after the set-up ended).  The release fence after
         * the set-up and these acquire loads make a word seen taken
         * carry the set-up's end with it. */
        if (atomic_load_explicit(&sl->holder, memory_order_acquire) == 0
            && atomic_load_explicit(&sl->gaps, memory_order_acquire) == 0) {
            return EBUSY;
        }
        return atomic_load_explicit(&sl->ready, memory_order_acquire)
                       == INITIALISING
                   ? EINVAL
                   : EBUSY;
    }
    if (state != 0) {
        return EINVAL;
    }
    if (!atomic_compare_exchange_strong(&sl->ready, &state, INITIALISING)) {
        return state == SEQLOCK_READY ? 0 : EBUSY;
    }
    /* Set up only a lock nobody has used (a SEQLOCK_UNLOCKED one): a
     * `ready` word rewritten to 0 on a used lock must not have the beacon
     * made anew under its holder. */
    if (atomic_load_explicit(&sl->holder, memory_order_relaxed) != 0
        || atomic_load_explicit(&sl->gaps, memory_order_relaxed) != 0) {
        atomic_store_explicit(&sl->ready, 0, memory_order_relaxed);
        return EINVAL;
    }
    /* Say who sets it up, for a waiter that finds it stuck. */
    seqlock_publish_owner_(sl, t, me);
    int err = seqlock_beacon_init_(sl);
    atomic_store_explicit(&sl->ready, err ? 0 : SEQLOCK_READY,
                          memory_order_release);
    atomic_thread_fence(memory_order_release); /* before our word's CAS */
    return err;
}

int
seqlock_check(const seqlock_t *sl)
{
    if (atomic_load_explicit(&sl->ready, memory_order_acquire)
        != SEQLOCK_READY) {
        return EINVAL;
    }
    return beacon_kind_ok(sl) ? 0 : EINVAL;
}

int
seqlock_owner_died(const seqlock_t *sl)
{
    if (atomic_load_explicit(&sl->abandoned, memory_order_relaxed)) {
        return 1;
    }
    /* The acquire load of `ready` orders the peek after the beacon's
     * setup (a SEQLOCK_UNLOCKED lock gets it from its first writer). */
    return atomic_load_explicit(&sl->holder, memory_order_relaxed) != 0
           && atomic_load_explicit(&sl->ready, memory_order_acquire)
                  == SEQLOCK_READY
           && beacon_state(sl) == BEACON_MARKED_DEAD;
}

/*
 * Fairness.  The lock word is taken by whoever tries first when it comes
 * free (no queue), and a writer that releases and retakes at once can
 * keep a sleeper out for ever (a reader's locking pass in a write storm).
 * So a sleeper that has waited STARVE_NS names itself in `starving`; then
 * others leave the free word to it (the release wakes every sleeper) for
 * up to STARVE_GRACE_NS, after which they take it as if nobody were
 * starving: a starving waiter that died or stopped cannot hold them off.
 */

/* Nonzero if another's starvation asks us to keep off the free word now. */
static int
keep_off(struct lock_thread *t, seqlock_t *sl, uint64_t me)
{
    uint64_t starving = atomic_load_explicit(&sl->starving,
                                             memory_order_relaxed);
    if (starving == 0 || starving == me) {
        return 0;
    }
    int64_t now = monotonic_ns();
    if (t->held_off.lock != sl) {
        t->held_off.lock = sl;
        t->held_off.since = now;
        return 1;
    }
    if (now - t->held_off.since < STARVE_GRACE_NS) {
        return 1;
    }
    /* The starving waiter did not come: forget it. */
    (void)atomic_compare_exchange_strong_explicit(
        &sl->starving, &starving, 0, memory_order_relaxed,
        memory_order_relaxed);
    t->held_off.lock = NULL;
    return 0;
}

/* Take the word once: free, or from a holder dead (or gone in its gap for
 * GAP_NS).  Returns 0, EOWNERDEAD (taken over from a holder that died or
 * abandoned a section, or whose gap left the count odd: repair first),
 * EBUSY, EINVAL (a corrupted beacon), or a pthread error, with the word
 * given back.  On 0 and EOWNERDEAD, *h has the beacon's owner words. */
static int
try_lock_word(struct lock_thread *t, seqlock_t *sl, uint64_t me,
              struct held_lock *held)
{
    int err = ensure_ready(t, sl, me);
    if (err != 0) {
        return err;
    }
    uint64_t h = atomic_load_explicit(&sl->holder, memory_order_relaxed);
    int takeover = 0, dead = 0;
    if (h == 0 && keep_off(t, sl, me)) {
        return EBUSY;
    }
    t->held_off.lock = NULL;
    if (h == me) {
        /* Our token, though this thread holds no lock at this address:
         * the same lock through another mapping of its memory.  Waiting
         * would be for ourselves. */
        return EDEADLK;
    }
    if (h == 0 && beacon_seen_held(sl)) {
        /* The word free, the beacon held: a taker that has the beacon
         * stores its token next (or the lock is stuck: "Stuck locks"
         * below).  Winning the word would only give it back.  On the
         * uncontended path this costs the load of a word on the line the
         * trylock writes, and a compare. */
        gap_ended(t);
        return EBUSY;
    }
    if (h != 0) {
        switch (beacon_state(sl)) {
        case BEACON_MARKED_DEAD:
            dead = 1;
            break;
        case BEACON_FREE: /* a gap */
            if (!seqlock_gap_holder_gone_(t, sl, h)) {
                return EBUSY;
            }
            break;
        default: /* held: by a live holder, whatever else its word says */
            gap_ended(t);
            return EBUSY;
        }
        takeover = 1;
    }
    gap_ended(t);
    if (!beacon_kind_ok(sl)) {
        return EINVAL;
    }
    /* A takeover that fails gives the word back to the holder it took it
     * from: a record naming that holder goes back with it (a word its
     * record does not name is a stuck state: "Stuck locks"). */
    if (SEQLOCK_UNLIKELY(t->identity == IDENTITY_UNKNOWN)) {
        /* /proc read before the word is won: between the win and the
         * record no system call ("Stuck locks") */
        (void)seqlock_know_myself_(t);
    }
    struct seqlock_owner theirs;
    int have_theirs = takeover;
    if (takeover) {
        seqlock_owner_of_(sl, h, &theirs);
    }
    if (!atomic_compare_exchange_strong_explicit(
            &sl->holder, &h, me, memory_order_acquire, memory_order_relaxed)) {
        return EBUSY; /* another taker came first */
    }
    /* Held up here long enough, we were taken over: the taker's record
     * stays (the word is its now). */
    if (SEQLOCK_LIKELY(atomic_load_explicit(&sl->holder, memory_order_relaxed)
                       == me)) {
        seqlock_publish_owner_(sl, t, me);
    }
    atomic_fetch_add_explicit(&sl->gaps, 1, memory_order_relaxed);
    err = pthread_mutex_trylock(&sl->beacon);
    if (err == 0 || err == EOWNERDEAD) {
        if (err == EOWNERDEAD) {
            /* If we die repairing, the kernel marks the beacon again. */
            (void)pthread_mutex_consistent(&sl->beacon);
            dead = 1;
        }
        /* The beacon makes the lock ours.  A waiter that took our gap for
         * a dead holder's may have the word for an instant: it gives it
         * back when it finds the beacon taken, and our store wins. */
        atomic_store_explicit(&sl->holder, me, memory_order_relaxed);
        note_beacon_owner(sl, held);
        /* A gap's holder has no section open (it has not opened one yet,
         * or closed it), so there is nothing to repair, unless the count
         * says otherwise. */
        if (takeover && !dead && (seqlock_sequence(sl) & 1u)) {
            dead = 1;
        }
        return dead ? EOWNERDEAD : 0;
    }
    /* EBUSY: a holder we took for gone locked its beacon after all; or
     * the beacon is broken.  Give the word back. */
    if (have_theirs) {
        seqlock_write_owner_(sl, &theirs);
    }
    uint64_t mine = me;
    (void)atomic_compare_exchange_strong_explicit(
        &sl->holder, &mine, takeover ? h : 0, memory_order_release,
        memory_order_relaxed);
    return err == EBUSY ? EBUSY : err;
}

/*
 * Stuck locks.  A few states of the lock's words are honest only for as
 * long as one thread, which the words name (the mover), takes to run a
 * few instructions that make no system call; one stray write of a
 * co-tenant can put the lock in each of them for good, and an untimed
 * taker would wait for ever:
 *
 * - `ready` "initialising": a first taker between winning `ready` and
 *   setting the beacon up.  Only a lock nobody has used is set up, so on
 *   a used one (`holder` or `gaps` nonzero) it is EINVAL at once; the
 *   first taker records itself (owner) before it sets the beacon up.
 * - The word free, the beacon held.  A holder takes the word before the
 *   beacon and gives the beacon back before the word, so only this
 *   reaches it: a taker held up in its first gap until it was taken over
 *   (GAP_NS), whose taker-over finished and gave the word back, wins the
 *   beacon after all and has yet to store its token.  Its mover is the
 *   thread the beacon's word names.  (A try makes no move on it: winning
 *   the word would only give it back, and move `gaps`.)
 * - A gap (word held, beacon free) whose holder's record says it lives,
 *   in our PID namespace: the gap rule never takes it over (a live
 *   holder's beacon word zeroed mid-section looks the same).  Its mover
 *   is that holder, between its word and its beacon.
 * - The word held by h, recorded in our namespace, and the beacon held by
 *   another thread id: h in its first gap over a taker that won the
 *   beacon after all (as above), about to give the word back.  Its mover
 *   is h (the beacon's holder, whose gap h took for a dead holder's, may
 *   live where /proc cannot show it).
 * - The word held by a token the owner record does not name (in any
 *   namespace), the beacon held: a taker between winning the word and
 *   recording itself, or a failed taker-over between putting its
 *   holder's record back and the word.  Its mover is named nowhere.
 * - The word and the beacon held by h, recorded in our namespace, and
 *   /proc says h is gone: never honest (the kernel marks a dying
 *   holder's beacon before its thread is seen gone).
 *
 * A waiter that has slept watches for them (owner.c, per thread, across
 * the slices of a caller's wait).  A state seen unchanged for STUCK_NS
 * (its words, `gaps` among them, which every take and release moves, and
 * its mover) is corruption, EINVAL, unless its mover is held up: stopped
 * (SIGSTOP, a debugger), or runnable and not run since (preempted), as
 * /proc says in our PID namespace.  A mover that sleeps, ran RAN_NS
 * meanwhile, is gone, or is the waiter itself is not inside those
 * instructions; the last two states need their mover gone (or the waiter
 * itself), as a live holder may hold the lock for as long as it likes.
 * The error takes nothing from anyone: the waiter leaves the words as it
 * found them (but for the waiters' flag), and a thread merely held up
 * goes on when it runs.  An honest lock is called corrupt only if its
 * mover is held up where /proc cannot show it (in another PID namespace;
 * frozen by a cgroup freezer, which /proc shows asleep) for STUCK_NS: a
 * first taker setting a SEQLOCK_UNLOCKED lock up, a taker held up
 * twice, at two exact instructions, or one held up between winning the
 * word and recording itself.  A lock held by a holder we cannot
 * look at (recorded in another namespace) is waited for as
 * long as it is held: a live writer in another namespace looks just so;
 * as are words forged to name one live thread of ours as a holder.
 */

/* Take the word within timeout_ns: spin, yield, then sleep on the
 * holder's beacon.  Returns 0, EOWNERDEAD, ETIMEDOUT, EINVAL (corrupted,
 * or stuck: above) or a pthread error. */
static int
take_lock_word(struct lock_thread *t, seqlock_t *sl, uint64_t me,
               int64_t timeout_ns, struct held_lock *held)
{
    int err = try_lock_word(t, sl, me, held);
    if (err != EBUSY) {
        return err;
    }
    if (timeout_ns == 0) {
        return ETIMEDOUT;
    }
    int64_t deadline = seqlock_deadline(timeout_ns);
    int64_t first_sleep = 0;
    int slept = 0;
    for (unsigned round = 0;; round++) {
        if (round < SPIN_ROUNDS) {
            cpu_relax();
        }
        else if (round < SPIN_ROUNDS + YIELD_ROUNDS) {
            sched_yield();
        }
        else {
            int64_t nap = next_nap_ns(deadline, WRITER_NAP_NS);
            if (nap == 0) {
                err = ETIMEDOUT;
                break;
            }
            if (!slept) {
                first_sleep = monotonic_ns();
            }
            else if (monotonic_ns() - first_sleep >= STARVE_NS) {
                uint64_t none = 0;
                (void)atomic_compare_exchange_strong_explicit(
                    &sl->starving, &none, me, memory_order_relaxed,
                    memory_order_relaxed);
            }
            if (atomic_load_explicit(&sl->ready, memory_order_acquire)
                == SEQLOCK_READY) {
                seqlock_sleep_on_beacon_(sl, nap);
            }
            else { /* another taker is setting the beacon up */
                struct timespec ts = timespec_of(nap < MS_NS ? nap : MS_NS);
                (void)nanosleep(&ts, NULL);
            }
            slept = 1;
        }
        err = try_lock_word(t, sl, me, held);
        if (err != EBUSY) {
            if (slept && (err == 0 || err == EOWNERDEAD)) {
                keep_waiters_flag(sl);
            }
            break;
        }
        if (slept && seqlock_lock_stuck_(t, sl)) {
            err = EINVAL; /* stuck: nobody will end it */
            break;
        }
        if (deadline >= 0 && round < SPIN_ROUNDS + YIELD_ROUNDS
            && round % 16 == 15 && monotonic_ns() >= deadline) {
            err = ETIMEDOUT;
            break;
        }
    }
    uint64_t mine = me; /* no longer waiting: taken, or given up */
    (void)atomic_compare_exchange_strong_explicit(
        &sl->starving, &mine, 0, memory_order_relaxed, memory_order_relaxed);
    return err;
}

int
seqlock_lock_excl_timed(seqlock_t *sl, int64_t timeout_ns)
{
    struct lock_thread *t = this_thread();
    if (find_held(t, sl) != NULL) {
        return EDEADLK;
    }
    int err = reserve_held(t);
    if (err != 0) {
        return err;
    }
    uint64_t me = token_of(t);
    struct held_lock held = {sl, NO_SECTION, me, 0, 0};
    int saved_errno = errno;
    err = take_lock_word(t, sl, me, timeout_ns, &held);
    errno = saved_errno;
    if (err != 0 && err != EOWNERDEAD) {
        return err;
    }
    *held_at(t, t->held_count++) = held;
    if (atomic_load_explicit(&sl->abandoned, memory_order_relaxed)) {
        /* A taker before us could not repair this section: it is ours now,
         * as from its dead writer. */
        atomic_store_explicit(&sl->abandoned, 0, memory_order_relaxed);
        err = EOWNERDEAD;
    }
    return err;
}

void
seqlock_ask_turn(seqlock_t *sl)
{
    uint64_t none = 0;
    (void)atomic_compare_exchange_strong_explicit(
        &sl->starving, &none, seqlock_self(), memory_order_relaxed,
        memory_order_relaxed);
}

void
seqlock_drop_turn(seqlock_t *sl)
{
    uint64_t mine = seqlock_self();
    (void)atomic_compare_exchange_strong_explicit(
        &sl->starving, &mine, 0, memory_order_relaxed, memory_order_relaxed);
}

int
seqlock_open_section(seqlock_t *sl)
{
    struct held_lock *h = find_held(this_thread(), sl);
    if (h == NULL) {
        return EPERM;
    }
    if (h->section != NO_SECTION) {
        return EINVAL;
    }
    /* Make the count odd (it already is if a dead holder left its section
     * open: adopt it): a latch switch (seqlock_latch()), whose first fence
     * orders the last holder's stores before it and whose second orders it
     * before the caller's data stores. */
    uint64_t seq = seqlock_sequence(sl);
    if (seq & 1u) {
        h->section = seq - 1;
        atomic_thread_fence(memory_order_release);
    }
    else {
        h->section = seq;
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&sl->seqcount.sequence, seq + 1,
                              memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
    }
    return 0;
}

int
seqlock_write_lock_timed(seqlock_t *sl, int64_t timeout_ns)
{
    int err = seqlock_lock_excl_timed(sl, timeout_ns);
    if (err == 0 || err == EOWNERDEAD) {
        (void)seqlock_open_section(sl);
    }
    return err;
}

int
seqlock_close_section(seqlock_t *sl)
{
    struct held_lock *h = find_held(this_thread(), sl);
    if (h == NULL) {
        return EPERM;
    }
    if (h->section == NO_SECTION) {
        /* A dead holder's section, taken over with the lock word */
        uint64_t seq = seqlock_sequence(sl);
        if (!(seq & 1u)) {
            return EINVAL;
        }
        h->section = seq - 1;
    }
    end_section(sl, h->section);
    h->section = NO_SECTION;
    return 0;
}

/* Unlock the beacon, then give the word back: never the word first, or a
 * contender would try a beacon its holder still holds (the one thing the
 * beacon design rules out: see the top of this section).  Between the two
 * lies the holder's second gap, which makes no system call, as kills
 * land on system calls: glibc's unlock would wake a sleeping writer
 * there, so the flag that asks it to is taken off first, and the sleepers
 * are woken after the word is given back.  The word's compare-and-swap: a
 * waiter that took it over in the gap has it now.  Returns 0, or
 * ENOTRECOVERABLE (seqlock_unlock()). */
static int
release_lock_word(struct lock_thread *t, seqlock_t *sl, struct held_lock *h)
{
    struct held_lock held = *h;
    forget_held(t, h);
    restore_beacon_owner(sl, &held);
    int sleepers = take_waiters_flag(sl);
    atomic_fetch_add_explicit(&sl->gaps, 1, memory_order_relaxed);
    int err = pthread_mutex_unlock(&sl->beacon);
    if (err != 0) { /* rewritten again after restore_beacon_owner(): once more */
        restore_beacon_owner(sl, &held);
        err = pthread_mutex_unlock(&sl->beacon);
    }
    uint64_t me = held.token;
    (void)atomic_compare_exchange_strong_explicit(
        &sl->holder, &me, 0, memory_order_release, memory_order_relaxed);
    int starving = atomic_load_explicit(&sl->starving, memory_order_relaxed)
                   != 0;
    if (sleepers || starving) {
        /* one, as glibc would; every one if the starving one must come */
        seqlock_wake_on_beacon_(sl, starving ? INT_MAX : 1);
    }
    return err == 0 ? 0 : ENOTRECOVERABLE;
}

int
seqlock_unlock(seqlock_t *sl)
{
    struct lock_thread *t = this_thread();
    struct held_lock *h = find_held(t, sl);
    if (h == NULL) {
        return EPERM;
    }
    if (h->section != NO_SECTION) {
        end_section(sl, h->section); /* never leave readers waiting */
    }
    return release_lock_word(t, sl, h);
}

int
seqlock_abandon(seqlock_t *sl)
{
    struct lock_thread *t = this_thread();
    struct held_lock *h = find_held(t, sl);
    if (h == NULL) {
        return EPERM;
    }
    if (h->section == NO_SECTION && !(seqlock_sequence(sl) & 1u)) {
        return EINVAL;
    }
    atomic_store_explicit(&sl->abandoned, 1, memory_order_release);
    int err = release_lock_word(t, sl, h);
    seqlock_unpark_all_(low_half(&sl->seqcount.sequence)); /* readers: look again */
    return err;
}
