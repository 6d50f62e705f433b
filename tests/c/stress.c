/*
 * stress.c - a ck_sequence-style validator for seqlock.h
 *
 * Writers keep an 8-word record in the form word[i] = a + i*K, each write
 * advancing a by one under write_seqlock(); readers copy the record in the
 * canonical read_seqbegin()/read_seqretry() loop and check the form on every
 * snapshot the loop accepts.  A snapshot that passes read_seqretry() but
 * breaks the form is torn: the seqlock failed.  Also checked:
 *   - each reader sees a never decrease (no snapshot older than one it
 *     already accepted);
 *   - at the end a equals the total number of writes (the writers excluded
 *     each other: no lost update);
 *   - every writer made progress, and readers got snapshots through.
 * The count of copies that read_seqretry() rejected AND that really were
 * inconsistent shows that the run exercised tearing at all.
 *
 * usage: stress [seconds [readers]]   (defaults: 1 second, 4 readers)
 */
#define _GNU_SOURCE
#include "seqlock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { WORDS = 8, WRITERS = 2, MAX_READERS = 64 };
#define K 0x9e3779b97f4a7c15ULL /* any odd constant; sums wrap mod 2^64 */

static seqlock_t lock = SEQLOCK_UNLOCKED;
static seqlock_word_t record[WORDS]; /* set to a = 0 before the start */
static atomic_int stop;
static pthread_barrier_t start_line;

struct reader {
    pthread_t thread;
    uint64_t reads;         /* snapshots accepted */
    uint64_t retries;       /* copies rejected by read_seqretry() */
    uint64_t torn_rejected; /* rejected copies that were in fact torn */
    uint64_t torn;          /* accepted snapshots that were torn: failure */
    uint64_t backwards;     /* accepted snapshots older than the last one */
};

struct writer {
    pthread_t thread;
    uint64_t writes;
};

static void
make_record(uint64_t out[WORDS], uint64_t a)
{
    for (int i = 0; i < WORDS; i++) {
        out[i] = a + (uint64_t)i * K;
    }
}

static int
well_formed(const uint64_t r[WORDS])
{
    for (int i = 1; i < WORDS; i++) {
        if (r[i] != r[0] + (uint64_t)i * K) {
            return 0;
        }
    }
    return 1;
}

static void *
reader_main(void *arg)
{
    struct reader *rd = arg;
    uint64_t last_a = 0;
    pthread_barrier_wait(&start_line);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        uint64_t snap[WORDS];
        unsigned seq;
        for (;;) {
            seq = read_seqbegin(&lock);
            seqlock_read_copy(snap, record, sizeof snap);
            if (!read_seqretry(&lock, seq)) {
                break;
            }
            rd->retries++;
            rd->torn_rejected += !well_formed(snap);
        }
        rd->reads++;
        if (!well_formed(snap)) {
            rd->torn++;
        }
        if (snap[0] < last_a) {
            rd->backwards++;
        }
        last_a = snap[0];
    }
    return NULL;
}

static void *
writer_main(void *arg)
{
    struct writer *wr = arg;
    pthread_barrier_wait(&start_line);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        uint64_t cur[WORDS], next[WORDS];
        write_seqlock(&lock);
        /* The lock holder may read the data directly: no writer races. */
        seqlock_read_copy(cur, record, sizeof cur);
        make_record(next, cur[0] + 1);
        seqlock_write_copy(record, next, sizeof next);
        write_sequnlock(&lock);
        wr->writes++;
        /* Leave the lock free for a moment, or two writers on two cores
         * could keep the count odd nearly all the time. */
        if (wr->writes % 64 == 0) {
            sched_yield();
        }
    }
    return NULL;
}

int
main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    int nreaders = argc > 2 ? atoi(argv[2]) : 4;
    if (argc > 3 || seconds <= 0 || nreaders < 1 || nreaders > MAX_READERS) {
        fprintf(stderr, "usage: %s [seconds [readers (1..%d)]]\n", argv[0],
                MAX_READERS);
        return 2;
    }
    /* A deadlock must fail the run, not hang it. */
    alarm((unsigned)seconds + 60);

    uint64_t initial[WORDS];
    make_record(initial, 0);
    seqlock_write_copy(record, initial, sizeof initial);

    static struct reader readers[MAX_READERS];
    static struct writer writers[WRITERS];
    pthread_barrier_init(&start_line, NULL, (unsigned)(nreaders + WRITERS + 1));
    for (int i = 0; i < nreaders; i++) {
        if (pthread_create(&readers[i].thread, NULL, reader_main,
                           &readers[i]) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    for (int i = 0; i < WRITERS; i++) {
        if (pthread_create(&writers[i].thread, NULL, writer_main,
                           &writers[i]) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    pthread_barrier_wait(&start_line);
    struct timespec run = {(time_t)seconds,
                           (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&run, &run) != 0) {
    }
    atomic_store(&stop, 1);

    struct reader sum = {0};
    for (int i = 0; i < nreaders; i++) {
        pthread_join(readers[i].thread, NULL);
        sum.reads += readers[i].reads;
        sum.retries += readers[i].retries;
        sum.torn_rejected += readers[i].torn_rejected;
        sum.torn += readers[i].torn;
        sum.backwards += readers[i].backwards;
    }
    uint64_t writes = 0;
    int idle_writer = 0;
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(writers[i].thread, NULL);
        writes += writers[i].writes;
        idle_writer |= writers[i].writes == 0;
    }
    pthread_barrier_destroy(&start_line);

    uint64_t final[WORDS];
    seqlock_read_copy(final, record, sizeof final);
    int lost_update = final[0] != writes || !well_formed(final);

    printf("stress: reads=%llu retries=%llu writes=%llu (%llu+%llu) "
           "torn=%llu torn_rejected=%llu backwards=%llu readers=%d "
           "seconds=%g\n",
           (unsigned long long)sum.reads, (unsigned long long)sum.retries,
           (unsigned long long)writes,
           (unsigned long long)writers[0].writes,
           (unsigned long long)writers[1].writes,
           (unsigned long long)sum.torn,
           (unsigned long long)sum.torn_rejected,
           (unsigned long long)sum.backwards, nreaders, seconds);

    int failed = 0;
    if (sum.torn) {
        fprintf(stderr, "stress: FAIL: %llu torn snapshots accepted\n",
                (unsigned long long)sum.torn);
        failed = 1;
    }
    if (sum.backwards) {
        fprintf(stderr, "stress: FAIL: %llu snapshots went backwards\n",
                (unsigned long long)sum.backwards);
        failed = 1;
    }
    if (lost_update) {
        fprintf(stderr, "stress: FAIL: record says a=%llu after %llu writes\n",
                (unsigned long long)final[0], (unsigned long long)writes);
        failed = 1;
    }
    if (idle_writer) {
        fprintf(stderr, "stress: FAIL: a writer made no progress\n");
        failed = 1;
    }
    if (sum.reads == 0) {
        fprintf(stderr, "stress: FAIL: no reader got a snapshot through\n");
        failed = 1;
    }
    printf("%d passed, %d failed\n", !failed, failed);
    return failed;
}
