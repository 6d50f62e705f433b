/*
 * ring_stress.c - a validator for ring.h's broadcast ring: every entry
 * appended is delivered to every reader, in order, or counted in its
 * `missed`, exactly; no delivered entry is torn.
 *
 * Writers append entries of WORDS words in record_form.h's form whose
 * first word names the entry's sequence number (a = n * 1000 + 7), word
 * by word with a short spin between words, so that a reader copying a
 * slot a writer is rewriting would likely get a mix.  Readers start at
 * the oldest entry and follow: fast ones (even-numbered) read flat out
 * and wait in ring_wait() when they have caught up; slow ones
 * (odd-numbered) nap between reads so that the writers lap them.  After
 * every read a reader checks:
 *   - a delivered entry is whole and the one its number names (torn: the
 *     per-slot seqlock failed; "wrong": another entry under its number);
 *   - every number is accounted for: the reader's next equals where it
 *     started + entries delivered + entries missed, and a delivered
 *     entry's number is next - 1 (so numbers arrive strictly in order,
 *     each delivered or missed once).
 * At the end, writers stopped, each reader drains the ring and
 * delivered + missed must equal head, the number of entries appended.
 * Also counted: entries overwritten while a reader copied them (the
 * per-slot seqlock's re-check at work).
 *
 * Phase 1: two writer threads on a ring of RING_THREADS_CAPACITY slots in
 * process memory; the writers' count of appends must equal head, and a
 * slow reader must have been lapped (or the phase tested nothing).
 * Phase 2, as long again: writer processes on a ring of
 * RING_KILLED_CAPACITY slots in shared memory, one at a time; each SIGKILLs
 * itself after a random word of one of its first appends, or the main
 * thread SIGKILLs it at a random moment, and the next, told EOWNERDEAD,
 * repairs (ring_open_append(took_over)) and appends under the number the
 * dead one did not deliver.  Also checked: some half-written entries were
 * discarded (recoveries), appends known complete <= head <= those + kills.
 *
 * usage: ring_stress [seconds [readers]]   (defaults: 1 second, 4 readers)
 */
#define _GNU_SOURCE
#include "ring.h"
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

#define LAYOUT "a:8Q"
#define LAYOUT_BYTES ((uint32_t)(sizeof LAYOUT - 1))
#define ENTRY_BYTES ((uint32_t)(WORDS * sizeof(uint64_t)))
#define RING_THREADS_CAPACITY 16
#define RING_KILLED_CAPACITY 4
#define SPINS 20          /* between a writer's word stores */
#define SLOW_NAP_US 200   /* a slow reader's nap between reads */
#define WAIT_NS 2000000LL /* a fast reader's ring_wait() when caught up */

static atomic_int stop;
static pthread_barrier_t start_line;

static uint64_t
a_of(uint64_t n)
{
    return n * 1000 + 7;
}

static void
nap_us(long us)
{
    struct timespec ts = {us / 1000000, us % 1000000 * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static double
seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec)
           + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* ---- readers ---- */

struct reader {
    pthread_t thread;
    const ring_view *v;
    int slow;
    ring_reader r;
    uint64_t start;       /* where it started */
    uint64_t delivered;
    uint64_t torn;        /* delivered, not well formed: failure */
    uint64_t wrong;       /* delivered, well formed, another entry: failure */
    uint64_t unaccounted; /* reads after which the numbers do not add up:
                             failure */
    uint64_t rewound;     /* RING_REWOUND: failure (nobody rewrites head) */
    uint64_t waits;       /* ring_wait() calls */
    uint64_t wait_errors; /* ring_wait() errors other than ETIMEDOUT */
};

/* One ring_read_next(), checked. */
static int
read_checked(struct reader *rd)
{
    uint64_t e[WORDS], seq = UINT64_MAX;
    int got = ring_read_next(&rd->r, rd->v, e, &seq);
    if (got == RING_ENTRY) {
        rd->delivered++;
        if (!well_formed(e)) {
            rd->torn++;
        }
        else if (e[0] != a_of(seq)) {
            rd->wrong++;
        }
        rd->unaccounted += seq + 1 != rd->r.next;
    }
    rd->rewound += got == RING_REWOUND;
    rd->unaccounted += rd->r.next != rd->start + rd->delivered + rd->r.missed;
    return got;
}

static void *
reader_main(void *arg)
{
    struct reader *rd = arg;
    pthread_barrier_wait(&start_line);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        int got = read_checked(rd);
        if (rd->slow) {
            nap_us(SLOW_NAP_US);
        }
        else if (got == RING_NOTHING) {
            rd->waits++;
            int err = ring_wait(&rd->r, rd->v, WAIT_NS, NULL, 0);
            rd->wait_errors += err != 0 && err != ETIMEDOUT;
        }
    }
    return NULL;
}

static void
start_readers(struct reader *readers, int nreaders, const ring_view *v)
{
    memset(readers, 0, (size_t)nreaders * sizeof *readers);
    for (int i = 0; i < nreaders; i++) {
        readers[i].v = v;
        readers[i].slow = i % 2;
        ring_reader_init(&readers[i].r, v, 1);
        readers[i].start = readers[i].r.next;
        if (pthread_create(&readers[i].thread, NULL, reader_main,
                           &readers[i]) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
}

struct totals {
    uint64_t delivered, missed, overwritten, torn, wrong, unaccounted,
        rewound, waits, wait_errors, short_of_head;
    uint64_t slow_missed; /* fewest missed by a slow reader */
    int slow_readers;
    uint64_t fast_delivered, fast_missed; /* the fast readers' share */
};

/* Join the readers (the writers have stopped), let each drain the ring,
 * and add up; short_of_head counts readers whose delivered + missed is
 * not head. */
static struct totals
join_and_drain(struct reader *readers, int nreaders, uint64_t head)
{
    struct totals s = {0};
    s.slow_missed = UINT64_MAX;
    for (int i = 0; i < nreaders; i++) {
        struct reader *rd = &readers[i];
        pthread_join(rd->thread, NULL);
        while (read_checked(rd) == RING_ENTRY) {
        }
        s.short_of_head +=
            rd->start + rd->delivered + rd->r.missed != head;
        s.delivered += rd->delivered;
        s.missed += rd->r.missed;
        s.overwritten += rd->r.overwritten;
        s.torn += rd->torn;
        s.wrong += rd->wrong;
        s.unaccounted += rd->unaccounted;
        s.rewound += rd->rewound;
        s.waits += rd->waits;
        s.wait_errors += rd->wait_errors;
        if (!rd->slow) {
            s.fast_delivered += rd->delivered;
            s.fast_missed += rd->r.missed;
        }
        else {
            s.slow_readers++;
            if (rd->r.missed < s.slow_missed) {
                s.slow_missed = rd->r.missed;
            }
        }
    }
    if (!s.slow_readers) {
        s.slow_missed = 0;
    }
    return s;
}

static void
print_totals(const char *name, const struct totals *s, uint64_t head,
             int nreaders, double seconds)
{
    printf("%s: appended=%llu delivered=%llu missed=%llu (fast readers "
           "%llu+%llu) overwritten=%llu torn=%llu wrong=%llu "
           "unaccounted=%llu short_of_head=%llu slow_missed>=%llu "
           "waits=%llu readers=%d seconds=%g\n",
           name, (unsigned long long)head,
           (unsigned long long)s->delivered, (unsigned long long)s->missed,
           (unsigned long long)s->fast_delivered,
           (unsigned long long)s->fast_missed,
           (unsigned long long)s->overwritten, (unsigned long long)s->torn,
           (unsigned long long)s->wrong, (unsigned long long)s->unaccounted,
           (unsigned long long)s->short_of_head,
           (unsigned long long)s->slow_missed, (unsigned long long)s->waits,
           nreaders, seconds);
}

/* The checks both phases make of their readers; nonzero if one failed. */
static int
readers_failed(const char *name, const struct totals *s)
{
    int failed = 0;
    if (s->torn || s->wrong) {
        fprintf(stderr, "%s: FAIL: %llu torn and %llu wrong entries "
                "delivered\n", name, (unsigned long long)s->torn,
                (unsigned long long)s->wrong);
        failed = 1;
    }
    if (s->unaccounted || s->short_of_head || s->rewound) {
        fprintf(stderr, "%s: FAIL: sequence numbers not accounted for "
                "(%llu reads, %llu readers short of head, %llu rewound)\n",
                name, (unsigned long long)s->unaccounted,
                (unsigned long long)s->short_of_head,
                (unsigned long long)s->rewound);
        failed = 1;
    }
    if (s->wait_errors) {
        fprintf(stderr, "%s: FAIL: %llu ring_wait() errors\n", name,
                (unsigned long long)s->wait_errors);
        failed = 1;
    }
    if (s->delivered == 0) {
        fprintf(stderr, "%s: FAIL: no entry was delivered\n", name);
        failed = 1;
    }
    return failed;
}

/* Append entry head in the form, word by word with a spin after each
 * word; die (SIGKILL) after the *die_at-th word if die_at is set. */
static uint64_t
append_slowly(const ring_view *v, int took_over, long *die_at)
{
    uint64_t n = 0, e[WORDS];
    if (ring_open_append(v, took_over, &n) != 0) {
        seqlock_die_("ring_stress: cannot open an append");
    }
    make_record(e, a_of(n));
    seqlock_word_t *words = ring_entry(v, n);
    for (int i = 0; i < WORDS; i++) {
        seqlock_write_copy(&words[SEQLOCK_WORDS(i * sizeof(uint64_t))],
                           &e[i], sizeof e[i]);
        if (die_at && (*die_at)-- == 0) {
            kill(getpid(), SIGKILL);
        }
        for (volatile int spin = 0; spin < SPINS; spin++) {
        }
    }
    if (ring_close_append(v, n, 0) != 0) {
        seqlock_die_("ring_stress: cannot close an append");
    }
    return n;
}

/* ---- phase 1: writer threads ---- */

struct writer {
    pthread_t thread;
    const ring_view *v;
    uint64_t appends;
};

static void *
writer_main(void *arg)
{
    struct writer *wr = arg;
    pthread_barrier_wait(&start_line);
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        if (seqlock_lock_excl_timed(wr->v->lock, -1) != 0) {
            seqlock_die_("ring_stress: cannot take the ring's lock");
        }
        append_slowly(wr->v, 0, NULL);
        seqlock_unlock(wr->v->lock);
        wr->appends++;
        /* Leave the lock to the other writer now and then. */
        if (wr->appends % 256 == 0) {
            sched_yield();
        }
    }
    return NULL;
}

static int
run_threads(double seconds, int nreaders)
{
    const char *name = "ring_stress";
    size_t size = ring_size(LAYOUT_BYTES, ENTRY_BYTES, RING_THREADS_CAPACITY);
    void *memory = aligned_alloc(RING_ALIGN, record_round_up(size, RING_ALIGN));
    if (memory == NULL
        || ring_init(memory, LAYOUT, LAYOUT_BYTES, ENTRY_BYTES,
                     RING_THREADS_CAPACITY) != 0) {
        fprintf(stderr, "%s: cannot make a ring\n", name);
        exit(1);
    }
    ring_view v = ring_view_of(memory, LAYOUT_BYTES, ENTRY_BYTES,
                               RING_THREADS_CAPACITY);
    static struct reader readers[MAX_READERS];
    static struct writer writers[WRITERS];
    atomic_store(&stop, 0);
    pthread_barrier_init(&start_line, NULL,
                         (unsigned)(nreaders + WRITERS + 1));
    start_readers(readers, nreaders, &v);
    for (int i = 0; i < WRITERS; i++) {
        writers[i] = (struct writer){.v = &v};
        if (pthread_create(&writers[i].thread, NULL, writer_main,
                           &writers[i]) != 0) {
            perror("pthread_create");
            exit(1);
        }
    }
    pthread_barrier_wait(&start_line);
    nap_us((long)(seconds * 1e6));
    atomic_store(&stop, 1);
    uint64_t appends = 0;
    int idle_writer = 0;
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(writers[i].thread, NULL);
        appends += writers[i].appends;
        idle_writer |= writers[i].appends == 0;
    }
    uint64_t head = ring_head(&v);
    struct totals s = join_and_drain(readers, nreaders, head);
    pthread_barrier_destroy(&start_line);
    print_totals(name, &s, head, nreaders, seconds);

    int failed = readers_failed(name, &s);
    if (appends != head) {
        fprintf(stderr, "%s: FAIL: %llu appends, head says %llu\n", name,
                (unsigned long long)appends, (unsigned long long)head);
        failed = 1;
    }
    if (idle_writer) {
        fprintf(stderr, "%s: FAIL: a writer made no progress\n", name);
        failed = 1;
    }
    if (s.slow_readers && s.slow_missed == 0) {
        fprintf(stderr, "%s: FAIL: a slow reader was never lapped: the "
                "run tested no lapping\n", name);
        failed = 1;
    }
    seqlock_destroy(v.lock);
    free(memory);
    return failed;
}

/* ---- phase 2: writer processes killed mid-append ---- */

/* The shared mapping: this control block, then the ring. */
struct killed_run {
    _Atomic uint64_t appends; /* appends known to have completed */
    char pad[RING_ALIGN - sizeof(uint64_t)];
};

static ring_view
ring_of(struct killed_run *run)
{
    return ring_view_of(run + 1, LAYOUT_BYTES, ENTRY_BYTES,
                        RING_KILLED_CAPACITY);
}

/* A writer process: append until killed, by its own SIGKILL after the
 * die_at-th word it writes or by the main thread's.  A dead writer's
 * append it finds is repaired first (ring_open_append(took_over)). */
static _Noreturn void
append_until_killed(struct killed_run *run, long die_at)
{
    ring_view v = ring_of(run);
    for (;;) {
        int err = seqlock_lock_excl_timed(v.lock, -1);
        if (err != 0 && err != EOWNERDEAD) {
            _exit(3);
        }
        append_slowly(&v, err == EOWNERDEAD, &die_at);
        seqlock_unlock(v.lock);
        atomic_fetch_add(&run->appends, 1);
        sched_yield();
    }
}

/* Start a writer process that will kill itself within its first four
 * appends; unless it is dead by then, kill it at a random moment within
 * half a millisecond of its first complete append. */
static int
kill_a_writer(struct killed_run *run, unsigned *seed)
{
    uint64_t before = atomic_load(&run->appends);
    long die_at = (long)((unsigned)rand_r(seed) % (4 * WORDS));
    pid_t pid = fork();
    if (pid < 0) {
        return 0;
    }
    if (pid == 0) {
        append_until_killed(run, die_at);
    }
    for (int i = 0; i < 50000 && atomic_load(&run->appends) == before;
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

static int
run_killed_writers(double seconds, int nreaders)
{
    const char *name = "ring_stress (killed writers)";
    size_t size = sizeof(struct killed_run)
                  + ring_size(LAYOUT_BYTES, ENTRY_BYTES, RING_KILLED_CAPACITY);
    struct killed_run *run = mmap(NULL, size, PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (run == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    if (ring_init(run + 1, LAYOUT, LAYOUT_BYTES, ENTRY_BYTES,
                  RING_KILLED_CAPACITY) != 0) {
        fprintf(stderr, "%s: ring_init failed\n", name);
        exit(1);
    }
    ring_view v = ring_of(run);
    static struct reader readers[MAX_READERS];
    atomic_store(&stop, 0);
    pthread_barrier_init(&start_line, NULL, (unsigned)(nreaders + 1));
    start_readers(readers, nreaders, &v);
    pthread_barrier_wait(&start_line);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned seed = (unsigned)getpid();
    uint64_t kills = 0;
    while (seconds_since(&t0) < seconds) {
        if (!kill_a_writer(run, &seed)) {
            perror("fork");
            exit(1);
        }
        kills++;
    }
    /* Take the lock as the next writer would: a half-written entry left
     * by the last one is discarded, its open section closed. */
    int err = seqlock_lock_excl_timed(v.lock, 5LL * SEQLOCK_NS_PER_SEC);
    int repaired = err == 0 || err == EOWNERDEAD;
    if (err == EOWNERDEAD) {
        ring_close_dead_section(&v);
    }
    if (repaired) {
        seqlock_unlock(v.lock);
    }
    atomic_store(&stop, 1);
    uint64_t head = ring_head(&v);
    struct totals s = join_and_drain(readers, nreaders, head);
    pthread_barrier_destroy(&start_line);
    uint64_t appends = atomic_load(&run->appends);
    uint32_t recoveries = atomic_load(&v.header->recoveries);
    print_totals(name, &s, head, nreaders, seconds);
    printf("%s: kills=%llu recoveries=%u appends_known=%llu\n", name,
           (unsigned long long)kills, (unsigned)recoveries,
           (unsigned long long)appends);

    int failed = readers_failed(name, &s);
    if (!repaired || head < appends || head > appends + kills) {
        fprintf(stderr, "%s: FAIL: head=%llu after %llu appends known "
                "complete and %llu kills%s\n", name,
                (unsigned long long)head, (unsigned long long)appends,
                (unsigned long long)kills,
                repaired ? "" : " (no final repair)");
        failed = 1;
    }
    if (recoveries == 0 || recoveries > kills) {
        fprintf(stderr, "%s: FAIL: %u half-written entries discarded in "
                "%llu kills\n", name, (unsigned)recoveries,
                (unsigned long long)kills);
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
    alarm((unsigned)(4 * a.seconds) + 60);
    setvbuf(stdout, NULL, _IOLBF, 0);

    int failed = run_threads(a.seconds, a.readers);
    int skipped = killed_writers_skipped("ring_stress (killed writers)");
    if (!skipped) {
        failed += run_killed_writers(a.seconds, a.readers);
    }
    return validator_summary(failed, skipped);
}
