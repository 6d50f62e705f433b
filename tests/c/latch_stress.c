/*
 * latch_stress.c - a ck_sequence-style validator for seqlock.h's latch
 * (seqcount_latch_t: readers that never wait)
 *
 * Two writer threads, serialised by a lock of their own as the header asks
 * of a latch's caller, keep a record of WORDS words in the form
 * word[i] = a + i*K in two copies, data[0] and data[1].  Each update
 * advances a by one exactly as the header documents:
 *
 *     write_seqcount_latch_begin(&latch);    readers -> data[1]
 *     store data[0] word by word, slowly;
 *     write_seqcount_latch(&latch);          readers -> data[0]
 *     store data[1] word by word, slowly;
 *     write_seqcount_latch_end(&latch);
 *
 * "Slowly": a short spin after each word, so that a reader that reads
 * the copy being stored (one that read the count just before a switch)
 * would likely see it half written.  Readers loop as documented (read the
 * count, copy data[count & 1], retry while the count changed) and check
 * every snapshot the loop accepts:
 *   - it is well formed (a torn snapshot accepted: the latch failed);
 *   - it is the copy the count names: with the count starting at c0 = 2*a0,
 *     the copy read under count c holds a = c/2 exactly (another, well
 *     formed copy means the wrong copy was read, or on a weakly ordered CPU
 *     a missing fence let old words through: "stale");
 *   - a never decreases from one accepted snapshot to the next.
 * Rejected copies that really were torn are counted too, to show that the
 * run exercised tearing at all.  At the end both copies hold a0 + the
 * number of updates, and the count is c0 + twice that (no lost update).
 *
 * What distinguishes a latch from a seqlock: readers never wait.  Every
 * PAUSE_EVERY_MS a writer stops for PAUSE_MS in the middle of storing
 * data[0] (the count odd, data[0] half written, the writers' lock held).
 * Reads that began and completed within one pause are counted (there must
 * be some) and must have returned the state before the paused update; the
 * read rate within pauses is printed beside the rate otherwise (about
 * equal: nothing waits), with the fewest pauses any one reader completed
 * reads in.  The longest gap between one reader's consecutive accepted
 * reads is reported, not checked: a seqlock's readers would wait out each
 * pause, a gap of PAUSE_MS, but with more spinning threads than cores a
 * latch reader is also descheduled for tens of milliseconds now and then,
 * which is the scheduler's doing, not the latch's.
 *
 * Phase 1 reads with the kernel's unsigned forms (read_seqcount_latch,
 * read_seqcount_latch_retry) and serialises writers with a plain pthread
 * mutex; phase 2 reads with the 64-bit forms (seqcount_latch_read64,
 * seqcount_latch_retry64) and serialises writers with a seqlock's lock word
 * (seqlock_lock_excl_timed).  Both start the count just below 2^32, so it
 * crosses that boundary (the unsigned values wrap to 0) at once.
 *
 * usage: latch_stress [seconds [readers]]  (defaults: 1 second per phase,
 * 4 readers).  Ends with "N passed, M failed" (one per phase).
 */
#define _GNU_SOURCE
#include "seqlock.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { WORDS = 8, WRITERS = 2, MAX_READERS = 64 };
#define RECORD_WORDS WORDS
#include "record_form.h"
#include "validator.h"
#define COUNT_START ((UINT64_C(1) << 32) - 6) /* 2^32 after three updates */
#define PAUSE_MS 50
#define PAUSE_EVERY_MS 200
#define SPINS 100 /* between word stores */

/* The record's words, in seqlock_word_t units (64-bit words on 64-bit
 * machines, two 32-bit ones elsewhere). */
#define COPY_WORDS SEQLOCK_WORDS(WORDS * sizeof(uint64_t))

static seqcount_latch_t latch = SEQCNT_LATCH_ZERO(latch);
static seqlock_word_t data[2][COPY_WORDS];
static atomic_int stop;
static pthread_barrier_t start_line;

/* How writers exclude each other: phase 1 a plain mutex, phase 2 a
 * seqlock's lock word. */
static pthread_mutex_t writers_mutex = PTHREAD_MUTEX_INITIALIZER;
static seqlock_t writers_seqlock;
static int writers_use_seqlock;

/* Kept by the writer holding the writers' lock; plain on purpose, so that
 * ThreadSanitizer checks that the lock really excludes. */
static uint64_t updates;      /* completed since the phase began */
static int64_t next_pause_ns; /* when a writer next pauses mid-update */
static uint64_t pauses;
static int64_t paused_ns;     /* their total length */

/* While a writer is paused mid-update: 2*a + 1, a being the complete state
 * readers should see meanwhile; 0 otherwise.  Each odd value is stored
 * once (one pause per update at most), so a reader that loads the same odd
 * value before and after a read knows the read fell within that pause. */
static _Atomic uint64_t pause_word;

struct reader {
    pthread_t thread;
    int wide;                /* use the 64-bit reads */
    uint64_t reads;          /* snapshots accepted */
    uint64_t retries;        /* copies rejected by the retry check */
    uint64_t torn_rejected;  /* rejected copies that were in fact torn */
    uint64_t torn;           /* accepted snapshots that were torn: failure */
    uint64_t stale;          /* accepted, well formed, not the copy the
                                count names: failure */
    uint64_t backwards;      /* accepted snapshots older than the last */
    uint64_t pause_reads;    /* reads begun and completed in one pause */
    uint64_t pause_wrong;    /* of those, not the pre-pause state: failure */
    uint64_t pauses_seen;    /* pauses this reader completed reads in */
    int64_t longest_gap_ns;  /* between consecutive accepted reads */
};

struct writer {
    pthread_t thread;
    uint64_t writes;
};

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
sleep_ns(int64_t ns)
{
    struct timespec run = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
    while (nanosleep(&run, &run) != 0) {
    }
}



/* ---- writers ---- */

static void
writers_lock(void)
{
    if (writers_use_seqlock) {
        if (seqlock_lock_excl_timed(&writers_seqlock, -1) != 0) {
            seqlock_die_("latch_stress: cannot take the writers' seqlock");
        }
    }
    else {
        pthread_mutex_lock(&writers_mutex);
    }
}

static void
writers_unlock(void)
{
    if (writers_use_seqlock) {
        if (seqlock_unlock(&writers_seqlock) != 0) {
            seqlock_die_("latch_stress: cannot release the writers' seqlock");
        }
    }
    else {
        pthread_mutex_unlock(&writers_mutex);
    }
}

/* Stop mid-update for PAUSE_MS; readers meanwhile should see old_a. */
static void
pause_writer(uint64_t old_a)
{
    int64_t start = now_ns();
    atomic_store_explicit(&pause_word, 2 * old_a + 1, memory_order_release);
    sleep_ns((int64_t)PAUSE_MS * 1000000);
    atomic_store_explicit(&pause_word, 0, memory_order_release);
    paused_ns += now_ns() - start;
    pauses++;
}

/* Store next[] into one copy word by word, with a spin after each word;
 * with pause, stop halfway for PAUSE_MS. */
static void
store_slowly(seqlock_word_t *copy, const uint64_t next[WORDS], int pause)
{
    for (int i = 0; i < WORDS; i++) {
        seqlock_write_copy(&copy[SEQLOCK_WORDS(i * sizeof(uint64_t))],
                           &next[i], sizeof next[i]);
        if (pause && i == WORDS / 2 - 1) {
            pause_writer(next[0] - 1);
        }
        for (volatile int spin = 0; spin < SPINS; spin++) {
        }
    }
}

static void *
writer_main(void *arg)
{
    struct writer *wr = arg;
    pthread_barrier_wait(&start_line);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        uint64_t next[WORDS];
        writers_lock();
        make_record(next, COUNT_START / 2 + updates + 1);
        int pause = now_ns() >= next_pause_ns;
        write_seqcount_latch_begin(&latch);
        store_slowly(data[0], next, pause);
        write_seqcount_latch(&latch);
        store_slowly(data[1], next, 0);
        write_seqcount_latch_end(&latch);
        updates++;
        if (pause) {
            next_pause_ns = now_ns() + (int64_t)PAUSE_EVERY_MS * 1000000;
        }
        writers_unlock();
        wr->writes++;
        /* Leave the lock to the other writer now and then (a yield every
         * time would let the spinning readers starve the writers). */
        if (wr->writes % 1024 == 0) {
            sched_yield();
        }
    }
    return NULL;
}

/* ---- readers ---- */

static void
reject_snapshot(struct reader *rd, const uint64_t snap[WORDS])
{
    rd->retries++;
    rd->torn_rejected += !well_formed(snap);
}

/* One read with the kernel's unsigned forms, as documented; the accepted
 * copy goes to snap, and a's low 31 bits as the count names them are
 * returned. */
static uint64_t
read_narrow(struct reader *rd, uint64_t snap[WORDS])
{
    unsigned seq;
    for (;;) {
        seq = read_seqcount_latch(&latch);
        seqlock_read_copy(snap, data[seq & 1], WORDS * sizeof snap[0]);
        if (!read_seqcount_latch_retry(&latch, seq)) {
            return seq >> 1;
        }
        reject_snapshot(rd, snap);
    }
}

/* The same with the 64-bit forms; returns a as the whole count names it. */
static uint64_t
read_wide(struct reader *rd, uint64_t snap[WORDS])
{
    uint64_t seq;
    for (;;) {
        seq = seqcount_latch_read64(&latch);
        seqlock_read_copy(snap, data[seq & 1], WORDS * sizeof snap[0]);
        if (!seqcount_latch_retry64(&latch, seq)) {
            return seq >> 1;
        }
        reject_snapshot(rd, snap);
    }
}

static void *
reader_main(void *arg)
{
    struct reader *rd = arg;
    /* The unsigned count names a's low 31 bits only. */
    uint64_t named_mask = rd->wide ? UINT64_MAX : 0x7fffffffu;
    uint64_t last_a = 0, last_pause = 0;
    pthread_barrier_wait(&start_line);
    int64_t last_read_ns = now_ns();
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        uint64_t snap[WORDS];
        uint64_t pause_before = atomic_load_explicit(&pause_word,
                                                     memory_order_acquire);
        uint64_t named = rd->wide ? read_wide(rd, snap)
                                  : read_narrow(rd, snap);
        uint64_t pause_after = atomic_load_explicit(&pause_word,
                                                    memory_order_acquire);
        int64_t t = now_ns();
        if (t - last_read_ns > rd->longest_gap_ns) {
            rd->longest_gap_ns = t - last_read_ns;
        }
        last_read_ns = t;

        rd->reads++;
        if (!well_formed(snap)) {
            rd->torn++;
        }
        else if ((snap[0] & named_mask) != named) {
            rd->stale++;
        }
        if (snap[0] < last_a) {
            rd->backwards++;
        }
        last_a = snap[0];
        /* Begun and completed while one writer stood paused mid-update:
         * the count was that update's odd one throughout, so the read must
         * have returned the complete state from before it. */
        if ((pause_before & 1) && pause_after == pause_before) {
            rd->pause_reads++;
            rd->pause_wrong += snap[0] != pause_before >> 1;
            rd->pauses_seen += pause_before != last_pause;
            last_pause = pause_before;
        }
    }
    return NULL;
}

/* ---- a phase ---- */

static int
run_phase(const char *name, int wide, double seconds, int nreaders)
{
    static struct reader readers[MAX_READERS];
    static struct writer writers[WRITERS];
    uint64_t initial[WORDS];

    memset(readers, 0, sizeof readers);
    memset(writers, 0, sizeof writers);
    atomic_store(&stop, 0);
    atomic_store(&pause_word, 0);
    updates = 0;
    pauses = 0;
    paused_ns = 0;
    next_pause_ns = 0; /* the first update pauses */
    writers_use_seqlock = wide;
    if (wide && seqlock_init(&writers_seqlock) != 0) {
        fprintf(stderr, "%s: seqlock_init failed\n", name);
        exit(1);
    }
    seqcount_latch_init(&latch);
    atomic_store(&latch.sequence, COUNT_START); /* set the count directly */
    make_record(initial, COUNT_START / 2);
    seqlock_write_copy(data[0], initial, sizeof initial);
    seqlock_write_copy(data[1], initial, sizeof initial);

    pthread_barrier_init(&start_line, NULL,
                         (unsigned)(nreaders + WRITERS + 1));
    for (int i = 0; i < nreaders; i++) {
        readers[i].wide = wide;
        if (pthread_create(&readers[i].thread, NULL, reader_main,
                           &readers[i]) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
    for (int i = 0; i < WRITERS; i++) {
        if (pthread_create(&writers[i].thread, NULL, writer_main,
                           &writers[i]) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
    pthread_barrier_wait(&start_line);
    int64_t started_ns = now_ns();
    sleep_ns((int64_t)(seconds * 1e9));
    atomic_store(&stop, 1);

    struct reader sum = {0};
    uint64_t fewest_pauses_seen = UINT64_MAX;
    for (int i = 0; i < nreaders; i++) {
        struct reader *rd = &readers[i];
        pthread_join(rd->thread, NULL);
        sum.reads += rd->reads;
        sum.retries += rd->retries;
        sum.torn_rejected += rd->torn_rejected;
        sum.torn += rd->torn;
        sum.stale += rd->stale;
        sum.backwards += rd->backwards;
        sum.pause_reads += rd->pause_reads;
        sum.pause_wrong += rd->pause_wrong;
        if (rd->longest_gap_ns > sum.longest_gap_ns) {
            sum.longest_gap_ns = rd->longest_gap_ns;
        }
        if (rd->pauses_seen < fewest_pauses_seen) {
            fewest_pauses_seen = rd->pauses_seen;
        }
    }
    uint64_t writes = 0;
    int idle_writer = 0;
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(writers[i].thread, NULL);
        writes += writers[i].writes;
        idle_writer |= writers[i].writes == 0;
    }
    int64_t ran_ns = now_ns() - started_ns;
    pthread_barrier_destroy(&start_line);
    if (wide) {
        seqlock_destroy(&writers_seqlock);
    }

    uint64_t final[2][WORDS];
    seqlock_read_copy(final[0], data[0], sizeof final[0]);
    seqlock_read_copy(final[1], data[1], sizeof final[1]);
    uint64_t count = seqcount_latch_read64(&latch);
    int lost_update = updates != writes || count != COUNT_START + 2 * writes
                      || !well_formed(final[0]) || !well_formed(final[1])
                      || final[0][0] != COUNT_START / 2 + writes
                      || final[1][0] != final[0][0];

    /* Reads per second while a writer stood paused mid-update, and
     * otherwise: about equal if readers never wait. */
    double paused_s = (double)paused_ns / 1e9;
    double other_s = (double)(ran_ns - paused_ns) / 1e9;
    double rate_paused = paused_s > 0 ? (double)sum.pause_reads / paused_s
                                      : 0;
    double rate_other = other_s > 0
                            ? (double)(sum.reads - sum.pause_reads) / other_s
                            : 0;

    printf("%s: reads=%llu retries=%llu torn_rejected=%llu torn=%llu "
           "stale=%llu backwards=%llu writes=%llu (%llu+%llu) "
           "pauses=%llux%dms reads_in_pauses=%llu (every reader in >= %llu) "
           "reads/s in pauses=%.3gM otherwise=%.3gM longest_gap_ms=%.3f "
           "readers=%d seconds=%g\n",
           name, (unsigned long long)sum.reads,
           (unsigned long long)sum.retries,
           (unsigned long long)sum.torn_rejected,
           (unsigned long long)sum.torn, (unsigned long long)sum.stale,
           (unsigned long long)sum.backwards, (unsigned long long)writes,
           (unsigned long long)writers[0].writes,
           (unsigned long long)writers[1].writes,
           (unsigned long long)pauses, PAUSE_MS,
           (unsigned long long)sum.pause_reads,
           (unsigned long long)fewest_pauses_seen, rate_paused / 1e6,
           rate_other / 1e6, (double)sum.longest_gap_ns / 1e6, nreaders,
           seconds);

    int failed = 0;
    if (sum.torn) {
        fprintf(stderr, "%s: FAIL: %llu torn snapshots accepted\n", name,
                (unsigned long long)sum.torn);
        failed = 1;
    }
    if (sum.stale) {
        fprintf(stderr, "%s: FAIL: %llu snapshots were not the copy their "
                "count names\n", name, (unsigned long long)sum.stale);
        failed = 1;
    }
    if (sum.backwards) {
        fprintf(stderr, "%s: FAIL: %llu snapshots went backwards\n", name,
                (unsigned long long)sum.backwards);
        failed = 1;
    }
    if (sum.reads == 0) {
        fprintf(stderr, "%s: FAIL: no reader got a snapshot through\n", name);
        failed = 1;
    }
    if (pauses == 0 || sum.pause_reads == 0) {
        fprintf(stderr, "%s: FAIL: no read completed while a writer stood "
                "paused mid-update (%llu pauses)\n", name,
                (unsigned long long)pauses);
        failed = 1;
    }
    if (sum.pause_wrong) {
        fprintf(stderr, "%s: FAIL: %llu reads during a pause did not return "
                "the state from before the paused update\n", name,
                (unsigned long long)sum.pause_wrong);
        failed = 1;
    }
    if (lost_update) {
        fprintf(stderr, "%s: FAIL: after %llu writes (%llu counted by the "
                "lock holders) the count is %llu and the copies say a=%llu "
                "and a=%llu\n", name, (unsigned long long)writes,
                (unsigned long long)updates, (unsigned long long)count,
                (unsigned long long)final[0][0],
                (unsigned long long)final[1][0]);
        failed = 1;
    }
    if (idle_writer) {
        fprintf(stderr, "%s: FAIL: a writer made no progress\n", name);
        failed = 1;
    }
    return failed;
}

int
main(int argc, char **argv)
{
    struct validator_args a = validator_args(argc, argv, MAX_READERS);
    /* A deadlock must fail the run, not hang it. */
    alarm((unsigned)(4 * a.seconds) + 60);
    setvbuf(stdout, NULL, _IOLBF, 0);

    int failed = run_phase("latch_stress", 0, a.seconds, a.readers);
    failed += run_phase("latch_stress (64-bit)", 1, a.seconds, a.readers);
    return validator_summary(failed, 0);
}
