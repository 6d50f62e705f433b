/*
 * test_init_and_writers.c - seqlock.h's set-up and writers: SEQLOCK_UNLOCKED
 * and seqlock_init(), write sections (write_seqlock(), write_tryseqlock(),
 * seqlock_close_section(), seqlock_unlock()), exclusive readers
 * (read_seqlock_excl()), thread tokens (seqlock_self(), the holder) and
 * timed writers (seqlock_write_lock_timed()).
 */
#include "harness.h"

/* ==== initialisation ==== */

static void
test_static_initializer_is_unlocked_with_sequence_zero(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    CHECK(seqlock_sequence(&sl) == 0);
    CHECK(!seqlock_is_locked(&sl));
    CHECK(!seqlock_held_by_me(&sl));
}

static void
test_static_lock_sets_up_its_beacon_on_first_lock(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    uint32_t before = atomic_load(&sl.ready);
    write_seqlock(&sl);
    write_sequnlock(&sl);
    CHECK(before == 0);
    CHECK(atomic_load(&sl.ready) == SEQLOCK_READY);
    CHECK(seqlock_sequence(&sl) == 2);
}

/* Writers racing to take a SEQLOCK_UNLOCKED lock first: one sets its
 * beacon up, the others wait for it (once, one saw the set-up finish
 * between its look and its compare-and-swap and took that for garbage). */
enum { RACERS = 4, RACES = 2000 };

struct race {
    seqlock_t lock;
    pthread_barrier_t start;
    atomic_int failures;
};

static void *
race_to_write(void *arg)
{
    struct race *r = arg;
    pthread_barrier_wait(&r->start);
    int err = seqlock_write_lock_timed(&r->lock, GIVE_UP_NS);
    if (err != 0) {
        atomic_fetch_add(&r->failures, 1);
        return NULL;
    }
    write_sequnlock(&r->lock);
    return NULL;
}

static void
test_writers_racing_to_set_up_a_static_lock_all_get_it(void)
{
    int failures = 0;
    for (int round = 0; round < RACES && failures == 0; round++) {
        struct race r = {.lock = SEQLOCK_UNLOCKED};
        pthread_barrier_init(&r.start, NULL, RACERS);
        pthread_t t[RACERS];
        for (int i = 0; i < RACERS; i++) {
            pthread_create(&t[i], NULL, race_to_write, &r);
        }
        for (int i = 0; i < RACERS; i++) {
            pthread_join(t[i], NULL);
        }
        pthread_barrier_destroy(&r.start);
        failures = atomic_load(&r.failures);
        CHECK(failures == 0 && seqlock_sequence(&r.lock) == 2 * RACERS);
    }
}

static void
test_seqlock_init_makes_garbage_unlocked_with_sequence_zero(void)
{
    seqlock_t sl;
    memset(&sl, 0xa5, sizeof sl);
    int err = seqlock_init(&sl);
    CHECK(err == 0);
    CHECK(seqlock_sequence(&sl) == 0);
    CHECK(!seqlock_is_locked(&sl));
    CHECK(atomic_load(&sl.wake_from) == 0);
    CHECK(atomic_load(&sl.ready) == SEQLOCK_READY);
    CHECK(atomic_load(&sl.abandoned) == 0);
    CHECK(!seqlock_owner_died(&sl));
    seqlock_destroy(&sl);
}

static void
test_seqlock_words_rounds_bytes_up_to_whole_words(void)
{
    CHECK(SEQLOCK_WORDS(0) == 0);
    CHECK(SEQLOCK_WORDS(1) == 1);
    CHECK(SEQLOCK_WORDS(SEQLOCK_WORD_SIZE) == 1);
    CHECK(SEQLOCK_WORDS(SEQLOCK_WORD_SIZE + 1) == 2);
}

/* ==== writers ==== */

static void
test_write_section_makes_sequence_odd_inside_and_even_after(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    write_seqlock(&sl);
    CHECK(seqlock_sequence(&sl) % 2 == 1);
    write_sequnlock(&sl);
    CHECK(seqlock_sequence(&sl) % 2 == 0);
}

static void
test_each_write_section_adds_two_to_sequence(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    for (unsigned i = 1; i <= 5; i++) {
        write_seqlock(&sl);
        write_sequnlock(&sl);
        CHECK(seqlock_sequence(&sl) == 2 * i);
    }
}

static void
test_write_seqlock_makes_caller_the_holder_until_unlock(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    write_seqlock(&sl);
    uint64_t holder = atomic_load(&sl.holder);
    int mine = seqlock_held_by_me(&sl);
    int locked = seqlock_is_locked(&sl);
    write_sequnlock(&sl);
    CHECK(holder == seqlock_self());
    CHECK(mine);
    CHECK(locked);
    CHECK(!seqlock_is_locked(&sl));
    CHECK(!seqlock_held_by_me(&sl));
}

static void
test_write_tryseqlock_succeeds_when_free(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    CHECK(write_tryseqlock(&sl));
    CHECK(seqlock_sequence(&sl) == 1);
    CHECK(seqlock_held_by_me(&sl));
    write_sequnlock(&sl);
    CHECK(seqlock_sequence(&sl) == 2);
}

static void
test_write_tryseqlock_fails_while_another_thread_holds_it(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    CHECK(holder_start(&h, &sl));
    int took = write_tryseqlock(&sl);
    uint64_t seq = seqlock_sequence(&sl);
    holder_release(&h);
    CHECK(!took);
    CHECK(seq == 1); /* a failed try must not touch the count */
    CHECK(seqlock_sequence(&sl) == 2);
}

static void
test_write_tryseqlock_fails_for_the_holder(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    write_seqlock(&sl);
    int took = write_tryseqlock(&sl);
    uint64_t seq = seqlock_sequence(&sl);
    write_sequnlock(&sl);
    CHECK(!took);
    CHECK(seq == 1);
}

static void
test_close_section_ends_the_section_and_keeps_the_lock(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    CHECK(seqlock_write_lock_timed(&sl, 0) == 0);
    int closed = seqlock_close_section(&sl);
    uint64_t seq = seqlock_sequence(&sl);
    int mine = seqlock_held_by_me(&sl);
    int unlocked = seqlock_unlock(&sl);
    CHECK(closed == 0);
    CHECK(seq == 2);
    CHECK(mine);
    CHECK(unlocked == 0);
    CHECK(seqlock_sequence(&sl) == 2); /* unlock opened nothing new */
}

static void
test_close_section_is_einval_without_an_open_section(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    read_seqlock_excl(&sl);
    int err = seqlock_close_section(&sl);
    uint64_t seq = seqlock_sequence(&sl);
    read_sequnlock_excl(&sl);
    CHECK(err == EINVAL);
    CHECK(seq == 0);
}

static void
test_close_section_and_unlock_are_eperm_for_a_thread_not_holding_it(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    int free_close = seqlock_close_section(&sl);
    int free_unlock = seqlock_unlock(&sl);
    struct holder h;
    CHECK(holder_start(&h, &sl));
    int held_close = seqlock_close_section(&sl);
    int held_unlock = seqlock_unlock(&sl);
    uint64_t seq = seqlock_sequence(&sl);
    holder_release(&h);
    CHECK(free_close == EPERM);
    CHECK(free_unlock == EPERM);
    CHECK(held_close == EPERM);
    CHECK(held_unlock == EPERM);
    CHECK(seq == 1); /* the holder's section went on */
    CHECK(seqlock_sequence(&sl) == 2);
}

static void
test_unlock_closes_an_open_section(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    CHECK(seqlock_write_lock_timed(&sl, 0) == 0);
    CHECK(seqlock_unlock(&sl) == 0);
    CHECK(seqlock_sequence(&sl) == 2);
    CHECK(!seqlock_is_locked(&sl));
}

/* ==== exclusive readers (read_seqlock_excl) ==== */

static void
test_read_seqlock_excl_leaves_the_sequence_alone(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    read_seqlock_excl(&sl);
    uint64_t inside = seqlock_sequence(&sl);
    int owned = seqlock_held_by_me(&sl);
    read_sequnlock_excl(&sl);
    CHECK(inside == 0);
    CHECK(owned);
    CHECK(seqlock_sequence(&sl) == 0);
    CHECK(!seqlock_is_locked(&sl));
}

static void
test_read_seqlock_excl_keeps_writers_out_but_not_readers(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    read_seqlock_excl(&sl);
    uint64_t seq;
    int reader_began = seqlock_read_try_begin(&sl, &seq);
    int reader_retries = seqlock_read_retry(&sl, seq);
    read_sequnlock_excl(&sl);
    CHECK(reader_began);
    CHECK(!reader_retries);
}

static void
test_read_seqlock_excl_waits_for_a_writer(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    CHECK(holder_start(&h, &sl));
    int err = seqlock_lock_excl_timed(&sl, 20 * MS);
    holder_release(&h);
    CHECK(err == ETIMEDOUT);
    read_seqlock_excl(&sl);
    read_sequnlock_excl(&sl);
    CHECK(seqlock_sequence(&sl) == 2);
}

/* ==== thread tokens ==== */

static void
test_self_is_nonzero_and_stable(void)
{
    uint64_t token = seqlock_self();
    CHECK(token != 0);
    CHECK(seqlock_self() == token);
}

static void *
report_token(void *arg)
{
    *(uint64_t *)arg = seqlock_self();
    return NULL;
}

static void
test_self_differs_between_threads(void)
{
    uint64_t other = 0;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, report_token, &other) == 0);
    pthread_join(t, NULL);
    CHECK(other != 0);
    CHECK(other != seqlock_self());
}

static void
token_is_new_and_stable(void *arg)
{
    uint64_t parents = *(uint64_t *)arg;
    uint64_t mine = seqlock_self();
    CHECK(mine != 0);
    CHECK(mine != parents);
    CHECK(seqlock_self() == mine);
}

static void
test_self_differs_in_a_forks_child(void)
{
    uint64_t token = seqlock_self();
    CHECK(child_passed(start_child(token_is_new_and_stable, &token)));
}

static void
test_holder_and_held_by_me_name_the_other_thread_holding_it(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    CHECK(holder_start(&h, &sl));
    uint64_t holder = atomic_load(&sl.holder);
    int mine = seqlock_held_by_me(&sl);
    int locked = seqlock_is_locked(&sl);
    holder_release(&h);
    CHECK(holder == atomic_load(&h.token));
    CHECK(holder != seqlock_self());
    CHECK(!mine);
    CHECK(locked);
    CHECK(!seqlock_is_locked(&sl));
}

/* ==== timed writers ==== */

static void
test_write_lock_timed_takes_free_lock(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    CHECK(seqlock_write_lock_timed(&sl, 0) == 0);
    CHECK(seqlock_held_by_me(&sl));
    CHECK(seqlock_sequence(&sl) == 1);
    write_sequnlock(&sl);
    CHECK(seqlock_write_lock_timed(&sl, -1) == 0);
    CHECK(seqlock_sequence(&sl) == 3);
    write_sequnlock(&sl);
}

static void
test_write_lock_timed_with_zero_timeout_fails_while_held_elsewhere(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    CHECK(holder_start(&h, &sl));
    int err = seqlock_write_lock_timed(&sl, 0);
    holder_release(&h);
    CHECK(err == ETIMEDOUT);
    CHECK(seqlock_sequence(&sl) == 2);
}

static void
test_write_lock_timed_gives_up_after_its_timeout_while_held_elsewhere(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    CHECK(holder_start(&h, &sl));
    int64_t timeout = 50 * MS;
    int64_t start = now_ns();
    int err = seqlock_write_lock_timed(&sl, timeout);
    int64_t took = now_ns() - start;
    holder_release(&h);
    CHECK(err == ETIMEDOUT);
    CHECK(took >= timeout);
    CHECK(took < timeout + PROMPTLY_NS);
    CHECK(!seqlock_held_by_me(&sl));
}

static void
test_write_lock_timed_reports_edeadlk_to_the_holder(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    write_seqlock(&sl);
    int with_wait = seqlock_write_lock_timed(&sl, -1);
    int without_wait = seqlock_write_lock_timed(&sl, 0);
    uint64_t seq = seqlock_sequence(&sl);
    write_sequnlock(&sl);
    CHECK(with_wait == EDEADLK);
    CHECK(without_wait == EDEADLK);
    CHECK(seq == 1); /* the refused calls left the section alone */
    CHECK(seqlock_sequence(&sl) == 2);
}

/* ---- registration ---- */

/* ---- deadlines ---- */

static void
test_a_negative_timeout_has_no_deadline_and_no_time_left_to_count(void)
{
    CHECK(seqlock_deadline(-1) == -1);
    CHECK(seqlock_deadline(-5) == -1);
    CHECK(seqlock_time_left(-1) == -1);
}

static void
test_a_deadline_leaves_at_most_its_timeout_and_0_once_passed(void)
{
    int64_t second = seqlock_deadline(SEQLOCK_NS_PER_SEC);
    int64_t left = seqlock_time_left(second);
    CHECK(left > 0 && left <= SEQLOCK_NS_PER_SEC);
    CHECK(seqlock_time_left(seqlock_deadline(0)) == 0);
    CHECK(seqlock_time_left(1) == 0); /* long past */
}

static void
test_a_deadline_too_far_to_count_saturates(void)
{
    CHECK(seqlock_deadline(INT64_MAX) == INT64_MAX);
    CHECK(seqlock_time_left(INT64_MAX) > 0);
}

static const struct test tests[] = {
    TEST(test_a_negative_timeout_has_no_deadline_and_no_time_left_to_count,
         PLAIN),
    TEST(test_a_deadline_leaves_at_most_its_timeout_and_0_once_passed, PLAIN),
    TEST(test_a_deadline_too_far_to_count_saturates, PLAIN),
    TEST(test_static_initializer_is_unlocked_with_sequence_zero, PLAIN),
    TEST(test_static_lock_sets_up_its_beacon_on_first_lock, PLAIN),
    TEST(test_writers_racing_to_set_up_a_static_lock_all_get_it, PLAIN),
    TEST(test_seqlock_init_makes_garbage_unlocked_with_sequence_zero, PLAIN),
    TEST(test_seqlock_words_rounds_bytes_up_to_whole_words, PLAIN),
    TEST(test_write_section_makes_sequence_odd_inside_and_even_after, PLAIN),
    TEST(test_each_write_section_adds_two_to_sequence, PLAIN),
    TEST(test_write_seqlock_makes_caller_the_holder_until_unlock, PLAIN),
    TEST(test_write_tryseqlock_succeeds_when_free, PLAIN),
    TEST(test_write_tryseqlock_fails_while_another_thread_holds_it, PLAIN),
    TEST(test_write_tryseqlock_fails_for_the_holder, PLAIN),
    TEST(test_close_section_ends_the_section_and_keeps_the_lock, PLAIN),
    TEST(test_close_section_is_einval_without_an_open_section, PLAIN),
    TEST(test_close_section_and_unlock_are_eperm_for_a_thread_not_holding_it,
         PLAIN),
    TEST(test_unlock_closes_an_open_section, PLAIN),
    TEST(test_read_seqlock_excl_leaves_the_sequence_alone, PLAIN),
    TEST(test_read_seqlock_excl_keeps_writers_out_but_not_readers, PLAIN),
    TEST(test_read_seqlock_excl_waits_for_a_writer, PLAIN),
    TEST(test_self_is_nonzero_and_stable, PLAIN),
    TEST(test_self_differs_between_threads, PLAIN),
    TEST(test_self_differs_in_a_forks_child, FORKS_OR_SIGNALS),
    TEST(test_holder_and_held_by_me_name_the_other_thread_holding_it, PLAIN),
    TEST(test_write_lock_timed_takes_free_lock, PLAIN),
    TEST(test_write_lock_timed_with_zero_timeout_fails_while_held_elsewhere,
         PLAIN),
    TEST(test_write_lock_timed_gives_up_after_its_timeout_while_held_elsewhere,
         PLAIN),
    TEST(test_write_lock_timed_reports_edeadlk_to_the_holder, PLAIN),
};
REGISTER_TESTS(tests)
