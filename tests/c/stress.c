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
 * A second phase, as long again, kills writers mid-section: one writer
 * process at a time updates a record in shared memory (record.h: an undo
 * copy of the data is saved before each change), word by word; it
 * SIGKILLs itself after a random word of one of its first sections, or
 * the main thread SIGKILLs it at a random moment, and starts the next, whose
 * seqlock_write_lock_timed() hears EOWNERDEAD, puts the undo copy back
 * (record_recover()) and closes that section before its own writes.  Reader threads check every
 * snapshot they accept, as above; one told EOWNERDEAD waits for the repair.
 * Also checked: some sections were recovered, and the record ends well
 * formed, with a no less than the writes known to have completed.
 *
 * usage: stress [seconds [readers]]   (defaults: 1 second, 4 readers)
 */
#define _GNU_SOURCE
#include "record.h"
#include "seqlock.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { WORDS = 8, WRITERS = 2, MAX_READERS = 64 };
#define RECORD_WORDS WORDS
#include "record_form.h"
#include "validator.h"

static seqlock_t lock = SEQLOCK_UNLOCKED;
static seqlock_word_t record[WORDS]; /* set to a = 0 before the start */
static atomic_int stop;
static pthread_barrier_t start_line;

struct reader {
    pthread_t thread;
    const record_view *rec; /* phase 2's record (NULL in phase 1) */
    uint64_t mid_section;   /* phase 2: reads accepted while a section
                               (live or dead) was open: latch readers
                               never wait for it */
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



/* Check a snapshot the reader accepted; *last_a is the previous one's a. */
static void
accept_snapshot(struct reader *rd, const uint64_t snap[WORDS],
                uint64_t *last_a)
{
    rd->reads++;
    if (!well_formed(snap)) {
        rd->torn++;
    }
    if (snap[0] < *last_a) {
        rd->backwards++;
    }
    *last_a = snap[0];
}

static void
reject_snapshot(struct reader *rd, const uint64_t snap[WORDS])
{
    rd->retries++;
    rd->torn_rejected += !well_formed(snap);
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
            reject_snapshot(rd, snap);
        }
        accept_snapshot(rd, snap, &last_a);
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

static void
sleep_seconds(double seconds)
{
    struct timespec run = {(time_t)seconds,
                           (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&run, &run) != 0) {
    }
}

/* Join the readers and add up their counts. */
static struct reader
join_readers(struct reader *readers, int nreaders)
{
    struct reader sum = {0};
    for (int i = 0; i < nreaders; i++) {
        pthread_join(readers[i].thread, NULL);
        sum.mid_section += readers[i].mid_section;
        sum.reads += readers[i].reads;
        sum.retries += readers[i].retries;
        sum.torn_rejected += readers[i].torn_rejected;
        sum.torn += readers[i].torn;
        sum.backwards += readers[i].backwards;
    }
    return sum;
}

/* The failures every phase checks; returns nonzero if any. */
static int
readers_failed(const char *phase, const struct reader *sum)
{
    int failed = 0;
    if (sum->torn) {
        fprintf(stderr, "%s: FAIL: %llu torn snapshots accepted\n", phase,
                (unsigned long long)sum->torn);
        failed = 1;
    }
    if (sum->backwards) {
        fprintf(stderr, "%s: FAIL: %llu snapshots went backwards\n", phase,
                (unsigned long long)sum->backwards);
        failed = 1;
    }
    if (sum->reads == 0) {
        fprintf(stderr, "%s: FAIL: no reader got a snapshot through\n",
                phase);
        failed = 1;
    }
    return failed;
}

/* Phase 1: writer and reader threads on a process-private lock. */
static int
run_threads(double seconds, int nreaders)
{
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
    sleep_seconds(seconds);
    atomic_store(&stop, 1);

    struct reader sum = join_readers(readers, nreaders);
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

    int failed = readers_failed("stress", &sum);
    if (lost_update) {
        fprintf(stderr, "stress: FAIL: record says a=%llu after %llu writes\n",
                (unsigned long long)final[0], (unsigned long long)writes);
        failed = 1;
    }
    if (idle_writer) {
        fprintf(stderr, "stress: FAIL: a writer made no progress\n");
        failed = 1;
    }
    return failed;
}

/* ---- phase 2: writer processes killed mid-section ---- */

#define LAYOUT "a:8Q"

/* The shared mapping: this control block, then the record. */
struct killed_run {
    _Atomic uint64_t sections; /* write sections known to have completed */
    char pad[RECORD_ALIGN - sizeof(uint64_t)];
};

static record_view
record_of(struct killed_run *run)
{
    return record_view_of(run + 1, sizeof LAYOUT - 1,
                          WORDS * sizeof(uint64_t));
}

static void
nap_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* A writer process: write a+1 into copy 0 word by word, yielding between
 * words, then close the section and bring copy 1 up to date; it dies by
 * its own SIGKILL after the die_at-th word it writes.  A dead writer's
 * section it finds is repaired first (record.h). */
static _Noreturn void
write_until_killed(struct killed_run *run, unsigned die_at)
{
    record_view v = record_of(run), *h = &v;
    seqlock_word_t *data = record_copy(h, 0);
    for (;;) {
        int err = seqlock_lock_excl_timed(h->lock, -1);
        if (err == EOWNERDEAD) {
            record_repair(h);
        }
        else if (err != 0) {
            _exit(3);
        }
        seqlock_open_section(h->lock);
        uint64_t cur[WORDS], next[WORDS];
        seqlock_read_copy(cur, data, sizeof cur);
        make_record(next, cur[0] + 1);
        for (int i = 0; i < WORDS; i++) {
            seqlock_write_copy(&data[i], &next[i], sizeof next[i]);
            if (die_at-- == 0) {
                kill(getpid(), SIGKILL);
            }
            sched_yield();
        }
        seqlock_close_section(h->lock);
        record_finish(h);
        seqlock_unlock(h->lock);
        atomic_fetch_add(&run->sections, 1);
    }
}

/* A reader of the record: the latch's, which never waits. */
static void *
record_reader_main(void *arg)
{
    struct reader *rd = arg;
    const seqcount_latch_t *latch = seqlock_latch(rd->rec->lock);
    uint64_t last_a = 0;
    pthread_barrier_wait(&start_line);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        uint64_t snap[WORDS], seq;
        for (;;) {
            seq = seqcount_latch_read64(latch);
            seqlock_read_copy(snap, record_read_copy(rd->rec, seq),
                              sizeof snap);
            if (!seqcount_latch_retry64(latch, seq)) {
                break;
            }
            reject_snapshot(rd, snap);
        }
        rd->mid_section += seq & 1u;
        accept_snapshot(rd, snap, &last_a);
    }
    return NULL;
}

/* Start a writer process that will kill itself within its first four
 * sections; unless it is dead by then, kill it at a random moment within
 * half a millisecond of its first complete section. */
static int
kill_a_writer(struct killed_run *run, unsigned *seed)
{
    uint64_t before = atomic_load(&run->sections);
    unsigned die_at = (unsigned)rand_r(seed) % (4 * WORDS);
    pid_t pid = fork();
    if (pid < 0) {
        return 0;
    }
    if (pid == 0) {
        write_until_killed(run, die_at);
    }
    for (int i = 0; i < 50000 && atomic_load(&run->sections) == before;
         i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            return 1;
        }
        nap_us(20);
    }
    nap_us((long)(rand_r(seed) % 500));
    kill(pid, SIGKILL);
    return waitpid(pid, NULL, 0) == pid;
}

/* Phase 2: take the lock as the last writer would, repairing if need be;
 * the record as it then stands goes to *final. */
static int
repair_and_read(const record_view *h, uint64_t final[WORDS])
{
    int err = seqlock_lock_excl_timed(h->lock, 5LL * 1000 * 1000 * 1000);
    if (err == EOWNERDEAD) {
        if (record_repair(h)) {
            seqlock_close_section(h->lock);
        }
    }
    else if (err != 0) {
        return 0;
    }
    seqlock_read_copy(final, record_copy(h, 0), WORDS * sizeof final[0]);
    seqlock_unlock(h->lock);
    return 1;
}

static int
run_killed_writers(double seconds, int nreaders)
{
    size_t size = sizeof(struct killed_run)
                  + record_size(sizeof LAYOUT - 1, WORDS * sizeof(uint64_t));
    struct killed_run *run = mmap(NULL, size, PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (run == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    record_view v = record_of(run), *h = &v;
    if (record_init(h->header, LAYOUT, sizeof LAYOUT - 1, WORDS * sizeof(uint64_t))
        != 0) {
        fprintf(stderr, "record_init failed\n");
        exit(1);
    }
    uint64_t initial[WORDS];
    make_record(initial, 0);
    seqlock_write_copy(record_copy(h, 0), initial, sizeof initial);
    seqlock_write_copy(record_copy(h, 1), initial, sizeof initial);

    static struct reader readers[MAX_READERS];
    atomic_store(&stop, 0);
    pthread_barrier_init(&start_line, NULL, (unsigned)(nreaders + 1));
    for (int i = 0; i < nreaders; i++) {
        readers[i].rec = h;
        if (pthread_create(&readers[i].thread, NULL, record_reader_main,
                           &readers[i]) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
    pthread_barrier_wait(&start_line);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned seed = (unsigned)getpid();
    uint64_t kills = 0;
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec)
                + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 >= seconds) {
            break;
        }
        if (!kill_a_writer(run, &seed)) {
            perror("fork");
            exit(1);
        }
        kills++;
    }
    uint64_t final[WORDS];
    int repaired = repair_and_read(h, final);
    atomic_store(&stop, 1);
    struct reader sum = join_readers(readers, nreaders);
    pthread_barrier_destroy(&start_line);
    uint64_t sections = atomic_load(&run->sections);
    uint32_t recoveries = atomic_load(&h->header->recoveries);

    printf("stress (killed writers): reads=%llu retries=%llu "
           "mid_section=%llu kills=%llu recoveries=%u sections>=%llu "
           "torn=%llu torn_rejected=%llu backwards=%llu readers=%d\n",
           (unsigned long long)sum.reads, (unsigned long long)sum.retries,
           (unsigned long long)sum.mid_section, (unsigned long long)kills,
           (unsigned)recoveries, (unsigned long long)sections,
           (unsigned long long)sum.torn,
           (unsigned long long)sum.torn_rejected,
           (unsigned long long)sum.backwards, nreaders);

    int failed = readers_failed("stress (killed writers)", &sum);
    if (!repaired || !well_formed(final) || final[0] < sections) {
        fprintf(stderr, "stress (killed writers): FAIL: record says a=%llu "
                "after at least %llu sections%s\n",
                (unsigned long long)final[0], (unsigned long long)sections,
                repaired ? "" : " (no final repair)");
        failed = 1;
    }
    if (recoveries == 0) {
        fprintf(stderr, "stress (killed writers): FAIL: no section was "
                "recovered in %llu kills\n", (unsigned long long)kills);
        failed = 1;
    }
    munmap(run, size);
    return failed;
}

int
main(int argc, char **argv)
{
    struct validator_args a = validator_args(argc, argv, MAX_READERS);
    /* A deadlock must fail the run, not hang it. */
    alarm((unsigned)(2 * a.seconds) + 60);

    int failed = run_threads(a.seconds, a.readers);
    int skipped = killed_writers_skipped("stress (killed writers)");
    if (!skipped) {
        failed += run_killed_writers(a.seconds, a.readers);
    }
    return validator_summary(failed, skipped);
}
