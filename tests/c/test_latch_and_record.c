/*
 * test_latch_and_record.c - readers that never wait: seqcount_latch_t (two
 * copies; a reader takes the one the writer is not storing, in a signal
 * handler interrupting the writer, beside a blocked or dead writer),
 * record.h's record kept as a latch (record_repair(), record_abort(), a
 * view that never trusts the header's sizes), and the 64-bit count of
 * seqlock_t and of latches (an earlier core's was 32-bit): what the
 * kernel API's unsigned values can and cannot tell apart.
 */
#include "harness.h"
#include "record.h"

/* ==== latches (seqcount_latch_t) ==== */

#define TWO_TO_32 (UINT64_C(1) << 32)

/* A latch and its two copies of a record of WORDS words (word i = a + i*K),
 * as the header's comment uses them. */
#define LATCH_COPY_WORDS SEQLOCK_WORDS(WORDS * sizeof(uint64_t))

struct latched {
    seqcount_latch_t seq;
    seqlock_word_t data[2][LATCH_COPY_WORDS];
};

/* Store the first n words of the record for a into one copy. */
static void
latch_store(seqlock_word_t *copy, uint64_t a, int n)
{
    for (int i = 0; i < n; i++) {
        uint64_t word = a + (uint64_t)i * K;
        seqlock_write_copy(&copy[SEQLOCK_WORDS(i * sizeof(uint64_t))], &word,
                           sizeof word);
    }
}

/* A latch at count 0 whose copies hold a0 and a1 (equal in real use;
 * different to tell which one a reader used). */
static void
latched_init(struct latched *l, uint64_t a0, uint64_t a1)
{
    seqcount_latch_init(&l->seq);
    latch_store(l->data[0], a0, WORDS);
    latch_store(l->data[1], a1, WORDS);
}

/* One update to a, as documented. */
static void
latch_update(struct latched *l, uint64_t a)
{
    write_seqcount_latch_begin(&l->seq);
    latch_store(l->data[0], a, WORDS);
    write_seqcount_latch(&l->seq);
    latch_store(l->data[1], a, WORDS);
    write_seqcount_latch_end(&l->seq);
}

/* The documented reader: the copy it accepted goes to snap, how many
 * copies it made to *tries; returns the count it accepted it under.  No
 * test has a writer switch copies while it reads, so it gives up after
 * LATCH_MAX_TRIES (the test then fails on *tries) rather than hang if the
 * latch is broken.  Async-signal-safe. */
#define LATCH_MAX_TRIES 1000

static unsigned
latch_read(struct latched *l, uint64_t snap[WORDS], int *tries)
{
    unsigned seq;
    *tries = 0;
    do {
        seq = read_seqcount_latch(&l->seq);
        seqlock_read_copy(snap, l->data[seq & 1], WORDS * sizeof snap[0]);
    } while (++*tries < LATCH_MAX_TRIES
             && read_seqcount_latch_retry(&l->seq, seq));
    return seq;
}

/* A well-formed snapshot of the record for a. */
static int
is_record(const uint64_t snap[WORDS], uint64_t a)
{
    return well_formed(snap) && snap[0] == a;
}

static void
test_latch_zero_initializer_starts_at_0_so_readers_use_data_0(void)
{
    static struct latched static_storage = {
        .seq = SEQCNT_LATCH_ZERO(static_storage.seq)};
    struct latched l = {.seq = SEQCNT_LATCH_ZERO(l.seq)};
    latch_store(l.data[0], 1, WORDS);
    latch_store(l.data[1], 2, WORDS);
    uint64_t snap[WORDS];
    int tries;
    CHECK(seqcount_latch_read64(&static_storage.seq) == 0);
    CHECK(seqcount_latch_read64(&l.seq) == 0);
    CHECK(latch_read(&l, snap, &tries) == 0);
    CHECK(tries == 1);
    CHECK(is_record(snap, 1));
}

static void
test_seqcount_latch_init_starts_at_0_so_readers_use_data_0(void)
{
    struct latched l;
    memset(&l, 0xa5, sizeof l);
    seqcount_latch_init(&l.seq);
    latch_store(l.data[0], 1, WORDS);
    latch_store(l.data[1], 2, WORDS);
    uint64_t snap[WORDS];
    int tries;
    CHECK(seqcount_latch_read64(&l.seq) == 0);
    CHECK(latch_read(&l, snap, &tries) == 0);
    CHECK(tries == 1);
    CHECK(is_record(snap, 1));
}

static void
test_write_seqcount_latch_begin_makes_the_count_odd_so_readers_use_data_1(void)
{
    struct latched l;
    latched_init(&l, 5, 5);
    write_seqcount_latch_begin(&l.seq);
    latch_store(l.data[0], 6, WORDS); /* the copy readers were sent from */
    uint64_t snap[WORDS];
    int tries;
    unsigned seq = latch_read(&l, snap, &tries);
    CHECK(tries == 1);
    CHECK(seq == 1);
    CHECK(is_record(snap, 5));
}

static void
test_write_seqcount_latch_makes_the_count_even_so_readers_use_data_0(void)
{
    struct latched l;
    latched_init(&l, 5, 5);
    write_seqcount_latch_begin(&l.seq);
    latch_store(l.data[0], 6, WORDS);
    write_seqcount_latch(&l.seq);
    uint64_t snap[WORDS];
    int tries;
    unsigned seq = latch_read(&l, snap, &tries); /* data[1] still says 5 */
    CHECK(tries == 1);
    CHECK(seq == 2);
    CHECK(is_record(snap, 6));
}

static void
test_write_seqcount_latch_end_leaves_the_count_alone(void)
{
    struct latched l;
    latched_init(&l, 5, 5);
    write_seqcount_latch_begin(&l.seq);
    latch_store(l.data[0], 6, WORDS);
    write_seqcount_latch(&l.seq);
    latch_store(l.data[1], 6, WORDS);
    write_seqcount_latch_end(&l.seq);
    CHECK(seqcount_latch_read64(&l.seq) == 2);
}

static void
test_each_latch_update_adds_2_to_the_count(void)
{
    struct latched l;
    latched_init(&l, 0, 0);
    for (uint64_t a = 1; a <= 5; a++) {
        latch_update(&l, a);
        uint64_t snap[WORDS];
        int tries;
        CHECK(seqcount_latch_read64(&l.seq) == 2 * a);
        CHECK(latch_read(&l, snap, &tries) == 2 * a);
        CHECK(tries == 1);
        CHECK(is_record(snap, a));
    }
}

static void
test_read_seqcount_latch_retry_is_0_without_an_intervening_switch(void)
{
    struct latched l;
    latched_init(&l, 5, 5);
    unsigned seq = read_seqcount_latch(&l.seq);
    uint64_t snap[WORDS];
    seqlock_read_copy(snap, l.data[seq & 1], sizeof snap);
    CHECK(read_seqcount_latch_retry(&l.seq, seq) == 0);
    CHECK(seqcount_latch_retry64(&l.seq, seqcount_latch_read64(&l.seq))
          == 0);
}

static void
test_read_seqcount_latch_retry_is_0_while_the_writer_stores_the_other_copy(
    void)
{
    /* A reader retries only when the writer switched copies under it. */
    struct latched l;
    latched_init(&l, 5, 5);
    write_seqcount_latch_begin(&l.seq);
    unsigned seq = read_seqcount_latch(&l.seq);
    uint64_t start = seqcount_latch_read64(&l.seq);
    latch_store(l.data[0], 6, WORDS);
    CHECK(seq & 1);
    CHECK(read_seqcount_latch_retry(&l.seq, seq) == 0);
    CHECK(seqcount_latch_retry64(&l.seq, start) == 0);
}

static void
test_read_seqcount_latch_retry_is_nonzero_after_an_intervening_switch(void)
{
    struct latched l;
    latched_init(&l, 5, 5);
    unsigned seq = read_seqcount_latch(&l.seq);
    uint64_t start = seqcount_latch_read64(&l.seq);
    write_seqcount_latch_begin(&l.seq); /* one switch: to data[1] */
    CHECK(read_seqcount_latch_retry(&l.seq, seq) != 0);
    CHECK(seqcount_latch_retry64(&l.seq, start) != 0);
    unsigned odd = read_seqcount_latch(&l.seq);
    write_seqcount_latch(&l.seq); /* and back to data[0] */
    CHECK(read_seqcount_latch_retry(&l.seq, odd) != 0);
    CHECK(read_seqcount_latch_retry(&l.seq, seq) != 0);
    CHECK(seqcount_latch_retry64(&l.seq, start) != 0);
}

static void
test_raw_latch_reads_and_retries_equal_the_plain_ones(void)
{
    const uint64_t counts[] = {0, 1, 2, 7, TWO_TO_32 - 1, TWO_TO_32,
                               TWO_TO_32 + 3, UINT64_MAX - 1};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        seqcount_latch_t s;
        seqcount_latch_init(&s);
        atomic_store(&s.sequence, counts[i]);
        unsigned seq = read_seqcount_latch(&s);
        CHECK(raw_read_seqcount_latch(&s) == seq);
        for (unsigned start = seq - 2; start != seq + 3; start++) {
            CHECK(!raw_read_seqcount_latch_retry(&s, start)
                  == !read_seqcount_latch_retry(&s, start));
        }
    }
}

static void
test_raw_write_seqcount_latch_switches_copies_as_the_plain_writes_do(void)
{
    seqcount_latch_t plain, raw;
    seqcount_latch_init(&plain);
    seqcount_latch_init(&raw);
    for (int i = 0; i < 4; i++) {
        if (i % 2 == 0) {
            write_seqcount_latch_begin(&plain);
        }
        else {
            write_seqcount_latch(&plain);
        }
        raw_write_seqcount_latch(&raw);
        CHECK(seqcount_latch_read64(&raw) == (uint64_t)i + 1);
        CHECK(seqcount_latch_read64(&raw) == seqcount_latch_read64(&plain));
    }
}

static void
test_latch_unsigned_reads_are_the_counts_low_32_bits(void)
{
    const uint64_t counts[] = {5, TWO_TO_32 + 5, TWO_TO_32 - 1, TWO_TO_32,
                               UINT64_MAX - 1};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        seqcount_latch_t s;
        seqcount_latch_init(&s);
        atomic_store(&s.sequence, counts[i]);
        CHECK(read_seqcount_latch(&s) == (uint32_t)counts[i]);
        CHECK(raw_read_seqcount_latch(&s) == (uint32_t)counts[i]);
        CHECK(seqcount_latch_read64(&s) == counts[i]);
    }
}

static void
test_latch_64_bit_reads_tell_counts_2_to_32_apart_where_unsigned_cannot(void)
{
    /* A reader that paused across 2^31 updates finds the count start +
     * 2^32, with the same low half and the same copy. */
    seqcount_latch_t s;
    seqcount_latch_init(&s);
    atomic_store(&s.sequence, TWO_TO_32 - 2);
    unsigned seq = read_seqcount_latch(&s);
    uint64_t start = seqcount_latch_read64(&s);
    atomic_store(&s.sequence, start + TWO_TO_32);
    CHECK(seqcount_latch_retry64(&s, start) != 0);
    CHECK(read_seqcount_latch_retry(&s, seq) == 0);
    CHECK(raw_read_seqcount_latch_retry(&s, seq) == 0);
}

static void
test_latch_update_across_2_to_32_is_seen_by_both_retries(void)
{
    struct latched l;
    latched_init(&l, 5, 5);
    atomic_store(&l.seq.sequence, TWO_TO_32 - 2);
    unsigned seq = read_seqcount_latch(&l.seq);
    uint64_t start = seqcount_latch_read64(&l.seq);
    latch_update(&l, 6);
    uint64_t snap[WORDS];
    int tries;
    CHECK(seqcount_latch_read64(&l.seq) == TWO_TO_32);
    CHECK(read_seqcount_latch_retry(&l.seq, seq) != 0); /* 0xfffffffe, 0 */
    CHECK(seqcount_latch_retry64(&l.seq, start) != 0);
    CHECK(latch_read(&l, snap, &tries) == 0);
    CHECK(tries == 1);
    CHECK(is_record(snap, 6));
}

/* ---- readers that never wait for the writer ---- */

/* A handler that reads the latch its own thread is updating.  A seqlock
 * reader there could never see an even count: read_seqbegin() aborts and
 * seqlock_read_begin_timed() says EDEADLK (tests above); a latch reader
 * just reads the other copy. */
static struct latched handler_latch;
static volatile sig_atomic_t latch_handler_calls;
static uint64_t latch_handler_snapshot[WORDS];
static unsigned latch_handler_seq;
static int latch_handler_tries;

static void
read_latch_in_handler(int sig)
{
    (void)sig;
    latch_handler_seq = latch_read(&handler_latch, latch_handler_snapshot,
                                   &latch_handler_tries);
    latch_handler_calls++;
}

/* Child body: state 5, interrupt the update to 6 halfway through storing
 * data[0] (second_half 0) or data[1] (1) with a handler that reads. */
static void
interrupt_a_latch_update(void *arg)
{
    int second_half = *(int *)arg;
    struct sigaction sa = {.sa_handler = read_latch_in_handler};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    latched_init(&handler_latch, 5, 5);

    write_seqcount_latch_begin(&handler_latch.seq);
    if (second_half) {
        latch_store(handler_latch.data[0], 6, WORDS);
        write_seqcount_latch(&handler_latch.seq);
    }
    latch_store(handler_latch.data[second_half], 6, WORDS / 2);
    int64_t start = now_ns();
    pthread_kill(pthread_self(), SIGUSR1);
    int64_t took = now_ns() - start;
    latch_store(handler_latch.data[second_half], 6, WORDS);
    if (!second_half) {
        write_seqcount_latch(&handler_latch.seq);
        latch_store(handler_latch.data[1], 6, WORDS);
    }
    write_seqcount_latch_end(&handler_latch.seq);

    CHECK(latch_handler_calls == 1); /* it ran, and returned, right there */
    CHECK(latch_handler_tries == 1); /* nothing to retry, or wait, for */
    CHECK(took < PROMPTLY_NS);
    if (second_half) {
        CHECK(latch_handler_seq == 2);
        CHECK(is_record(latch_handler_snapshot, 6)); /* the new state */
    }
    else {
        CHECK(latch_handler_seq == 1);
        CHECK(is_record(latch_handler_snapshot, 5)); /* the old state */
    }
}

static void
test_latch_reader_in_a_handler_interrupting_data_0s_update_sees_the_old_state(
    void)
{
    int second_half = 0;
    CHECK(child_passed(start_child(interrupt_a_latch_update, &second_half)));
}

static void
test_latch_reader_in_a_handler_interrupting_data_1s_update_sees_the_new_state(
    void)
{
    int second_half = 1;
    CHECK(child_passed(start_child(interrupt_a_latch_update, &second_half)));
}

/* A writer thread that takes the writers' mutex, begins an update to a,
 * stores half of data[0], says so (stage 1) and blocks on gate, which the
 * test holds; let through, it completes the update. */
struct latch_writer {
    struct latched *l;
    uint64_t a;
    pthread_mutex_t writers;
    pthread_mutex_t gate;
    atomic_int stage;
    pthread_t thread;
};

static void *
latch_writer_main(void *arg)
{
    struct latch_writer *w = arg;
    pthread_mutex_lock(&w->writers);
    write_seqcount_latch_begin(&w->l->seq);
    latch_store(w->l->data[0], w->a, WORDS / 2);
    atomic_store(&w->stage, 1);
    pthread_mutex_lock(&w->gate);
    pthread_mutex_unlock(&w->gate);
    latch_store(w->l->data[0], w->a, WORDS);
    write_seqcount_latch(&w->l->seq);
    latch_store(w->l->data[1], w->a, WORDS);
    write_seqcount_latch_end(&w->l->seq);
    pthread_mutex_unlock(&w->writers);
    return NULL;
}

static int
latch_writer_is_midway(void *arg)
{
    return atomic_load(&((struct latch_writer *)arg)->stage) == 1;
}

static void
test_latch_reader_returns_the_old_state_at_once_while_the_writer_is_blocked(
    void)
{
    struct latched l;
    latched_init(&l, 5, 5);
    struct latch_writer w = {.l = &l, .a = 6};
    pthread_mutex_init(&w.writers, NULL);
    pthread_mutex_init(&w.gate, NULL);
    pthread_mutex_lock(&w.gate);
    int started = pthread_create(&w.thread, NULL, latch_writer_main, &w) == 0;
    int midway = started && poll_until(latch_writer_is_midway, &w);
    sleep_ms(10); /* let it block on the gate */

    uint64_t snap[WORDS];
    int tries;
    int64_t start = now_ns();
    unsigned seq = latch_read(&l, snap, &tries);
    int64_t took = now_ns() - start;

    pthread_mutex_unlock(&w.gate);
    if (started) {
        pthread_join(w.thread, NULL);
    }
    uint64_t after[WORDS];
    int tries_after;
    unsigned seq_after = latch_read(&l, after, &tries_after);
    pthread_mutex_destroy(&w.gate);
    pthread_mutex_destroy(&w.writers);

    CHECK(midway);
    CHECK(took < PROMPTLY_NS);
    CHECK(tries == 1);
    CHECK(seq == 1);
    CHECK(is_record(snap, 5));
    CHECK(tries_after == 1);
    CHECK(seq_after == 2);
    CHECK(is_record(after, 6));
}

/* A child process begins an update to 6 of a latch in shared memory,
 * stores half of data[0] and dies. */
static void
die_midway_through_a_latch_update(void *arg)
{
    struct latched *l = arg;
    write_seqcount_latch_begin(&l->seq);
    latch_store(l->data[0], 6, WORDS / 2);
    kill(getpid(), SIGKILL);
}

static void
test_latch_reader_gets_the_old_state_from_a_writer_that_died_midway(void)
{
    struct latched *l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(l != MAP_FAILED);
    latched_init(l, 5, 5);
    int died = reap(start_child(die_midway_through_a_latch_update, l));
    uint64_t snap[WORDS];
    int tries;
    unsigned seq = latch_read(l, snap, &tries);
    munmap(l, sizeof *l);
    CHECK(died);
    CHECK(seq == 1);
    CHECK(tries == 1);
    CHECK(is_record(snap, 5));
}

/* ==== the 64-bit count ==== */

static void
test_read_retry_sees_a_write_across_the_2_to_32_boundary(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    atomic_store(&sl.seqcount.sequence, TWO_TO_32 - 2);
    uint64_t start;
    CHECK(seqlock_read_try_begin(&sl, &start));
    unsigned low = read_seqbegin(&sl);
    write_seqlock(&sl);
    uint64_t inside = seqlock_sequence(&sl);
    write_sequnlock(&sl);
    CHECK(inside == TWO_TO_32 - 1);
    CHECK(seqlock_sequence(&sl) == TWO_TO_32);
    CHECK(seqlock_read_retry(&sl, start));
    CHECK(read_seqretry(&sl, low)); /* low halves 0xfffffffe and 0 */
    CHECK(read_seqbegin(&sl) == 0);
}

static void
test_read_retry_tells_counts_2_to_32_apart_where_read_seqretry_cannot(void)
{
    /* A reader that noted `start` and paused while 2^31 write sections
     * completed finds the count start + 2^32.  The 64-bit retry sees the
     * change; the kernel API's unsigned values are the count's low half,
     * which is back where it was: read_seqretry() would accept the copy.
     * That is the documented limit of the kernel's 32-bit interface. */
    seqlock_t sl = SEQLOCK_UNLOCKED;
    atomic_store(&sl.seqcount.sequence, TWO_TO_32 - 2);
    uint64_t start;
    CHECK(seqlock_read_try_begin(&sl, &start));
    atomic_store(&sl.seqcount.sequence, start + TWO_TO_32);
    CHECK(seqlock_read_retry(&sl, start) != 0);
    CHECK(read_seqretry(&sl, (unsigned)start) == 0);
}

static void
test_section_ending_at_2_to_32_wakes_a_sleeper(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    atomic_store(&sl.seqcount.sequence, TWO_TO_32 - 2);
    struct holder h;
    struct sleeper s;
    CHECK(holder_start(&h, &sl));
    int slept = sleeper_start(&s, &sl); /* on 2^32 - 1: low half all ones */
    holder_release(&h);
    sleeper_join(&s);
    CHECK(slept);
    CHECK(seqlock_sequence(&sl) == TWO_TO_32);
    CHECK(atomic_load(&s.done_at_ns) - atomic_load(&h.unlocked_at_ns)
          < PROMPTLY_NS);
}

/* ==== record.h: a record kept as a latch ==== */

/* A record of one 8-byte field: committed value 1, then a section that
 * stored 2 into copy 0 and stopped where `stage` says (as a writer that
 * died there would leave it): 0 inside the section, 1 after closing it
 * but before record_finish(). */
static record_view
record_left_at(int stage)
{
    size_t size;
    record_header *h = one_field_record(&size);
    record_view none = {0};
    if (h == NULL) {
        return none;
    }
    record_view v = record_view_of(h, sizeof "x:q" - 1, 8);
    uint64_t one = 1, two = 2;
    if (seqlock_write_lock_timed(v.lock, 0) != 0) {
        free(h);
        return none;
    }
    seqlock_write_copy(record_copy(&v, 0), &one, sizeof one);
    seqlock_close_section(v.lock);
    record_finish(&v);
    seqlock_open_section(v.lock);
    seqlock_write_copy(record_copy(&v, 0), &two, sizeof two);
    if (stage == 1) {
        seqlock_close_section(v.lock);
    }
    return v; /* still held by this thread: the tests act as the taker */
}

/* What a latch reader copies now. */
static uint64_t
record_reader_sees(const record_view *v)
{
    uint64_t seq, value;
    while (!record_try_read(v, &value, 0, sizeof value, &seq)) {
    }
    return value;
}

static uint64_t
record_copy_value(const record_view *v, unsigned which)
{
    uint64_t value;
    seqlock_read_copy(&value, record_copy(v, which), sizeof value);
    return value;
}

static void
test_record_readers_see_the_committed_copy_while_a_section_is_open(void)
{
    record_view v = record_left_at(0);
    CHECK(v.header != NULL);
    uint64_t inside = record_reader_sees(&v);
    seqlock_close_section(v.lock);
    uint64_t after_close = record_reader_sees(&v);
    record_finish(&v);
    seqlock_unlock(v.lock);
    free(v.header);
    CHECK(inside == 1);
    CHECK(after_close == 2);
}

static void
test_record_repair_inside_a_section_puts_copy_0_back_and_counts_it(void)
{
    record_view v = record_left_at(0);
    CHECK(v.header != NULL);
    int discarded = record_repair(&v);
    uint64_t copy0 = record_copy_value(&v, 0);
    uint32_t recoveries = atomic_load(&v.header->recoveries);
    int still_open = (int)(seqlock_sequence(v.lock) & 1u);
    seqlock_unlock(v.lock);
    free(v.header);
    CHECK(discarded == 1 && copy0 == 1 && recoveries == 1 && still_open);
}

static void
test_record_repair_after_a_section_finishes_copy_1_and_counts_nothing(void)
{
    /* The holder closed its section (its changes stand) and died bringing
     * copy 1 up to date; or held the lock only for a reader's pass. */
    record_view v = record_left_at(1);
    CHECK(v.header != NULL);
    int discarded = record_repair(&v);
    uint64_t copy1 = record_copy_value(&v, 1);
    uint32_t recoveries = atomic_load(&v.header->recoveries);
    seqlock_unlock(v.lock);
    free(v.header);
    CHECK(discarded == 0 && copy1 == 2 && recoveries == 0);
}

static void
test_record_abort_puts_copy_0_back_from_copy_1(void)
{
    record_view v = record_left_at(0);
    CHECK(v.header != NULL);
    record_abort(&v);
    seqlock_close_section(v.lock);
    uint64_t seen = record_reader_sees(&v);
    seqlock_unlock(v.lock);
    free(v.header);
    CHECK(seen == 1);
}

static void
test_a_record_view_never_reads_its_geometry_from_the_header(void)
{
    /* Another process may rewrite the header at any moment: the sizes it
     * holds once the view is made change nothing the view reaches. */
    record_view v = record_left_at(1);
    CHECK(v.header != NULL);
    seqlock_word_t *copy1 = record_copy(&v, 1);
    v.header->data_bytes = 0x7fffff00u;
    v.header->layout_bytes = 0x7fffff00u;
    record_finish(&v); /* copies v.words words, as the view says */
    uint64_t seen = record_reader_sees(&v);
    int same_copy = record_copy(&v, 1) == copy1;
    seqlock_unlock(v.lock);
    free(v.header);
    CHECK(seen == 2 && same_copy && v.words == 1);
}

/* ---- record.h's write protocol ---- */

static void
test_record_close_section_commits_copy_0_and_brings_copy_1_up_to_date(void)
{
    record_view v = record_left_at(0); /* a section storing 2 is open */
    CHECK(v.header != NULL);
    record_close_section(&v, 0);
    uint64_t seen = record_reader_sees(&v), copy1 = record_copy_value(&v, 1);
    int even = !(seqlock_sequence(v.lock) & 1u);
    seqlock_unlock(v.lock);
    free(v.header);
    CHECK(seen == 2 && copy1 == 2 && even);
}

static void
test_record_close_section_with_rollback_leaves_the_state_the_section_found(void)
{
    record_view v = record_left_at(0);
    CHECK(v.header != NULL);
    uint64_t before = seqlock_sequence(v.lock) - 1;
    record_close_section(&v, 1);
    uint64_t seen = record_reader_sees(&v);
    uint64_t copy0 = record_copy_value(&v, 0), copy1 = record_copy_value(&v, 1);
    uint64_t after = seqlock_sequence(v.lock);
    seqlock_unlock(v.lock);
    free(v.header);
    CHECK(seen == 1 && copy0 == 1 && copy1 == 1);
    CHECK(after == before + 2); /* still a section: waiters hear of it */
}

static void
test_record_open_section_after_a_takeover_discards_the_dead_section_first(void)
{
    /* The taker finds the dead holder's section open with copy 0 half
     * written: it is put back and counted, and the taker adopts it. */
    record_view v = record_left_at(0);
    CHECK(v.header != NULL);
    uint64_t opened_at = seqlock_sequence(v.lock);
    int abandoned = seqlock_abandon(v.lock); /* odd, as a dead holder's */
    int err = seqlock_lock_excl_timed(v.lock, 0);
    record_open_section(&v, 1);
    uint64_t copy0 = record_copy_value(&v, 0);
    uint32_t recoveries = atomic_load(&v.header->recoveries);
    uint64_t count = seqlock_sequence(v.lock);
    record_close_section(&v, 0);
    uint64_t seen = record_reader_sees(&v);
    seqlock_unlock(v.lock);
    free(v.header);
    CHECK(abandoned == 0 && err == EOWNERDEAD);
    CHECK(copy0 == 1 && recoveries == 1 && count == opened_at);
    CHECK(seen == 1);
}

static void
test_record_close_dead_section_closes_only_a_section_left_open(void)
{
    record_view open = record_left_at(0), closed = record_left_at(1);
    CHECK(open.header != NULL && closed.header != NULL);
    record_close_dead_section(&open);
    record_close_dead_section(&closed);
    int open_even = !(seqlock_sequence(open.lock) & 1u);
    uint64_t open_seen = record_reader_sees(&open);
    uint64_t closed_copy1 = record_copy_value(&closed, 1);
    uint32_t closed_recoveries = atomic_load(&closed.header->recoveries);
    seqlock_unlock(open.lock);
    seqlock_unlock(closed.lock);
    free(open.header);
    free(closed.header);
    CHECK(open_even && open_seen == 1);
    CHECK(closed_copy1 == 2 && closed_recoveries == 0);
}

/* ---- a record's lock ABI ---- */

/* seqlock_t's field names, two of its words regrouped: the same size. */
typedef struct {
    seqcount_latch_t seqcount;
    _Atomic uint64_t holder; /* swapped with wake_from */
    _Atomic uint64_t wake_from;
    unsigned char count_line[SEQLOCK_LINE - 16];
    _Atomic uint64_t starving;
    _Atomic uint64_t gaps;
    _Atomic uint32_t ready;
    _Atomic uint32_t abandoned;
    pthread_mutex_t beacon;
    struct seqlock_owner owner;
} regrouped_seqlock;

static void
test_a_lock_regrouped_at_the_same_size_has_another_layout_hash(void)
{
    CHECK(sizeof(regrouped_seqlock) == sizeof(seqlock_t));
    CHECK(SEQLOCK_LAYOUT_HASH(regrouped_seqlock)
          != SEQLOCK_LAYOUT_HASH(seqlock_t));
    CHECK(SEQLOCK_LAYOUT_HASH(seqlock_t) == SEQLOCK_LAYOUT_HASH(seqlock_t));
}

static void
test_a_record_of_another_lock_abi_is_refused(void)
{
    size_t size;
    record_header *h = one_field_record(&size);
    CHECK(h != NULL);
    int mine = one_field_record_matches(h, size);
    h->lock_abi ^= 1u;
    int other = one_field_record_matches(h, size);
    free(h);
    CHECK(mine == RECORD_MATCHES);
    CHECK(other == RECORD_OTHER_LOCK_ABI);
}

/* ---- registration ---- */

static const struct test tests[] = {
    TEST(test_latch_zero_initializer_starts_at_0_so_readers_use_data_0, PLAIN),
    TEST(test_seqcount_latch_init_starts_at_0_so_readers_use_data_0, PLAIN),
    TEST(test_write_seqcount_latch_begin_makes_the_count_odd_so_readers_use_data_1,
         PLAIN),
    TEST(test_write_seqcount_latch_makes_the_count_even_so_readers_use_data_0,
         PLAIN),
    TEST(test_write_seqcount_latch_end_leaves_the_count_alone, PLAIN),
    TEST(test_each_latch_update_adds_2_to_the_count, PLAIN),
    TEST(test_read_seqcount_latch_retry_is_0_without_an_intervening_switch,
         PLAIN),
    TEST(test_read_seqcount_latch_retry_is_0_while_the_writer_stores_the_other_copy,
         PLAIN),
    TEST(test_read_seqcount_latch_retry_is_nonzero_after_an_intervening_switch,
         PLAIN),
    TEST(test_raw_latch_reads_and_retries_equal_the_plain_ones, PLAIN),
    TEST(test_raw_write_seqcount_latch_switches_copies_as_the_plain_writes_do,
         PLAIN),
    TEST(test_latch_unsigned_reads_are_the_counts_low_32_bits, PLAIN),
    TEST(test_latch_64_bit_reads_tell_counts_2_to_32_apart_where_unsigned_cannot,
         PLAIN),
    TEST(test_latch_update_across_2_to_32_is_seen_by_both_retries, PLAIN),
    TEST(test_latch_reader_in_a_handler_interrupting_data_0s_update_sees_the_old_state,
         FORKS_OR_SIGNALS),
    TEST(test_latch_reader_in_a_handler_interrupting_data_1s_update_sees_the_new_state,
         FORKS_OR_SIGNALS),
    TEST(test_latch_reader_returns_the_old_state_at_once_while_the_writer_is_blocked,
         PLAIN),
    TEST(test_latch_reader_gets_the_old_state_from_a_writer_that_died_midway,
         FORKS_OR_SIGNALS),
    TEST(test_record_readers_see_the_committed_copy_while_a_section_is_open,
         PLAIN),
    TEST(test_record_repair_inside_a_section_puts_copy_0_back_and_counts_it,
         PLAIN),
    TEST(test_record_repair_after_a_section_finishes_copy_1_and_counts_nothing,
         PLAIN),
    TEST(test_record_abort_puts_copy_0_back_from_copy_1, PLAIN),
    TEST(test_a_record_view_never_reads_its_geometry_from_the_header, PLAIN),
    TEST(test_record_close_section_commits_copy_0_and_brings_copy_1_up_to_date,
         PLAIN),
    TEST(test_record_close_section_with_rollback_leaves_the_state_the_section_found,
         PLAIN),
    TEST(test_record_open_section_after_a_takeover_discards_the_dead_section_first,
         PLAIN),
    TEST(test_record_close_dead_section_closes_only_a_section_left_open, PLAIN),
    TEST(test_a_lock_regrouped_at_the_same_size_has_another_layout_hash, PLAIN),
    TEST(test_a_record_of_another_lock_abi_is_refused, PLAIN),
    TEST(test_read_retry_sees_a_write_across_the_2_to_32_boundary, PLAIN),
    TEST(test_read_retry_tells_counts_2_to_32_apart_where_read_seqretry_cannot,
         PLAIN),
    TEST(test_section_ending_at_2_to_32_wakes_a_sleeper, PLAIN),
};
REGISTER_TESTS(tests)
