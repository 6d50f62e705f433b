/*
 * test_dead_owner.c - seqlock.h's holders that die: a writer (a process or
 * a thread) or a locking pass that dies holding the lock gives the next
 * taker EOWNERDEAD, a writer's section left open for repair
 * (seqlock_owner_died(), seqlock_is_locked() until then); timed readers
 * and waiters asleep on the lock hear of it at once.
 */
#include "harness.h"

/* ==== a writer that dies holding the lock ==== */

/* A waiter's thread: seqlock_read_begin_timed() with GIVE_UP_NS. */
static void *
timed_reader_main(void *arg)
{
    struct waiter *w = arg;
    w->err = seqlock_read_begin_timed(w->sl, GIVE_UP_NS, &w->seq);
    atomic_store(&w->done_at_ns, now_ns());
    return NULL;
}

/* A child that takes rec's lock (a write section), says so (step 1), and
 * waits to be killed. */
static void
hold_until_killed(void *arg)
{
    struct shared_record *rec = arg;
    write_seqlock(&rec->lock);
    step_to(rec, 1);
    idle_until_killed(NULL);
}

static void
test_timed_reader_reports_eownerdead_for_unreaped_dead_writer(void)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    pid_t zombie = child_dies_holding(rec, WRITE_SECTION, 0);
    uint64_t seq = 0;
    int err = seqlock_read_begin_timed(&rec->lock, GIVE_UP_NS, &seq);
    shared_record_free(rec);
    CHECK(reap(zombie));
    CHECK(err == EOWNERDEAD);
}

static void
test_timed_reader_reports_eownerdead_for_dead_writer(void)
{
    struct shared_record *rec =
        record_left_locked_by_dead_child(WRITE_SECTION);
    CHECK(rec != NULL);
    uint64_t seq = 0;
    int64_t start = now_ns();
    int err = seqlock_read_begin_timed(&rec->lock, GIVE_UP_NS, &seq);
    int64_t took = now_ns() - start;
    uint64_t left = seqlock_sequence(&rec->lock);
    shared_record_free(rec);
    CHECK(err == EOWNERDEAD);
    CHECK(took < PROMPTLY_NS); /* a reader looks at every nap's end */
    CHECK(left == 1);
}

static void
test_owner_died_is_set_by_the_holders_death_until_taken_over(void)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    write_seqlock(&rec->lock);
    int while_held = seqlock_owner_died(&rec->lock);
    write_sequnlock(&rec->lock);
    int after_dead = reap(child_dies_holding(rec, WRITE_SECTION, SIGKILL))
                     && seqlock_owner_died(&rec->lock);
    int err = seqlock_write_lock_timed(&rec->lock, GIVE_UP_NS);
    int once_taken = seqlock_owner_died(&rec->lock);
    if (err == 0 || err == EOWNERDEAD) {
        write_sequnlock(&rec->lock);
    }
    shared_record_free(rec);
    CHECK(!while_held);
    CHECK(after_dead);
    CHECK(err == EOWNERDEAD);
    CHECK(!once_taken);
}

static void
test_is_locked_stays_set_for_a_dead_holder_until_taken_over(void)
{
    struct shared_record *rec =
        record_left_locked_by_dead_child(WRITE_SECTION);
    CHECK(rec != NULL);
    int dead_holder = seqlock_is_locked(&rec->lock);
    int err = seqlock_write_lock_timed(&rec->lock, GIVE_UP_NS);
    int mine = seqlock_held_by_me(&rec->lock);
    if (err == 0 || err == EOWNERDEAD) {
        write_sequnlock(&rec->lock);
    }
    int after = seqlock_is_locked(&rec->lock);
    shared_record_free(rec);
    CHECK(dead_holder);
    CHECK(err == EOWNERDEAD);
    CHECK(mine);
    CHECK(!after);
}

static void
test_timed_writer_takes_over_from_dead_writer(void)
{
    struct shared_record *rec =
        record_left_locked_by_dead_child(WRITE_SECTION);
    CHECK(rec != NULL);
    int64_t start = now_ns();
    int err = seqlock_write_lock_timed(&rec->lock, GIVE_UP_NS);
    int64_t took = now_ns() - start;
    int mine = seqlock_held_by_me(&rec->lock);
    uint64_t inside = seqlock_sequence(&rec->lock);
    if (err == EOWNERDEAD || err == 0) {
        write_sequnlock(&rec->lock);
    }
    uint64_t after = seqlock_sequence(&rec->lock);
    int locked_after = seqlock_is_locked(&rec->lock);
    shared_record_free(rec);
    CHECK(err == EOWNERDEAD);
    CHECK(took < PROMPTLY_NS);
    CHECK(mine);
    CHECK(inside == 1); /* still odd: the data may be half-written */
    CHECK(after == 2);
    CHECK(!locked_after);
}

static void
test_lock_excl_timed_reports_eownerdead_with_the_dead_section_open(void)
{
    struct shared_record *rec =
        record_left_locked_by_dead_child(WRITE_SECTION);
    CHECK(rec != NULL);
    int err = seqlock_lock_excl_timed(&rec->lock, GIVE_UP_NS);
    uint64_t inside = seqlock_sequence(&rec->lock);
    int closed = seqlock_close_section(&rec->lock);
    int unlocked = seqlock_unlock(&rec->lock);
    uint64_t after = seqlock_sequence(&rec->lock);
    shared_record_free(rec);
    CHECK(err == EOWNERDEAD);
    CHECK(inside == 1);
    CHECK(closed == 0);
    CHECK(unlocked == 0);
    CHECK(after == 2);
}

static void
test_write_tryseqlock_takes_over_from_dead_writer(void)
{
    struct shared_record *rec =
        record_left_locked_by_dead_child(WRITE_SECTION);
    CHECK(rec != NULL);
    int took = write_tryseqlock(&rec->lock);
    uint64_t inside = seqlock_sequence(&rec->lock);
    if (took) {
        write_sequnlock(&rec->lock);
    }
    shared_record_free(rec);
    CHECK(took);
    CHECK(inside == 1); /* the dead section, adopted as it stands */
}

static void
test_lock_works_normally_after_dead_writer_is_repaired(void)
{
    struct shared_record *rec =
        record_left_locked_by_dead_child(WRITE_SECTION);
    CHECK(rec != NULL);
    uint64_t repaired[2] = {5, 6}, out[2] = {0, 0};
    int err = seqlock_write_lock_timed(&rec->lock, GIVE_UP_NS);
    if (err == EOWNERDEAD) {
        seqlock_write_copy(rec->data, repaired, sizeof repaired);
        write_sequnlock(&rec->lock);
    }
    write_seqlock(&rec->lock);
    write_sequnlock(&rec->lock);
    unsigned seq;
    do {
        seq = read_seqbegin(&rec->lock);
        seqlock_read_copy(out, rec->data, sizeof out);
    } while (read_seqretry(&rec->lock, seq));
    uint64_t timed_seq = 0;
    int timed = seqlock_read_begin_timed(&rec->lock, 0, &timed_seq);
    shared_record_free(rec);
    CHECK(err == EOWNERDEAD);
    CHECK(seq == 4); /* the dead section 1..2, then ours 3..4 */
    CHECK(out[0] == 5 && out[1] == 6);
    CHECK(timed == 0 && timed_seq == 4);
}

static void
test_read_seqlock_excl_closes_a_dead_writers_section(void)
{
    struct shared_record *rec =
        record_left_locked_by_dead_child(WRITE_SECTION);
    CHECK(rec != NULL);
    read_seqlock_excl(&rec->lock);
    uint64_t inside = seqlock_sequence(&rec->lock);
    read_sequnlock_excl(&rec->lock);
    int locked = seqlock_is_locked(&rec->lock);
    shared_record_free(rec);
    CHECK(inside == 2);
    CHECK(!locked);
}

static void *
lock_and_exit_thread(void *arg)
{
    write_seqlock(arg);
    return NULL;
}

static void
test_timed_reader_reports_eownerdead_for_exited_thread(void)
{
    /* Same process: the kernel marks an exiting thread's robust mutexes.
     * The lock is in mapped memory, unmapped after: ThreadSanitizer would
     * otherwise take a later lock at the same address for this one, still
     * held by the exited thread. */
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    pthread_t t;
    int started = pthread_create(&t, NULL, lock_and_exit_thread, &rec->lock)
                  == 0;
    if (started) {
        pthread_join(t, NULL);
    }
    uint64_t seq;
    int64_t start = now_ns();
    int err = started ? seqlock_read_begin_timed(&rec->lock, GIVE_UP_NS, &seq)
                      : -1;
    int64_t took = now_ns() - start;
    shared_record_free(rec);
    CHECK(started);
    CHECK(err == EOWNERDEAD);
    CHECK(took < PROMPTLY_NS);
}

/* How long after its holder's SIGKILL a waiter on rec's lock returns. */
static void
time_waiter_through_holders_death(void *(*waiter_main)(void *),
                                  int (*is_asleep)(void *), const char *who)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    pid_t holder = start_child(hold_until_killed, rec);
    struct waiter w = {.sl = &rec->lock};
    int held = await_step(rec, 1);
    int started = held && start_waiter(&w, waiter_main);
    int asleep = started && await_asleep(is_asleep, &rec->lock);
    int64_t killed_at = now_ns();
    int reaped = kill_child(holder);
    if (started) {
        pthread_join(w.thread, NULL);
    }
    int64_t took = atomic_load(&w.done_at_ns) - killed_at;
    shared_record_free(rec);
    CHECK(held && started && asleep && reaped);
    printf("  %s asleep when its holder was killed: EOWNERDEAD after "
           "%.1f us\n", who, us_of(took));
    CHECK(w.err == EOWNERDEAD);
    CHECK(took < PROMPTLY_NS);
}

static void
test_writer_asleep_on_the_lock_wakes_at_once_when_the_holder_dies(void)
{
    time_waiter_through_holders_death(timed_writer_main, writer_is_asleep,
                                      "writer");
}

static void
test_reader_asleep_sees_its_writer_die_within_a_nap(void)
{
    time_waiter_through_holders_death(timed_reader_main, reader_is_asleep,
                                      "reader");
}

/* ==== a dead locking pass ==== */

static void
test_dead_locking_pass_gives_the_next_writer_eownerdead_and_an_even_count(void)
{
    struct shared_record *rec = record_left_locked_by_dead_child(LOCKING_PASS);
    CHECK(rec != NULL);
    uint64_t before = seqlock_sequence(&rec->lock);
    uint64_t seq;
    int readers_pass = seqlock_read_begin_timed(&rec->lock, 0, &seq);
    int err = seqlock_write_lock_timed(&rec->lock, GIVE_UP_NS);
    uint64_t inside = seqlock_sequence(&rec->lock);
    if (err == 0 || err == EOWNERDEAD) {
        write_sequnlock(&rec->lock);
    }
    shared_record_free(rec);
    CHECK(before == 0); /* no section to repair */
    CHECK(readers_pass == 0);
    CHECK(err == EOWNERDEAD);
    CHECK(inside == 1); /* the writer's own section, from the even count */
}

/* ==== what the skips above rest on ==== */

static void *
robust_list_error_of_a_thread(void *arg)
{
    *(int *)arg = robust_list_error();
    return NULL;
}

/* The tests of a dead holder are skipped only where get_robust_list
 * answers ENOSYS (qemu-user): every other answer must be a list, in the
 * main thread and in a thread started later, or those tests would be
 * skipped on a real kernel where the fault is what they exist to show. */
static void
test_robust_list_is_registered_or_unsupported(void)
{
    int main_err = robust_list_error();
    int thread_err = -1;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, robust_list_error_of_a_thread,
                         &thread_err) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(main_err == 0 || main_err == ENOSYS);
    CHECK(thread_err == main_err);
}

/* ---- registration ---- */

static const struct test tests[] = {
    TEST(test_robust_list_is_registered_or_unsupported, PLAIN),
    TEST(test_timed_reader_reports_eownerdead_for_dead_writer,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_timed_reader_reports_eownerdead_for_unreaped_dead_writer,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_owner_died_is_set_by_the_holders_death_until_taken_over,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_is_locked_stays_set_for_a_dead_holder_until_taken_over,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_timed_writer_takes_over_from_dead_writer,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_lock_excl_timed_reports_eownerdead_with_the_dead_section_open,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_write_tryseqlock_takes_over_from_dead_writer,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_lock_works_normally_after_dead_writer_is_repaired,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_read_seqlock_excl_closes_a_dead_writers_section,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_timed_reader_reports_eownerdead_for_exited_thread, ROBUST_LIST),
    TEST(test_writer_asleep_on_the_lock_wakes_at_once_when_the_holder_dies,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_reader_asleep_sees_its_writer_die_within_a_nap,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_dead_locking_pass_gives_the_next_writer_eownerdead_and_an_even_count,
         FORKS_OR_SIGNALS | ROBUST_LIST),
};
REGISTER_TESTS(tests)
