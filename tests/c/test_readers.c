/*
 * test_readers.c - seqlock.h's readers: read_seqbegin()/read_seqretry() and
 * seqlock_read_try_begin()/seqlock_read_retry(), word-wise copies
 * (seqlock_write_copy(), seqlock_read_copy()), timed readers
 * (seqlock_read_begin_timed()), and readers' async-signal safety: a reader
 * in a signal handler allocates nothing (an earlier core's handler did).
 */
#include "harness.h"

/* ==== readers ==== */

static void
test_read_seqbegin_returns_even_sequence(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    write_seqlock(&sl);
    write_sequnlock(&sl);
    unsigned seq = read_seqbegin(&sl);
    CHECK(seq % 2 == 0);
    CHECK(seq == 2);
}

static void
test_read_seqretry_is_zero_without_intervening_write(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    unsigned seq = read_seqbegin(&sl);
    CHECK(read_seqretry(&sl, seq) == 0);
}

static void
test_read_seqretry_is_nonzero_after_intervening_write(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    unsigned seq = read_seqbegin(&sl);
    write_seqlock(&sl);
    write_sequnlock(&sl);
    CHECK(read_seqretry(&sl, seq) != 0);
}

static void
test_read_seqretry_is_nonzero_while_write_in_progress(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    unsigned seq = read_seqbegin(&sl);
    write_seqlock(&sl);
    int retry = read_seqretry(&sl, seq);
    write_sequnlock(&sl);
    CHECK(retry != 0);
}

static void
test_read_try_begin_succeeds_with_even_sequence_when_no_writer(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    uint64_t seq = 99;
    CHECK(seqlock_read_try_begin(&sl, &seq));
    CHECK(seq == 0);
    CHECK(seqlock_read_retry(&sl, seq) == 0);
}

static void
test_read_try_begin_fails_without_waiting_during_write(void)
{
    /* Same thread as the writer: a waiting call would deadlock here. */
    seqlock_t sl = SEQLOCK_UNLOCKED;
    uint64_t seq = 0;
    write_seqlock(&sl);
    int ok = seqlock_read_try_begin(&sl, &seq);
    write_sequnlock(&sl);
    CHECK(!ok);
    CHECK(seq == 1);
}

static void
test_read_retry_is_nonzero_after_intervening_write(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    uint64_t seq;
    CHECK(seqlock_read_try_begin(&sl, &seq));
    write_seqlock(&sl);
    write_sequnlock(&sl);
    CHECK(seqlock_read_retry(&sl, seq) != 0);
}

/* ==== word-wise copies ==== */

static void
test_write_copy_then_read_copy_round_trips_whole_words(void)
{
    seqlock_word_t shared[4];
    uint64_t in[4] = {1, 0xdeadbeefcafef00dULL, 0, UINT64_MAX};
    uint64_t out[4] = {0};
    for (int i = 0; i < 4; i++) {
        atomic_init(&shared[i], 0);
    }
    seqlock_write_copy(shared, in, sizeof in);
    seqlock_read_copy(out, shared, sizeof out);
    CHECK(memcmp(in, out, sizeof in) == 0);
}

static void
test_write_copy_of_partial_last_word_keeps_bytes_past_nbytes(void)
{
    enum { NBYTES = 13 };
    seqlock_word_t shared[SEQLOCK_WORDS(NBYTES)];
    unsigned char ff[sizeof shared];
    memset(ff, 0xff, sizeof ff);
    for (size_t i = 0; i < SEQLOCK_WORDS(NBYTES); i++) {
        atomic_init(&shared[i], 0);
    }
    seqlock_write_copy(shared, ff, sizeof ff); /* every byte 0xff */

    unsigned char in[NBYTES];
    for (int i = 0; i < NBYTES; i++) {
        in[i] = (unsigned char)(i + 1);
    }
    seqlock_write_copy(shared, in, NBYTES);

    unsigned char all[sizeof shared];
    seqlock_read_copy(all, shared, sizeof all);
    CHECK(memcmp(all, in, NBYTES) == 0);
    for (size_t i = NBYTES; i < sizeof all; i++) {
        CHECK(all[i] == 0xff);
    }
}

static void
test_read_copy_of_partial_last_word_writes_only_nbytes(void)
{
    enum { NBYTES = 13 };
    seqlock_word_t shared[SEQLOCK_WORDS(NBYTES)];
    unsigned char in[sizeof shared];
    for (size_t i = 0; i < sizeof in; i++) {
        in[i] = (unsigned char)(i + 1);
    }
    for (size_t i = 0; i < SEQLOCK_WORDS(NBYTES); i++) {
        atomic_init(&shared[i], 0);
    }
    seqlock_write_copy(shared, in, sizeof in);

    unsigned char out[sizeof shared + 8];
    memset(out, 0xee, sizeof out);
    seqlock_read_copy(out, shared, NBYTES);
    CHECK(memcmp(out, in, NBYTES) == 0);
    for (size_t i = NBYTES; i < sizeof out; i++) {
        CHECK(out[i] == 0xee);
    }
}

/* ==== timed readers ==== */

static void
test_read_begin_timed_returns_even_sequence_when_no_writer(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    write_seqlock(&sl);
    write_sequnlock(&sl);
    uint64_t seq = 99;
    CHECK(seqlock_read_begin_timed(&sl, 0, &seq) == 0);
    CHECK(seq == 2);
    CHECK(seqlock_read_begin_timed(&sl, -1, &seq) == 0);
    CHECK(seq == 2);
}

static void
test_read_begin_timed_times_out_while_another_thread_writes(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    CHECK(holder_start(&h, &sl));
    uint64_t seq = 0;
    int looked = seqlock_read_begin_timed(&sl, 0, &seq);
    int64_t timeout = 50 * MS;
    int64_t start = now_ns();
    int waited = seqlock_read_begin_timed(&sl, timeout, &seq);
    int64_t took = now_ns() - start;
    holder_release(&h);
    CHECK(looked == ETIMEDOUT);
    CHECK(waited == ETIMEDOUT);
    CHECK(took >= timeout);
    CHECK(took < timeout + PROMPTLY_NS);
}

static void
test_read_begin_timed_reports_edeadlk_to_the_writer(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    uint64_t seq = 0;
    write_seqlock(&sl);
    int err = seqlock_read_begin_timed(&sl, -1, &seq);
    write_sequnlock(&sl);
    CHECK(err == EDEADLK);
}

/* ==== async-signal safety of readers ==== */

static seqlock_t *volatile handler_target;
static volatile int handler_result;
static volatile uint64_t handler_begin_seq;

static void
read_begin_in_handler(int sig)
{
    (void)sig;
    uint64_t seq = 0;
    in_handler = 1;
    handler_result = seqlock_read_begin_timed(handler_target, GIVE_UP_NS,
                                              &seq);
    in_handler = 0;
    handler_begin_seq = seq;
}

/* Allocations made by a handler that begins a read of sl on this thread;
 * *result is what seqlock_read_begin_timed() told it. */
static long
allocations_by_handler_reading(seqlock_t *sl, int *result)
{
    struct sigaction sa = {.sa_handler = read_begin_in_handler};
    sigemptyset(&sa.sa_mask);
    handler_target = sl;
    handler_result = -1;
    atomic_store(&handler_allocations, 0);
    sigaction(SIGUSR1, &sa, NULL);
    pthread_kill(pthread_self(), SIGUSR1);
    signal(SIGUSR1, SIG_DFL);
    *result = handler_result;
    return atomic_load(&handler_allocations);
}

static void
test_allocation_counter_counts_while_in_handler_is_set(void)
{
    if (!CAN_COUNT_ALLOCATIONS) {
        SKIP("no way to count allocations with this C library");
    }
    void *(*volatile allocate)(size_t) = malloc; /* not optimised away */
    void (*volatile release)(void *) = free;
    atomic_store(&handler_allocations, 0);
    in_handler = 1;
    release(allocate(16));
    in_handler = 0;
    release(allocate(16));
    CHECK(atomic_load(&handler_allocations) == 2);
}

static void
test_handler_finding_a_dead_writer_allocates_nothing(void)
{
    if (!CAN_COUNT_ALLOCATIONS) {
        SKIP("no way to count allocations with this C library");
    }
    struct shared_record *rec =
        record_left_locked_by_dead_child(WRITE_SECTION);
    CHECK(rec != NULL);
    int result;
    long allocations = allocations_by_handler_reading(&rec->lock, &result);
    shared_record_free(rec);
    CHECK(result == EOWNERDEAD);
    CHECK(allocations == 0);
}

static void
test_handler_waiting_out_a_live_writer_allocates_nothing(void)
{
    if (!CAN_COUNT_ALLOCATIONS) {
        SKIP("no way to count allocations with this C library");
    }
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h = {.sl = &sl, .hold_ns = 100 * MS};
    CHECK(holder_run(&h));
    int result;
    long allocations = allocations_by_handler_reading(&sl, &result);
    holder_release(&h);
    CHECK(result == 0);
    CHECK(handler_begin_seq == 2); /* it waited for the section's end */
    CHECK(allocations == 0);
}

/* ---- registration ---- */

static const struct test tests[] = {
    TEST(test_read_seqbegin_returns_even_sequence, PLAIN),
    TEST(test_read_seqretry_is_zero_without_intervening_write, PLAIN),
    TEST(test_read_seqretry_is_nonzero_after_intervening_write, PLAIN),
    TEST(test_read_seqretry_is_nonzero_while_write_in_progress, PLAIN),
    TEST(test_read_try_begin_succeeds_with_even_sequence_when_no_writer,
         PLAIN),
    TEST(test_read_try_begin_fails_without_waiting_during_write, PLAIN),
    TEST(test_read_retry_is_nonzero_after_intervening_write, PLAIN),
    TEST(test_write_copy_then_read_copy_round_trips_whole_words, PLAIN),
    TEST(test_write_copy_of_partial_last_word_keeps_bytes_past_nbytes, PLAIN),
    TEST(test_read_copy_of_partial_last_word_writes_only_nbytes, PLAIN),
    TEST(test_read_begin_timed_returns_even_sequence_when_no_writer, PLAIN),
    TEST(test_read_begin_timed_times_out_while_another_thread_writes, PLAIN),
    TEST(test_read_begin_timed_reports_edeadlk_to_the_writer, PLAIN),
    TEST(test_allocation_counter_counts_while_in_handler_is_set, PLAIN),
    TEST(test_handler_finding_a_dead_writer_allocates_nothing,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_handler_waiting_out_a_live_writer_allocates_nothing,
         FORKS_OR_SIGNALS),
};
REGISTER_TESTS(tests)
