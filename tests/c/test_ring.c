/*
 * test_ring.c - ring.h's broadcast ring: its geometry and ring_matches();
 * appends read back in order under consecutive sequence numbers; readers
 * that start at the newest, the oldest or the last n entries, or read
 * below a head loaded once; a lapped reader counts exactly what it
 * missed and never gets a torn entry; a
 * rolled-back or dead writer's entry is never delivered and its number is
 * reused; a reader on a read-only mapping reads and waits; rewritten head
 * and stamp words never make a reader loop, read outside the ring or
 * return a torn entry; ring_wait() is woken by appends from threads and
 * processes.
 */
#include "harness.h"
#include "ring.h"

/* Every test's ring: entries of WORDS words in record_form.h's form, whose
 * first word names the entry's sequence number, so a reader can tell a
 * torn entry (not well formed) from another entry (the wrong number). */
static const char LAYOUT[] = "a:4Q";
#define LAYOUT_BYTES ((uint32_t)(sizeof LAYOUT - 1))
#define ENTRY_BYTES ((uint32_t)(WORDS * sizeof(uint64_t)))

static uint64_t
a_of(uint64_t n)
{
    return n * 1000 + 7;
}

/* Does entry e hold entry n, whole? */
static int
is_entry(const uint64_t e[WORDS], uint64_t n)
{
    return well_formed(e) && e[0] == a_of(n);
}

/* A ring in a MAP_SHARED mapping (children of the test see it), with a
 * step word after it for the processes sharing it. */
struct test_ring {
    void *memory;
    size_t size;    /* ring_size() */
    size_t mapped;  /* size rounded up, and the step word's line */
    atomic_int *step;
    ring_view v;
};

static int
ring_new(struct test_ring *t, uint64_t capacity)
{
    t->size = ring_size(LAYOUT_BYTES, ENTRY_BYTES, capacity);
    t->mapped = record_round_up(t->size, 64) + 64;
    t->memory = mmap(NULL, t->mapped, PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (t->memory == MAP_FAILED) {
        return 0;
    }
    t->step = (atomic_int *)((char *)t->memory + t->mapped - 64);
    if (ring_init(t->memory, LAYOUT, LAYOUT_BYTES, ENTRY_BYTES, capacity)
        != 0) {
        munmap(t->memory, t->mapped);
        return 0;
    }
    t->v = ring_view_of(t->memory, LAYOUT_BYTES, ENTRY_BYTES, capacity);
    return 1;
}

static void
ring_free(struct test_ring *t)
{
    munmap(t->memory, t->mapped);
}

/* Append entry head (in the form a_of(head)) as one section, taking and
 * releasing the lock word; 0 or the error, *n the entry's number. */
static int
append_one(const ring_view *v, uint64_t *n)
{
    int err = seqlock_lock_excl_timed(v->lock, GIVE_UP_NS);
    if (err != 0 && err != EOWNERDEAD) {
        return err;
    }
    int got = ring_open_append(v, err == EOWNERDEAD, n);
    if (got == 0) {
        uint64_t e[WORDS];
        make_record(e, a_of(*n));
        seqlock_write_copy(ring_entry(v, *n), e, sizeof e);
        got = ring_close_append(v, *n, 0);
    }
    seqlock_unlock(v->lock);
    return got;
}

static int
append_many(const ring_view *v, uint64_t count)
{
    for (uint64_t i = 0; i < count; i++) {
        uint64_t n;
        if (append_one(v, &n) != 0) {
            return 0;
        }
    }
    return 1;
}

/* What a reader got, checked as it went: each delivered entry whole and
 * the one its sequence number names, and every sequence number accounted
 * for, in order (next == delivered + missed after every call). */
struct tally {
    uint64_t delivered;
    uint64_t first, last; /* sequence numbers delivered */
    uint64_t torn;        /* delivered, not the entry its number names */
    uint64_t unaccounted; /* calls after which next != delivered + missed
                             (+ where the reader started) */
};

static int
read_counted(ring_reader *r, const ring_view *v, struct tally *t,
             uint64_t start)
{
    uint64_t e[WORDS], seq = UINT64_MAX;
    int got = ring_read_next(r, v, e, &seq);
    if (got == RING_ENTRY) {
        if (t->delivered == 0) {
            t->first = seq;
        }
        t->delivered++;
        t->last = seq;
        t->torn += !is_entry(e, seq);
        t->unaccounted += seq + 1 != r->next;
    }
    t->unaccounted += r->next != start + t->delivered + r->missed;
    return got;
}

/* Read until RING_NOTHING. */
static void
drain(ring_reader *r, const ring_view *v, struct tally *t, uint64_t start)
{
    while (read_counted(r, v, t, start) == RING_ENTRY) {
    }
}

/* ==== geometry ==== */

static void
test_ring_size_is_0_for_no_slots_no_entry_bytes_or_an_overflow(void)
{
    CHECK(ring_size(LAYOUT_BYTES, ENTRY_BYTES, 0) == 0);
    CHECK(ring_size(LAYOUT_BYTES, 0, 8) == 0);
    CHECK(ring_size(LAYOUT_BYTES, ENTRY_BYTES, UINT64_MAX) == 0);
    CHECK(ring_size(UINT32_MAX, UINT32_MAX, SIZE_MAX / 8) == 0);
}

static void
test_ring_size_is_header_layout_head_line_and_a_stamped_slot_per_entry(
    void)
{
    /* the header (a record's: 320), 64 of layout text, head's line of
     * 128 from a multiple of 128, then 3 slots of a stamp and 4 words */
    CHECK(RING_HEADER_SIZE == RECORD_HEADER_SIZE);
    CHECK(RING_HEADER_SIZE == 320);
    CHECK(ring_size(LAYOUT_BYTES, ENTRY_BYTES, 3) == 320 + 64 + 128 + 3 * 40);
    /* 128 of layout text end at 448: head's line starts at 512 */
    CHECK(ring_size(65, 1, 1) == 512 + 128 + 16);
}

static void
test_ring_init_refuses_a_geometry_ring_size_refuses(void)
{
    static _Alignas(64) char memory[4096];
    memset(memory, 0x5a, sizeof memory);
    int no_slots = ring_init(memory, LAYOUT, LAYOUT_BYTES, ENTRY_BYTES, 0);
    int no_bytes = ring_init(memory, LAYOUT, LAYOUT_BYTES, 0, 4);
    CHECK(no_slots == EINVAL && no_bytes == EINVAL);
    CHECK(memory[0] == 0x5a); /* nothing written */
}

static void
test_a_new_ring_matches_its_geometry_and_is_empty(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    int matches = ring_matches(t.v.header, t.size, LAYOUT, LAYOUT_BYTES,
                               ENTRY_BYTES, 4);
    uint64_t head = ring_head(&t.v);
    ring_reader r;
    ring_reader_init(&r, &t.v, 1);
    uint64_t e[WORDS], seq;
    int got = ring_read_next(&r, &t.v, e, &seq);
    ring_free(&t);
    CHECK(matches == RING_MATCHES);
    CHECK(head == 0);
    CHECK(got == RING_NOTHING && r.next == 0 && r.missed == 0);
}

static void
test_ring_matches_says_no_magic_before_ring_init(void)
{
    static _Alignas(64) char memory[4096];
    CHECK(ring_matches((ring_header *)memory, sizeof memory, LAYOUT,
                       LAYOUT_BYTES, ENTRY_BYTES, 4) == RING_NO_MAGIC);
    CHECK(ring_matches((ring_header *)memory, 4, LAYOUT, LAYOUT_BYTES,
                       ENTRY_BYTES, 4) == RING_NO_MAGIC);
}

static void
test_ring_matches_refuses_a_record(void)
{
    size_t size;
    record_header *h = one_field_record(&size);
    CHECK(h != NULL);
    int got = ring_matches((ring_header *)h, size, "x:q", 3, 8, 1);
    free(h);
    CHECK(got == RING_NO_MAGIC);
}

static void
test_ring_matches_names_another_version(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    t.v.header->version = RING_VERSION + 1;
    int got = ring_matches(t.v.header, t.size, LAYOUT, LAYOUT_BYTES,
                           ENTRY_BYTES, 4);
    ring_free(&t);
    CHECK(got == RING_OTHER_VERSION);
}

static void
test_ring_matches_names_another_lock_abi(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    t.v.header->lock_abi ^= 1;
    int got = ring_matches(t.v.header, t.size, LAYOUT, LAYOUT_BYTES,
                           ENTRY_BYTES, 4);
    ring_free(&t);
    CHECK(got == RING_OTHER_LOCK_ABI);
}

static void
test_ring_matches_names_a_broken_lock(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    t.v.header->lock.beacon.__data.__kind = 0x40;
    int got = ring_matches(t.v.header, t.size, LAYOUT, LAYOUT_BYTES,
                           ENTRY_BYTES, 4);
    ring_free(&t);
    CHECK(got == RING_BROKEN_LOCK);
}

static void
test_ring_matches_names_other_fields(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    int text = ring_matches(t.v.header, t.size, "b:4Q", LAYOUT_BYTES,
                            ENTRY_BYTES, 4);
    int bytes = ring_matches(t.v.header, t.size, LAYOUT, LAYOUT_BYTES,
                             ENTRY_BYTES - 8, 4);
    int refused = ring_matches(t.v.header, t.size, LAYOUT, LAYOUT_BYTES, 0,
                               4);
    ring_free(&t);
    CHECK(text == RING_OTHER_LAYOUT && bytes == RING_OTHER_LAYOUT);
    CHECK(refused == RING_OTHER_LAYOUT);
}

static void
test_ring_matches_names_another_capacity(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    int got = ring_matches(t.v.header, t.size, LAYOUT, LAYOUT_BYTES,
                           ENTRY_BYTES, 2);
    ring_free(&t);
    CHECK(got == RING_OTHER_CAPACITY);
}

static void
test_ring_matches_says_too_small_for_memory_ending_before_the_last_slot(
    void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    int short_slot = ring_matches(t.v.header, t.size - 1, LAYOUT,
                                  LAYOUT_BYTES, ENTRY_BYTES, 4);
    int short_text = ring_matches(t.v.header, RING_HEADER_SIZE + 1, LAYOUT,
                                  LAYOUT_BYTES, ENTRY_BYTES, 4);
    ring_free(&t);
    CHECK(short_slot == RING_TOO_SMALL && short_text == RING_TOO_SMALL);
}

static void
test_a_ring_view_never_reads_its_geometry_from_the_header(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    CHECK(append_many(&t.v, 6));
    t.v.header->capacity = UINT64_MAX; /* another process's scribble */
    t.v.header->entry_bytes = UINT32_MAX;
    ring_reader r;
    ring_reader_init(&r, &t.v, 1);
    struct tally tl = {0};
    uint64_t start = r.next;
    drain(&r, &t.v, &tl, start);
    ring_free(&t);
    CHECK(start == 2);
    CHECK(tl.delivered == 4 && tl.first == 2 && tl.last == 5);
    CHECK(tl.torn == 0 && tl.unaccounted == 0);
}

/* ==== appending and reading ==== */

static void
test_appended_entries_are_read_in_order_under_consecutive_numbers(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 8));
    ring_reader r;
    ring_reader_init(&r, &t.v, 0);
    uint64_t numbers[5];
    for (int i = 0; i < 5; i++) {
        CHECK(append_one(&t.v, &numbers[i]) == 0);
    }
    struct tally tl = {0};
    drain(&r, &t.v, &tl, 0);
    ring_free(&t);
    for (int i = 0; i < 5; i++) {
        CHECK(numbers[i] == (uint64_t)i);
    }
    CHECK(tl.delivered == 5 && tl.first == 0 && tl.last == 4);
    CHECK(tl.torn == 0 && tl.unaccounted == 0 && r.missed == 0);
}

static void
test_each_append_steps_the_count_by_2(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 8));
    CHECK(append_many(&t.v, 3));
    uint64_t count = seqlock_sequence(t.v.lock);
    ring_free(&t);
    CHECK(count == 6);
}

static void
test_a_new_reader_starts_after_the_newest_entry(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 8));
    CHECK(append_many(&t.v, 3));
    ring_reader r;
    ring_reader_init(&r, &t.v, 0);
    uint64_t e[WORDS], seq = 0;
    int before = ring_read_next(&r, &t.v, e, &seq);
    CHECK(append_many(&t.v, 1));
    int after = ring_read_next(&r, &t.v, e, &seq);
    ring_free(&t);
    CHECK(before == RING_NOTHING);
    CHECK(after == RING_ENTRY && seq == 3 && is_entry(e, 3));
    CHECK(r.missed == 0);
}

static void
test_a_reader_from_the_oldest_starts_at_the_first_entry_of_a_ring_not_full(
    void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 8));
    CHECK(append_many(&t.v, 3));
    ring_reader r;
    ring_reader_init(&r, &t.v, 1);
    struct tally tl = {0};
    drain(&r, &t.v, &tl, 0);
    ring_free(&t);
    CHECK(tl.delivered == 3 && tl.first == 0 && tl.last == 2);
    CHECK(r.missed == 0 && tl.torn == 0 && tl.unaccounted == 0);
}

static void
test_a_reader_from_the_oldest_starts_capacity_entries_back_in_a_full_ring(
    void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    CHECK(append_many(&t.v, 10));
    ring_reader r;
    ring_reader_init(&r, &t.v, 1);
    struct tally tl = {0};
    drain(&r, &t.v, &tl, 6);
    ring_free(&t);
    CHECK(tl.delivered == 4 && tl.first == 6 && tl.last == 9);
    CHECK(r.missed == 0 && tl.torn == 0 && tl.unaccounted == 0);
}

static void
test_a_reader_of_the_last_n_gets_the_newest_n_entries_at_most_capacity(
    void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    CHECK(append_many(&t.v, 10));
    ring_reader two, many;
    ring_reader_init_last(&two, &t.v, 2);
    ring_reader_init_last(&many, &t.v, 100);
    struct tally t2 = {0}, tm = {0};
    drain(&two, &t.v, &t2, 8);
    drain(&many, &t.v, &tm, 6);
    ring_free(&t);
    CHECK(t2.delivered == 2 && t2.first == 8 && t2.last == 9);
    CHECK(tm.delivered == 4 && tm.first == 6 && tm.last == 9);
    CHECK(two.missed == 0 && many.missed == 0);
}

static void
test_a_lapped_reader_gets_the_retained_entries_and_counts_the_rest_missed(
    void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    ring_reader r;
    ring_reader_init(&r, &t.v, 1); /* at 0 */
    CHECK(append_many(&t.v, 10));
    struct tally tl = {0};
    drain(&r, &t.v, &tl, 0);
    ring_free(&t);
    CHECK(tl.delivered == 4 && tl.first == 6 && tl.last == 9);
    CHECK(r.missed == 6 && r.overwritten == 0);
    CHECK(tl.torn == 0 && tl.unaccounted == 0);
}

static void
test_a_reader_below_a_head_it_loaded_stops_there_and_skips_a_lap_behind_it(
    void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    ring_reader r;
    ring_reader_init(&r, &t.v, 1); /* at 0 */
    CHECK(append_many(&t.v, 10));
    uint64_t e[WORDS], seq = 99;
    int got[6], n = 0;
    /* below 7 (as if head were loaded when it was 7): 3..6, of which the
     * ring still holds 6 only; 0..2 are more than a lap behind 7 */
    while (n < 6 && (got[n] = ring_read_below(&r, &t.v, 7, e, &seq))
                        == RING_ENTRY) {
        CHECK(is_entry(e, seq));
        n++;
    }
    uint64_t first_seq = seq;
    ring_free(&t);
    CHECK(n == 1 && first_seq == 6 && got[1] == RING_NOTHING);
    /* 0..2 skipped, 3..5 found holding 7..9 */
    CHECK(r.next == 7 && r.missed == 6 && r.overwritten == 0);
}

static void
test_an_entry_is_not_delivered_before_its_append_closes(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    ring_reader r;
    ring_reader_init(&r, &t.v, 0);
    CHECK(seqlock_lock_excl_timed(t.v.lock, 0) == 0);
    uint64_t n = 99, e[WORDS], seq = 0;
    CHECK(ring_open_append(&t.v, 0, &n) == 0);
    make_record(e, a_of(n));
    seqlock_write_copy(ring_entry(&t.v, n), e, sizeof e);
    int open = ring_read_next(&r, &t.v, e, &seq);
    int available = ring_available(&r, &t.v);
    CHECK(ring_close_append(&t.v, n, 0) == 0);
    seqlock_unlock(t.v.lock);
    int closed = ring_read_next(&r, &t.v, e, &seq);
    ring_free(&t);
    CHECK(n == 0);
    CHECK(open == RING_NOTHING && !available);
    CHECK(closed == RING_ENTRY && seq == 0 && is_entry(e, 0));
}

static void
test_an_entry_whose_slot_a_writer_has_opened_is_counted_missed(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    CHECK(append_many(&t.v, 4));
    ring_reader r;
    ring_reader_init(&r, &t.v, 1); /* at 0 */
    CHECK(seqlock_lock_excl_timed(t.v.lock, 0) == 0);
    uint64_t n = 0;
    CHECK(ring_open_append(&t.v, 0, &n) == 0); /* entry 4, over entry 0 */
    struct tally tl = {0};
    drain(&r, &t.v, &tl, 0);
    CHECK(ring_close_append(&t.v, n, 1) == 0);
    seqlock_unlock(t.v.lock);
    ring_free(&t);
    CHECK(n == 4);
    CHECK(r.missed == 1 && tl.delivered == 3 && tl.first == 1);
    CHECK(tl.torn == 0 && tl.unaccounted == 0);
}

static void
test_a_rolled_back_append_is_never_delivered_and_its_number_is_reused(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    ring_reader r;
    ring_reader_init(&r, &t.v, 0);
    CHECK(seqlock_lock_excl_timed(t.v.lock, 0) == 0);
    uint64_t n = 99, e[WORDS];
    CHECK(ring_open_append(&t.v, 0, &n) == 0);
    make_record(e, 12345);
    seqlock_write_copy(ring_entry(&t.v, n), e, sizeof e);
    CHECK(ring_close_append(&t.v, n, 1) == 0);
    seqlock_unlock(t.v.lock);
    uint64_t head = ring_head(&t.v);
    uint64_t count = seqlock_sequence(t.v.lock);
    uint64_t again = 99;
    CHECK(append_one(&t.v, &again) == 0);
    struct tally tl = {0};
    drain(&r, &t.v, &tl, 0);
    ring_free(&t);
    CHECK(n == 0 && head == 0 && count == 2); /* the section closed */
    CHECK(again == 0);
    CHECK(tl.delivered == 1 && tl.first == 0 && tl.torn == 0);
    CHECK(r.missed == 0 && tl.unaccounted == 0);
}

static void
test_ring_open_append_without_the_lock_word_is_eperm(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    uint64_t n = 99;
    int err = ring_open_append(&t.v, 0, &n);
    uint64_t stamp = atomic_load(ring_stamp(&t.v, 0));
    ring_free(&t);
    CHECK(err == EPERM);
    CHECK(stamp == 0 && n == 99);
}

/* A writer thread appends flat out on a ring of 2 slots while a reader
 * follows: whole entries or counted misses, every number accounted for. */
enum { RACE_APPENDS = 20000 };

struct racing_writer {
    const ring_view *v;
    atomic_int done;
};

static void *
racing_writer_main(void *arg)
{
    struct racing_writer *w = arg;
    void *failed = NULL;
    for (int i = 0; i < RACE_APPENDS && !failed; i++) {
        uint64_t n;
        failed = append_one(w->v, &n) != 0 ? (void *)1 : NULL;
    }
    atomic_store(&w->done, 1);
    return failed;
}

static void
test_a_reader_racing_a_writer_gets_whole_entries_or_counts_misses(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 2));
    ring_reader r;
    ring_reader_init(&r, &t.v, 1);
    pthread_t writer;
    struct racing_writer w = {&t.v, 0};
    CHECK(pthread_create(&writer, NULL, racing_writer_main, &w) == 0);
    struct tally tl = {0};
    int rewound = 0;
    while (r.next < RACE_APPENDS) {
        int got = read_counted(&r, &t.v, &tl, 0);
        rewound += got == RING_REWOUND;
        if (got != RING_ENTRY && atomic_load(&w.done)
            && r.next == ring_head(&t.v)) {
            break; /* the writer failed: no more entries */
        }
    }
    void *failed;
    pthread_join(writer, &failed);
    ring_free(&t);
    CHECK(failed == NULL && !rewound);
    CHECK(tl.delivered + r.missed == RACE_APPENDS);
    CHECK(tl.torn == 0 && tl.unaccounted == 0);
    CHECK(tl.delivered > 0 && tl.last == RACE_APPENDS - 1);
}

/* ==== writers that die ==== */

enum death_point {
    BEFORE_THE_SLOT, /* the section open, the stamp untouched */
    HALF_WRITTEN,    /* the stamp odd, half the words stored */
    COMPLETE_UNCOUNTED, /* the stamp complete, head not stored */
    AFTER_HEAD,      /* head stored, the section still open */
};

struct dying_writer {
    struct test_ring *t;
    enum death_point at;
};

/* A child that appends entry n and dies at a point of it (step 1: ready
 * to be killed). */
static void
append_until_killed(void *arg)
{
    struct dying_writer *d = arg;
    const ring_view *v = &d->t->v;
    if (seqlock_lock_excl_timed(v->lock, GIVE_UP_NS) != 0) {
        _exit(3);
    }
    uint64_t n = 0, e[WORDS];
    if (d->at == BEFORE_THE_SLOT) {
        seqlock_open_section(v->lock);
    }
    else {
        ring_open_append(v, 0, &n);
        make_record(e, a_of(n));
        seqlock_write_copy(ring_entry(v, n), e,
                           d->at == HALF_WRITTEN ? sizeof e / 2 : sizeof e);
        if (d->at != HALF_WRITTEN) { /* ring_close_append()'s stores */
            atomic_store_explicit(ring_stamp(v, n), 2 * n + 2,
                                  memory_order_release);
        }
        if (d->at == AFTER_HEAD) {
            atomic_store_explicit(v->head, n + 1, memory_order_release);
        }
    }
    atomic_store(d->t->step, 1);
    idle_until_killed(NULL);
}

/* A ring of 4 with 5 entries (0 lapped) whose next writer died at a
 * point of entry 5; then the next writer's append.  The reader started
 * at 2 before the death. */
struct after_death {
    uint32_t recoveries;
    uint64_t head_before; /* head after the death, before the next append */
    uint64_t next_n;      /* the next append's number */
    int took_over;
    struct tally tl;
    ring_reader r;
};

static int
kill_a_writer_at(enum death_point at, struct after_death *out)
{
    struct test_ring t;
    if (!ring_new(&t, 4) || !append_many(&t.v, 5)) {
        return 0;
    }
    ring_reader_init_last(&out->r, &t.v, 3); /* at 2 */
    struct dying_writer d = {&t, at};
    pid_t pid = start_child(append_until_killed, &d);
    int ready = 0;
    for (int i = 0; i < 5000 && !(ready = atomic_load(t.step)); i++) {
        sleep_ms(1);
    }
    int killed = kill_child(pid);
    out->head_before = ring_head(&t.v);
    int err = seqlock_lock_excl_timed(t.v.lock, GIVE_UP_NS);
    out->took_over = err == EOWNERDEAD;
    int appended = 0;
    if (err == 0 || err == EOWNERDEAD) {
        uint64_t e[WORDS];
        appended = ring_open_append(&t.v, out->took_over, &out->next_n) == 0;
        make_record(e, a_of(out->next_n));
        seqlock_write_copy(ring_entry(&t.v, out->next_n), e, sizeof e);
        appended &= ring_close_append(&t.v, out->next_n, 0) == 0;
        seqlock_unlock(t.v.lock);
    }
    out->recoveries = atomic_load(&t.v.header->recoveries);
    drain(&out->r, &t.v, &out->tl, 2);
    ring_free(&t);
    return ready && killed && appended;
}

static void
test_a_writer_killed_mid_entry_is_never_delivered_and_counted_a_recovery(
    void)
{
    struct after_death a = {0};
    CHECK(kill_a_writer_at(HALF_WRITTEN, &a));
    CHECK(a.took_over && a.recoveries == 1);
    CHECK(a.head_before == 5 && a.next_n == 5);
    CHECK(a.tl.delivered == 4 && a.tl.first == 2 && a.tl.last == 5);
    CHECK(a.tl.torn == 0 && a.tl.unaccounted == 0 && a.r.missed == 0);
}

static void
test_a_writer_killed_with_its_entry_complete_but_uncounted_is_a_recovery(
    void)
{
    struct after_death a = {0};
    CHECK(kill_a_writer_at(COMPLETE_UNCOUNTED, &a));
    CHECK(a.took_over && a.recoveries == 1);
    CHECK(a.head_before == 5 && a.next_n == 5);
    CHECK(a.tl.delivered == 4 && a.tl.first == 2 && a.tl.last == 5);
    CHECK(a.tl.torn == 0 && a.tl.unaccounted == 0 && a.r.missed == 0);
}

static void
test_a_writer_killed_after_storing_head_has_delivered_its_entry(void)
{
    struct after_death a = {0};
    CHECK(kill_a_writer_at(AFTER_HEAD, &a));
    CHECK(a.took_over && a.recoveries == 0);
    CHECK(a.head_before == 6 && a.next_n == 6);
    /* 2..6 are 5 entries in a ring of 4: 2 was lapped */
    CHECK(a.tl.delivered == 4 && a.tl.first == 3 && a.tl.last == 6);
    CHECK(a.r.missed == 1);
    CHECK(a.tl.torn == 0 && a.tl.unaccounted == 0);
}

static void
test_a_writer_killed_before_touching_its_slot_discards_nothing(void)
{
    struct after_death a = {0};
    CHECK(kill_a_writer_at(BEFORE_THE_SLOT, &a));
    CHECK(a.took_over && a.recoveries == 0);
    CHECK(a.head_before == 5 && a.next_n == 5);
    CHECK(a.tl.delivered == 4 && a.tl.first == 2 && a.tl.last == 5);
    CHECK(a.tl.torn == 0 && a.tl.unaccounted == 0 && a.r.missed == 0);
}

static void
test_ring_close_dead_section_discards_the_half_entry_and_closes(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    CHECK(append_many(&t.v, 2));
    struct dying_writer d = {&t, HALF_WRITTEN};
    pid_t pid = start_child(append_until_killed, &d);
    for (int i = 0; i < 5000 && !atomic_load(t.step); i++) {
        sleep_ms(1);
    }
    CHECK(kill_child(pid));
    int err = seqlock_lock_excl_timed(t.v.lock, GIVE_UP_NS);
    if (err == EOWNERDEAD) {
        ring_close_dead_section(&t.v);
    }
    uint64_t count = seqlock_sequence(t.v.lock);
    uint64_t stamp = atomic_load(ring_stamp(&t.v, 2));
    seqlock_unlock(t.v.lock);
    uint32_t recoveries = atomic_load(&t.v.header->recoveries);
    uint64_t head = ring_head(&t.v);
    ring_free(&t);
    CHECK(err == EOWNERDEAD);
    CHECK(count == 6 && stamp == 0); /* closed; the slot says nothing */
    CHECK(recoveries == 1 && head == 2);
}

/* ==== memory other processes may rewrite ==== */

static void
test_a_read_only_reader_reads_and_waits_writing_nothing(void)
{
    /* One mapping of the ring writable for the writer, one read-only for
     * the reader, which would die of SIGSEGV if it wrote. */
    uint64_t capacity = 4;
    size_t size = ring_size(LAYOUT_BYTES, ENTRY_BYTES, capacity);
    int fd = memfd_create("seqlock-ring-read-only", 0);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, (off_t)size) == 0);
    void *rw = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    void *ro = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(rw != MAP_FAILED && ro != MAP_FAILED);
    CHECK(ring_init(rw, LAYOUT, LAYOUT_BYTES, ENTRY_BYTES, capacity) == 0);
    ring_view w = ring_view_of(rw, LAYOUT_BYTES, ENTRY_BYTES, capacity);
    ring_view v = ring_view_of(ro, LAYOUT_BYTES, ENTRY_BYTES, capacity);
    uint64_t wake_from = atomic_load(&w.lock->wake_from);
    CHECK(append_many(&w, 2));
    ring_reader r;
    ring_reader_init(&r, &v, 1);
    struct tally tl = {0};
    drain(&r, &v, &tl, 0);
    int timed_out = ring_wait(&r, &v, 20 * MS, NULL, SEQLOCK_WAIT_READ_ONLY);
    CHECK(append_many(&w, 1));
    int woke = ring_wait(&r, &v, GIVE_UP_NS, NULL, SEQLOCK_WAIT_READ_ONLY);
    drain(&r, &v, &tl, 0);
    uint64_t announced = atomic_load(&w.lock->wake_from);
    munmap(rw, size);
    munmap(ro, size);
    CHECK(tl.delivered == 3 && tl.torn == 0 && tl.unaccounted == 0);
    CHECK(timed_out == ETIMEDOUT && woke == 0);
    CHECK(announced == wake_from);
}

static void
test_a_head_below_the_reader_is_rewound_and_leaves_the_reader_alone(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    CHECK(append_many(&t.v, 6));
    ring_reader r;
    ring_reader_init(&r, &t.v, 0); /* at 6 */
    atomic_store(t.v.head, 2); /* the ring made anew, or a scribble */
    uint64_t e[WORDS], seq = 99;
    int got = ring_read_next(&r, &t.v, e, &seq);
    int available = ring_available(&r, &t.v);
    int waited = ring_wait(&r, &t.v, GIVE_UP_NS, NULL, 0);
    ring_free(&t);
    CHECK(got == RING_REWOUND && seq == 99);
    CHECK(r.next == 6 && r.missed == 0);
    CHECK(available && waited == 0); /* a waiter is told at once */
}

static void
test_a_head_scribbled_far_ahead_is_counted_missed_capacity_slots_looked_at(
    void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    CHECK(append_many(&t.v, 3));
    ring_reader r;
    ring_reader_init(&r, &t.v, 1); /* at 0 */
    atomic_store(t.v.head, UINT64_MAX);
    uint64_t e[WORDS], seq = 99;
    int got = ring_read_next(&r, &t.v, e, &seq);
    ring_free(&t);
    /* No slot's stamp names an entry near 2^64: all missed, in one call
     * that looked at 4 slots. */
    CHECK(got == RING_NOTHING && seq == 99);
    CHECK(r.next == UINT64_MAX && r.missed == UINT64_MAX);
}

static void
test_a_scribbled_stamp_makes_its_entry_missed_never_torn(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    CHECK(append_many(&t.v, 3));
    atomic_store(ring_stamp(&t.v, 1), 0x5555555555555555ULL);
    ring_reader r;
    ring_reader_init(&r, &t.v, 1);
    struct tally tl = {0};
    drain(&r, &t.v, &tl, 0);
    ring_free(&t);
    CHECK(tl.delivered == 2 && tl.first == 0 && tl.last == 2);
    CHECK(r.missed == 1 && tl.torn == 0 && tl.unaccounted == 0);
}

static void
test_a_writer_appends_after_a_head_scribbled_backwards_in_its_own_slots(
    void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    CHECK(append_many(&t.v, 6));
    atomic_store(t.v.head, 1);
    uint64_t n = 0;
    CHECK(append_one(&t.v, &n) == 0);
    ring_reader r;
    ring_reader_init_last(&r, &t.v, 1);
    uint64_t e[WORDS], seq = 99;
    int got = ring_read_next(&r, &t.v, e, &seq);
    ring_free(&t);
    CHECK(n == 1);
    CHECK(got == RING_ENTRY && seq == 1 && is_entry(e, 1));
}

/* ==== waiting for an entry ==== */

static void
test_ring_wait_returns_at_once_while_an_entry_is_available(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    ring_reader r;
    ring_reader_init(&r, &t.v, 0);
    CHECK(append_many(&t.v, 1));
    int err = ring_wait(&r, &t.v, 0, NULL, 0);
    ring_free(&t);
    CHECK(err == 0);
}

static void
test_ring_wait_times_out_when_nothing_is_appended(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    CHECK(append_many(&t.v, 2));
    ring_reader r;
    ring_reader_init(&r, &t.v, 0);
    int looked = ring_wait(&r, &t.v, 0, NULL, 0);
    int waited = ring_wait(&r, &t.v, 20 * MS, NULL, 0);
    ring_free(&t);
    CHECK(looked == ETIMEDOUT && waited == ETIMEDOUT);
}

static void
test_ring_wait_is_cancelled_by_its_cancel_flag(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    ring_reader r;
    ring_reader_init(&r, &t.v, 0);
    _Atomic uint32_t cancel = 1;
    int err = ring_wait(&r, &t.v, GIVE_UP_NS, &cancel, 0);
    ring_free(&t);
    CHECK(err == ECANCELED);
}

struct ring_waiter {
    const ring_view *v;
    ring_reader r;
    pthread_t thread;
    int err;
    atomic_int waiting;
};

static void *
ring_waiter_main(void *arg)
{
    struct ring_waiter *w = arg;
    atomic_store(&w->waiting, 1);
    w->err = ring_wait(&w->r, w->v, GIVE_UP_NS, NULL, 0);
    return NULL;
}

static void
test_ring_wait_is_woken_by_an_append_from_another_thread(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    struct ring_waiter w = {.v = &t.v};
    ring_reader_init(&w.r, &t.v, 0);
    CHECK(pthread_create(&w.thread, NULL, ring_waiter_main, &w) == 0);
    while (!atomic_load(&w.waiting)) {
        sched_yield();
    }
    sleep_ms(20); /* asleep, most likely; either way it must return */
    int64_t appended_at = now_ns();
    int appended = append_many(&t.v, 1);
    pthread_join(w.thread, NULL);
    int64_t took = now_ns() - appended_at;
    ring_free(&t);
    CHECK(appended);
    CHECK(w.err == 0);
    /* A lost wake-up would show as a waiter's nap (seqlock.h) */
    CHECK(took < SEQLOCK_WAITER_NAP_MS * MS / 2);
}

static void
append_after_a_nap(void *arg)
{
    struct test_ring *t = arg;
    sleep_ms(20);
    CHECK(append_many(&t->v, 1));
}

static void
test_ring_wait_is_woken_by_an_append_from_another_process(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    ring_reader r;
    ring_reader_init(&r, &t.v, 0);
    pid_t pid = start_child(append_after_a_nap, &t);
    int err = ring_wait(&r, &t.v, GIVE_UP_NS, NULL, 0);
    uint64_t e[WORDS], seq = 99;
    int got = ring_read_next(&r, &t.v, e, &seq);
    int passed = child_passed(pid);
    ring_free(&t);
    CHECK(passed);
    CHECK(err == 0);
    CHECK(got == RING_ENTRY && seq == 0 && is_entry(e, 0));
}

static void
test_ring_wait_sees_an_entry_whose_writer_died_before_waking_anyone(void)
{
    struct test_ring t;
    CHECK(ring_new(&t, 4));
    struct ring_waiter w = {.v = &t.v};
    ring_reader_init(&w.r, &t.v, 0);
    CHECK(pthread_create(&w.thread, NULL, ring_waiter_main, &w) == 0);
    while (!atomic_load(&w.waiting)) {
        sched_yield();
    }
    /* It dies after storing head, inside its section: no wake-up. */
    struct dying_writer d = {&t, AFTER_HEAD};
    pid_t pid = start_child(append_until_killed, &d);
    for (int i = 0; i < 5000 && !atomic_load(t.step); i++) {
        sleep_ms(1);
    }
    int killed = kill_child(pid);
    pthread_join(w.thread, NULL);
    uint64_t e[WORDS], seq = 99;
    int got = ring_read_next(&w.r, &t.v, e, &seq);
    ring_free(&t);
    CHECK(killed);
    CHECK(w.err == 0); /* not ETIMEDOUT: seen within a nap */
    CHECK(got == RING_ENTRY && seq == 0 && is_entry(e, 0));
}

/* ---- registration ---- */

static const struct test tests[] = {
    TEST(test_ring_size_is_0_for_no_slots_no_entry_bytes_or_an_overflow,
         PLAIN),
    TEST(test_ring_size_is_header_layout_head_line_and_a_stamped_slot_per_entry,
         PLAIN),
    TEST(test_ring_init_refuses_a_geometry_ring_size_refuses, PLAIN),
    TEST(test_a_new_ring_matches_its_geometry_and_is_empty, PLAIN),
    TEST(test_ring_matches_says_no_magic_before_ring_init, PLAIN),
    TEST(test_ring_matches_refuses_a_record, PLAIN),
    TEST(test_ring_matches_names_another_version, PLAIN),
    TEST(test_ring_matches_names_another_lock_abi, PLAIN),
    TEST(test_ring_matches_names_a_broken_lock, PLAIN),
    TEST(test_ring_matches_names_other_fields, PLAIN),
    TEST(test_ring_matches_names_another_capacity, PLAIN),
    TEST(test_ring_matches_says_too_small_for_memory_ending_before_the_last_slot,
         PLAIN),
    TEST(test_a_ring_view_never_reads_its_geometry_from_the_header, PLAIN),
    TEST(test_appended_entries_are_read_in_order_under_consecutive_numbers,
         PLAIN),
    TEST(test_each_append_steps_the_count_by_2, PLAIN),
    TEST(test_a_new_reader_starts_after_the_newest_entry, PLAIN),
    TEST(test_a_reader_from_the_oldest_starts_at_the_first_entry_of_a_ring_not_full,
         PLAIN),
    TEST(test_a_reader_from_the_oldest_starts_capacity_entries_back_in_a_full_ring,
         PLAIN),
    TEST(test_a_reader_of_the_last_n_gets_the_newest_n_entries_at_most_capacity,
         PLAIN),
    TEST(test_a_lapped_reader_gets_the_retained_entries_and_counts_the_rest_missed,
         PLAIN),
    TEST(test_a_reader_below_a_head_it_loaded_stops_there_and_skips_a_lap_behind_it,
         PLAIN),
    TEST(test_an_entry_is_not_delivered_before_its_append_closes, PLAIN),
    TEST(test_an_entry_whose_slot_a_writer_has_opened_is_counted_missed,
         PLAIN),
    TEST(test_a_rolled_back_append_is_never_delivered_and_its_number_is_reused,
         PLAIN),
    TEST(test_ring_open_append_without_the_lock_word_is_eperm, PLAIN),
    TEST(test_a_reader_racing_a_writer_gets_whole_entries_or_counts_misses,
         PLAIN),
    TEST(test_a_writer_killed_mid_entry_is_never_delivered_and_counted_a_recovery,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_a_writer_killed_with_its_entry_complete_but_uncounted_is_a_recovery,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_a_writer_killed_after_storing_head_has_delivered_its_entry,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_a_writer_killed_before_touching_its_slot_discards_nothing,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_ring_close_dead_section_discards_the_half_entry_and_closes,
         FORKS_OR_SIGNALS | ROBUST_LIST),
    TEST(test_a_read_only_reader_reads_and_waits_writing_nothing, PLAIN),
    TEST(test_a_head_below_the_reader_is_rewound_and_leaves_the_reader_alone,
         PLAIN),
    TEST(test_a_head_scribbled_far_ahead_is_counted_missed_capacity_slots_looked_at,
         PLAIN),
    TEST(test_a_scribbled_stamp_makes_its_entry_missed_never_torn, PLAIN),
    TEST(test_a_writer_appends_after_a_head_scribbled_backwards_in_its_own_slots,
         PLAIN),
    TEST(test_ring_wait_returns_at_once_while_an_entry_is_available, PLAIN),
    TEST(test_ring_wait_times_out_when_nothing_is_appended, PLAIN),
    TEST(test_ring_wait_is_cancelled_by_its_cancel_flag, PLAIN),
    TEST(test_ring_wait_is_woken_by_an_append_from_another_thread, PLAIN),
    TEST(test_ring_wait_is_woken_by_an_append_from_another_process,
         FORKS_OR_SIGNALS),
    TEST(test_ring_wait_sees_an_entry_whose_writer_died_before_waking_anyone,
         FORKS_OR_SIGNALS),
};
REGISTER_TESTS(tests)
