/*
 * test_news.c - seqlock.h's readers that wait for news:
 * seqlock_wait_for_change() returns when a section has ended since the
 * count it was given (in this thread, another, or another process), times
 * out, is EDEADLK for the holder and is ended by a cancel with
 * seqlock_wake_waiters(); then its hostile review: a count that wraps, a
 * cancel racing the waiter's sleep, a writer that died.
 */
#include "harness.h"

/* ==== readers that wait for news (seqlock_wait_for_change) ==== */

/* A wake-up must come well before a waiter's nap would hide a lost one. */
#define WOKEN_NS (SEQLOCK_WAITER_NAP_MS * MS / 2)

/* A thread in seqlock_wait_for_change(sl, seq, GIVE_UP_NS, cancel). */
struct news_waiter {
    seqlock_t *sl;
    uint64_t seq;
    const _Atomic uint32_t *cancel;
    unsigned flags;
    pthread_t thread;
    int err;
    uint64_t now;
    _Atomic int64_t done_at_ns;
};

static void *
news_waiter_main(void *arg)
{
    struct news_waiter *w = arg;
    w->err = seqlock_wait_for_change_flags(w->sl, w->seq, GIVE_UP_NS,
                                           w->cancel, w->flags, &w->now);
    atomic_store(&w->done_at_ns, now_ns());
    return NULL;
}

/* A waiter about to sleep has announced the count it saw in wake_from. */
static int
news_waiter_is_asleep(void *arg)
{
    seqlock_t *sl = arg;
    uint64_t announced = atomic_load(&sl->wake_from);
    return announced != 0 && announced >= seqlock_sequence(sl);
}

/* One empty write section; returns when it ended. */
static int64_t
write_once(seqlock_t *sl)
{
    write_seqlock(sl);
    int64_t ended_at = now_ns();
    write_sequnlock(sl);
    return ended_at;
}

/* Write once (so that the waiter's announcement is not wake_from's
 * initial 0), then start a waiter for a change from the count, 2; nonzero
 * once it sleeps.  Whatever it returns, pthread_join() it. */
static int
news_waiter_start(struct news_waiter *w, seqlock_t *sl,
                  const _Atomic uint32_t *cancel)
{
    (void)write_once(sl);
    memset(w, 0, sizeof *w);
    w->sl = sl;
    w->seq = seqlock_sequence(sl);
    w->cancel = cancel;
    if (pthread_create(&w->thread, NULL, news_waiter_main, w) != 0) {
        return 0;
    }
    return await_asleep(news_waiter_is_asleep, sl);
}

static void
test_wait_for_change_returns_at_once_when_a_section_has_ended_since(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    (void)write_once(&sl);
    uint64_t now = 0;
    CHECK(seqlock_wait_for_change(&sl, 0, 0, NULL, &now) == 0);
    CHECK(now == 2);
}

static void
test_wait_for_change_times_out_while_nothing_is_written(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    (void)write_once(&sl);
    uint64_t now = 0;
    CHECK(seqlock_wait_for_change(&sl, 2, 0, NULL, &now) == ETIMEDOUT);
    int64_t start = now_ns();
    CHECK(seqlock_wait_for_change(&sl, 2, 20 * MS, NULL, &now) == ETIMEDOUT);
    CHECK(now_ns() - start >= 20 * MS);
    CHECK(now == 0);
}

static void
test_wait_for_change_does_not_return_for_an_open_section(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    uint64_t now = 0;
    CHECK(holder_start(&h, &sl));
    int during = seqlock_wait_for_change(&sl, 0, 10 * MS, NULL, &now);
    int during_from_odd = seqlock_wait_for_change(&sl, 1, 0, NULL, &now);
    holder_release(&h);
    CHECK(during == ETIMEDOUT);
    CHECK(during_from_odd == ETIMEDOUT);
    CHECK(seqlock_wait_for_change(&sl, 1, 0, NULL, &now) == 0);
    CHECK(now == 2);
}

static void
test_section_end_wakes_a_thread_waiting_for_change(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct news_waiter w;
    int slept = news_waiter_start(&w, &sl, NULL);
    sleep_ms(50);
    int waiting_still = atomic_load(&w.done_at_ns) == 0;
    int64_t ended_at = write_once(&sl);
    pthread_join(w.thread, NULL);
    CHECK(slept);
    CHECK(waiting_still);
    CHECK(w.err == 0);
    CHECK(w.now == 4);
    CHECK(atomic_load(&w.done_at_ns) - ended_at < WOKEN_NS);
}

static void
test_opening_a_section_does_not_wake_a_waiter_for_change(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct news_waiter w;
    int slept = news_waiter_start(&w, &sl, NULL);
    write_seqlock(&sl);
    sleep_ms(50);
    int waiting_in_section = atomic_load(&w.done_at_ns) == 0;
    int64_t ended_at = now_ns();
    write_sequnlock(&sl);
    pthread_join(w.thread, NULL);
    CHECK(slept);
    CHECK(waiting_in_section);
    CHECK(w.err == 0 && w.now == 4);
    CHECK(atomic_load(&w.done_at_ns) - ended_at < WOKEN_NS);
}

static void
test_wait_for_change_is_edeadlk_for_the_lock_holder(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    uint64_t now;
    write_seqlock(&sl);
    int in_section = seqlock_wait_for_change(&sl, 0, GIVE_UP_NS, NULL, &now);
    write_sequnlock(&sl);
    CHECK(in_section == EDEADLK);
    CHECK(seqlock_lock_excl_timed(&sl, 0) == 0);
    int in_locking_pass = seqlock_wait_for_change(&sl, 2, GIVE_UP_NS, NULL,
                                                  &now);
    seqlock_unlock(&sl);
    CHECK(in_locking_pass == EDEADLK);
}

static void
test_wake_waiters_ends_a_cancelled_wait_at_once(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    _Atomic uint32_t cancel = 0;
    struct news_waiter w;
    int slept = news_waiter_start(&w, &sl, &cancel);
    int64_t cancelled_at = now_ns();
    atomic_store(&cancel, 1);
    seqlock_wake_waiters(&sl);
    pthread_join(w.thread, NULL);
    CHECK(slept);
    CHECK(w.err == ECANCELED);
    CHECK(atomic_load(&w.done_at_ns) - cancelled_at < WOKEN_NS);
    CHECK(seqlock_sequence(&sl) == 2);
}

static void
test_wake_waiters_ends_a_cancelled_wait_with_long_naps_at_once(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    _Atomic uint32_t cancel = 0;
    struct news_waiter w;
    (void)write_once(&sl);
    memset(&w, 0, sizeof w);
    w.sl = &sl;
    w.seq = seqlock_sequence(&sl);
    w.cancel = &cancel;
    w.flags = SEQLOCK_WAIT_LONG_NAPS;
    int started = pthread_create(&w.thread, NULL, news_waiter_main, &w) == 0;
    int slept = started && await_asleep(news_waiter_is_asleep, &sl);
    sleep_ms(20); /* past the look at *cancel: asleep on the futex */
    int64_t cancelled_at = now_ns();
    atomic_store(&cancel, 1);
    seqlock_wake_waiters(&sl);
    if (started) {
        pthread_join(w.thread, NULL);
    }
    CHECK(slept);
    CHECK(w.err == ECANCELED);
    CHECK(atomic_load(&w.done_at_ns) - cancelled_at < WOKEN_NS);
}

static void
test_wake_waiters_leaves_uncancelled_waiters_waiting(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct news_waiter w;
    int slept = news_waiter_start(&w, &sl, NULL);
    seqlock_wake_waiters(&sl);
    sleep_ms(50);
    int waiting_still = atomic_load(&w.done_at_ns) == 0;
    (void)write_once(&sl);
    pthread_join(w.thread, NULL);
    CHECK(slept);
    CHECK(waiting_still);
    CHECK(w.err == 0 && w.now == 4);
}

static void
test_section_end_in_another_process_wakes_a_waiter_for_change(void)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    struct news_waiter w;
    int slept = news_waiter_start(&w, &rec->lock, NULL);
    pid_t child = fork();
    if (child == 0) {
        alarm(CHILD_GUARD_S); /* a hung child fails the test, not the run */
        write_seqlock(&rec->lock);
        write_sequnlock(&rec->lock);
        _exit(0);
    }
    int status = -1;
    if (child > 0) {
        waitpid(child, &status, 0);
    }
    int64_t child_done_at = now_ns();
    pthread_join(w.thread, NULL);
    shared_record_free(rec);
    CHECK(slept);
    CHECK(child > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(w.err == 0 && w.now == 4);
    CHECK(atomic_load(&w.done_at_ns) - child_done_at < WOKEN_NS);
}

/* ---- hostile review of the waiters for news ---- */

/* A waiter for change, started on a count set directly. */
static int
news_waiter_start_at(struct news_waiter *w, seqlock_t *sl, uint64_t seq,
                     const _Atomic uint32_t *cancel)
{
    memset(w, 0, sizeof *w);
    w->sl = sl;
    w->seq = seq;
    w->cancel = cancel;
    return pthread_create(&w->thread, NULL, news_waiter_main, w) == 0;
}

/* A waiter asleep on the odd count 2**64 - 1 (a section open at the top
 * of the count's range) must be woken when that section ends and the count
 * wraps to 0: wake_from + 1 overflowed to 0, so the section end thought
 * nobody slept on it and the waiter slept its whole nap. */
static void
test_section_end_wrapping_the_count_to_zero_wakes_a_waiter(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    (void)write_once(&sl); /* sets the beacon up */
    atomic_store(&sl.seqcount.sequence, UINT64_MAX - 1);
    write_seqlock(&sl); /* count 2**64 - 1 */
    CHECK(seqlock_sequence(&sl) == UINT64_MAX);
    struct news_waiter w;
    int started = news_waiter_start_at(&w, &sl, UINT64_MAX - 1, NULL);
    int slept = started && await_asleep(news_waiter_is_asleep, &sl);
    int64_t ended_at = now_ns();
    write_sequnlock(&sl); /* count wraps to 0 */
    if (started) {
        pthread_join(w.thread, NULL);
    }
    CHECK(slept);
    CHECK(seqlock_sequence(&sl) == 0);
    CHECK(w.err == 0 && w.now == 0);
    CHECK(atomic_load(&w.done_at_ns) - ended_at < WOKEN_NS);
}

/* wake_from is 0 again: the next waiter's announcement shows it asleep. */
static int
news_waiter_announced(void *arg)
{
    return atomic_load(&((seqlock_t *)arg)->wake_from) != 0;
}

/* A cancel that lands just after the waiter looked at *cancel, before its
 * futex wait began, must still end the wait promptly: the wake-up found
 * nobody asleep, the count did not change, and the waiter slept its
 * whole nap (1 s) with the cancel set. */
static void
test_cancel_racing_a_waiter_falling_asleep_ends_it_promptly(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    (void)write_once(&sl);
    int slow = 0, rounds = 0;
    int64_t worst = 0;
    for (; rounds < 40; rounds++) {
        _Atomic uint32_t cancel = 0;
        atomic_store(&sl.wake_from, 0);
        struct news_waiter w;
        if (!news_waiter_start_at(&w, &sl, seqlock_sequence(&sl), &cancel)) {
            break;
        }
        /* the waiter has looked at *cancel and is about to sleep */
        while (!news_waiter_announced(&sl)) {
        }
        int64_t cancelled_at = now_ns();
        atomic_store(&cancel, 1);
        seqlock_wake_waiters(&sl);
        pthread_join(w.thread, NULL);
        int64_t took = atomic_load(&w.done_at_ns) - cancelled_at;
        worst = took > worst ? took : worst;
        slow += took >= WOKEN_NS;
        CHECK(w.err == ECANCELED);
        if (slow >= 2) {
            rounds++;
            break;
        }
    }
    printf("  %d of %d cancels raced the waiter's sleep (worst %.0f ms)\n",
           slow, rounds, (double)worst / MS);
    CHECK(slow == 0);
}

/* A waiter for news on a lock whose writer died inside its section hears
 * EOWNERDEAD, as a timed reader does, rather than sleeping on an odd
 * count that nobody will ever end (for ever, with no timeout). */
static void
test_wait_for_change_reports_eownerdead_for_dead_writer(void)
{
    struct shared_record *rec =
        record_left_locked_by_dead_child(WRITE_SECTION);
    CHECK(rec != NULL);
    uint64_t now = 0;
    int64_t start = now_ns();
    int err = seqlock_wait_for_change(&rec->lock, 0, 3 * SEC, NULL, &now);
    int64_t took = now_ns() - start;
    shared_record_free(rec);
    CHECK(err == EOWNERDEAD);
    CHECK(took < PROMPTLY_NS);
}

/* ---- registration ---- */

static const struct test tests[] = {
    TEST(test_wait_for_change_returns_at_once_when_a_section_has_ended_since,
         PLAIN),
    TEST(test_wait_for_change_times_out_while_nothing_is_written, PLAIN),
    TEST(test_wait_for_change_does_not_return_for_an_open_section, PLAIN),
    TEST(test_section_end_wakes_a_thread_waiting_for_change, PLAIN),
    TEST(test_opening_a_section_does_not_wake_a_waiter_for_change, PLAIN),
    TEST(test_wait_for_change_is_edeadlk_for_the_lock_holder, PLAIN),
    TEST(test_wake_waiters_ends_a_cancelled_wait_at_once, PLAIN),
    TEST(test_wake_waiters_ends_a_cancelled_wait_with_long_naps_at_once,
         PLAIN),
    TEST(test_wake_waiters_leaves_uncancelled_waiters_waiting, PLAIN),
    TEST(test_section_end_in_another_process_wakes_a_waiter_for_change,
         FORKS_OR_SIGNALS),
    TEST(test_section_end_wrapping_the_count_to_zero_wakes_a_waiter, PLAIN),
    TEST(test_cancel_racing_a_waiter_falling_asleep_ends_it_promptly, PLAIN),
    TEST(test_wait_for_change_reports_eownerdead_for_dead_writer,
         FORKS_OR_SIGNALS | ROBUST_LIST),
};
REGISTER_TESTS(tests)
