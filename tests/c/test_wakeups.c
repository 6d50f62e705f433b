/*
 * test_wakeups.c - seqlock.h's wake-ups: a section's end wakes the writers
 * and readers asleep on the lock, and a signal does not end their wait; a
 * reader killed asleep, a locking pass that closes a dead writer's section
 * and a writer that wins the lock while spinning leave the sleepers after
 * them their wake-ups (an earlier core's dead sleeper or spinning waiter
 * cost later wake-ups).
 */
#include "harness.h"

/* ==== waking sleepers ==== */

/* A waiter's thread: write_seqlock(), noting when it got in. */
static void *
writer_waiter_main(void *arg)
{
    struct waiter *w = arg;
    write_seqlock(w->sl);
    atomic_store(&w->done_at_ns, now_ns());
    w->seq = seqlock_sequence(w->sl);
    w->held_by_me = seqlock_held_by_me(w->sl);
    write_sequnlock(w->sl);
    return NULL;
}

static void
test_unlock_wakes_writer_asleep_on_the_lock(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    struct waiter w = {.sl = &sl};
    CHECK(holder_start(&h, &sl));
    CHECK(start_waiter(&w, writer_waiter_main));
    /* Past spinning and yielding, into the futex sleep; then hold on a
     * while longer so that the unlock, not a spin, lets it in. */
    int slept = await_asleep(writer_is_asleep, &sl);
    sleep_ms(100);
    int waiting_still = atomic_load(&w.done_at_ns) == 0;
    holder_release(&h);
    pthread_join(w.thread, NULL);
    CHECK(slept);
    CHECK(waiting_still);
    CHECK(w.held_by_me);
    CHECK(w.seq == 3); /* the holder's section was 1..2 */
    CHECK(atomic_load(&w.done_at_ns) - atomic_load(&h.unlocked_at_ns)
          < PROMPTLY_NS);
    CHECK(!seqlock_is_locked(&sl));
}

static void
test_unlock_lets_in_reader_asleep_on_the_sequence(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    struct waiter r = {.sl = &sl};
    CHECK(holder_start(&h, &sl));
    CHECK(start_waiter(&r, reader_waiter_main));
    int slept = await_asleep(reader_is_asleep, &sl);
    sleep_ms(100);
    int waiting_still = atomic_load(&r.done_at_ns) == 0;
    holder_release(&h);
    pthread_join(r.thread, NULL);
    CHECK(slept);
    CHECK(waiting_still);
    CHECK(r.seq == 2);
    CHECK(atomic_load(&r.done_at_ns) - atomic_load(&h.unlocked_at_ns)
          < PROMPTLY_NS);
}

static void
test_section_end_wakes_a_reader_that_announced_its_sleep(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    struct sleeper s;
    CHECK(holder_start(&h, &sl));
    int slept = sleeper_start(&s, &sl);
    holder_release(&h);
    sleeper_join(&s);
    CHECK(slept);
    CHECK(atomic_load(&s.done_at_ns) - atomic_load(&h.unlocked_at_ns)
          < PROMPTLY_NS);
}

static void
ignore_signal(int sig)
{
    (void)sig;
}

static seqlock_t interrupted_lock = SEQLOCK_UNLOCKED;

/* A handler that interrupts a sleeping write_seqlock() or read_seqbegin()
 * makes the futex wait return EINTR; the call must keep waiting, not
 * abort.  In a child process: w, started with waiter_main behind a holder
 * of interrupted_lock, is interrupted asleep, then let in; exits 2 if it
 * could not be put to sleep. */
static void
interrupt_a_sleeping_waiter(struct waiter *w, void *(*waiter_main)(void *),
                            int (*is_asleep)(void *))
{
    struct sigaction sa = {.sa_handler = ignore_signal};
    sigaction(SIGUSR1, &sa, NULL);
    struct holder h;
    if (!holder_start(&h, &interrupted_lock)
        || !start_waiter(w, waiter_main)
        || !await_asleep(is_asleep, &interrupted_lock)) {
        _exit(2);
    }
    sleep_ms(50);
    pthread_kill(w->thread, SIGUSR1);
    sleep_ms(50);
    holder_release(&h);
    pthread_join(w->thread, NULL);
}

/* Run fn in a child process: nonzero if it exited 0 (else say how not). */
static int
exits_cleanly_in_child(void (*fn)(void))
{
    struct child_result r;
    if (!run_in_child(fn, &r)) {
        return 0;
    }
    int clean = WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
    if (!clean) {
        fprintf(stderr, "child status %#x, stderr: %s", r.status,
                r.stderr_text);
    }
    return clean;
}

static void
writer_interrupted_while_asleep(void)
{
    struct waiter w = {.sl = &interrupted_lock};
    interrupt_a_sleeping_waiter(&w, writer_waiter_main, writer_is_asleep);
    _exit(w.held_by_me ? 0 : 3);
}

static void
test_write_seqlock_keeps_waiting_when_a_signal_interrupts_its_sleep(void)
{
    CHECK(exits_cleanly_in_child(writer_interrupted_while_asleep));
}

static void
reader_interrupted_while_asleep(void)
{
    struct waiter r = {.sl = &interrupted_lock};
    interrupt_a_sleeping_waiter(&r, reader_waiter_main, reader_is_asleep);
    _exit(r.seq == 2 ? 0 : 3);
}

static void
test_read_seqbegin_keeps_waiting_when_a_signal_interrupts_its_sleep(void)
{
    CHECK(exits_cleanly_in_child(reader_interrupted_while_asleep));
}

/* ==== sleepers that die, or are outrun ==== */

static void
read_once(void *arg)
{
    struct shared_record *rec = arg;
    (void)read_seqbegin(&rec->lock);
}

/* A shared record whose first section (count 1) had a reader process
 * asleep on it, killed by SIGKILL while asleep; or NULL. */
static struct shared_record *
record_after_reader_killed_asleep(void)
{
    struct shared_record *rec = shared_record_new();
    if (rec == NULL) {
        return NULL;
    }
    write_seqlock(&rec->lock);
    pid_t reader = start_child(read_once, rec);
    int asleep = await_asleep(reader_is_asleep, &rec->lock);
    int reaped = kill_child(reader);
    write_sequnlock(&rec->lock);
    if (!asleep || !reaped || atomic_load(&rec->lock.wake_from) != 1) {
        shared_record_free(rec);
        return NULL;
    }
    return rec;
}

static void
test_reader_killed_asleep_costs_later_section_ends_no_wake_up(void)
{
    struct shared_record *rec = record_after_reader_killed_asleep();
    CHECK(rec != NULL);
    int below_start = 1;
    for (int i = 0; i < 3; i++) {
        write_seqlock(&rec->lock);
        uint64_t start = seqlock_sequence(&rec->lock) - 1;
        /* what the section's end will compare */
        below_start &= atomic_load(&rec->lock.wake_from) < start;
        write_sequnlock(&rec->lock);
    }
    shared_record_free(rec);
    CHECK(below_start);
}

static void
test_reader_killed_asleep_leaves_later_sleepers_woken(void)
{
    struct shared_record *rec = record_after_reader_killed_asleep();
    CHECK(rec != NULL);
    struct holder h;
    struct sleeper s = {0};
    int held = holder_start(&h, &rec->lock);
    int slept = held && sleeper_start(&s, &rec->lock);
    if (held) {
        holder_release(&h);
    }
    sleeper_join(&s);
    shared_record_free(rec);
    CHECK(held && slept);
    CHECK(atomic_load(&s.done_at_ns) - atomic_load(&h.unlocked_at_ns)
          < PROMPTLY_NS);
}

static void
test_locking_pass_closing_a_dead_writers_section_wakes_sleepers(void)
{
    struct shared_record *rec =
        record_left_locked_by_dead_child(WRITE_SECTION);
    CHECK(rec != NULL);
    struct sleeper s;
    int slept = sleeper_start(&s, &rec->lock);
    int64_t closed_at = now_ns();
    read_seqlock_excl(&rec->lock);
    uint64_t inside = seqlock_sequence(&rec->lock);
    read_sequnlock_excl(&rec->lock);
    sleeper_join(&s);
    shared_record_free(rec);
    CHECK(slept);
    CHECK(inside == 2);
    CHECK(atomic_load(&s.done_at_ns) - closed_at < PROMPTLY_NS);
}

/* One round: a writer asleep in the mutex, another spinning until the
 * holder's unlock begins, so that it usually wins the lock from under the
 * woken sleeper, which must then be woken again.  Nonzero if both got the
 * lock; *wait is how long after the unlock the later one got it. */
static int
sleeper_and_spinner_round(seqlock_t *sl, int64_t *wait, int *spinner_first)
{
    struct holder h;
    struct waiter sleeper = {.sl = sl};
    struct waiter spinner = {.sl = sl, .go = &h.unlocked_at_ns};
    if (!holder_start(&h, sl)) {
        return 0;
    }
    int sleeping = start_waiter(&sleeper, timed_writer_main);
    int asleep = sleeping && await_asleep(writer_is_asleep, sl);
    int spinning = start_waiter(&spinner, timed_writer_main);
    sleep_ms(1);
    holder_release(&h);
    if (sleeping) {
        pthread_join(sleeper.thread, NULL);
    }
    if (spinning) {
        pthread_join(spinner.thread, NULL);
    }
    int64_t slept_done = atomic_load(&sleeper.done_at_ns);
    int64_t spun_done = atomic_load(&spinner.done_at_ns);
    *wait = (slept_done > spun_done ? slept_done : spun_done)
            - atomic_load(&h.unlocked_at_ns);
    *spinner_first = spun_done < slept_done;
    return asleep && spinning && sleeper.err == 0 && spinner.err == 0;
}

static void
test_writer_winning_while_spinning_leaves_a_sleeping_writer_its_wake_up(void)
{
    enum { ROUNDS = 20 };
    seqlock_t sl = SEQLOCK_UNLOCKED;
    int64_t worst = 0;
    int spinner_first = 0, ok = 1;
    for (int i = 0; i < ROUNDS && ok; i++) {
        int64_t wait = 0;
        int first = 0;
        ok = sleeper_and_spinner_round(&sl, &wait, &first)
             && wait < PROMPTLY_NS;
        worst = wait > worst ? wait : worst;
        spinner_first += first;
    }
    printf("  worst wait for both writers after the release: %.1f us; the "
           "spinner got in first in %d of %d rounds\n", us_of(worst),
           spinner_first, ROUNDS);
    CHECK(ok);
    CHECK(seqlock_sequence(&sl) == 6 * ROUNDS);
}

/* ---- registration ---- */

static const struct test tests[] = {
    TEST(test_unlock_wakes_writer_asleep_on_the_lock, PLAIN),
    TEST(test_unlock_lets_in_reader_asleep_on_the_sequence, PLAIN),
    TEST(test_section_end_wakes_a_reader_that_announced_its_sleep, PLAIN),
    TEST(test_write_seqlock_keeps_waiting_when_a_signal_interrupts_its_sleep,
         FORKS_OR_SIGNALS),
    TEST(test_read_seqbegin_keeps_waiting_when_a_signal_interrupts_its_sleep,
         FORKS_OR_SIGNALS),
    TEST(test_reader_killed_asleep_costs_later_section_ends_no_wake_up,
         FORKS_OR_SIGNALS),
    TEST(test_reader_killed_asleep_leaves_later_sleepers_woken,
         FORKS_OR_SIGNALS),
    TEST(test_locking_pass_closing_a_dead_writers_section_wakes_sleepers,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_writer_winning_while_spinning_leaves_a_sleeping_writer_its_wake_up,
         PLAIN),
};
REGISTER_TESTS(tests)
