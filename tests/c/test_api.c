/*
 * test_api.c - one test per documented behaviour of src/seqlock.h
 *
 * Each test_* function checks one promise from the header's comments; the
 * runner at the bottom runs them all and ends with "N passed, M failed"
 * (CI parses that line).  Tests that fork or deliver signals can be skipped
 * with --skip-fork-signal (for sanitizer builds where fork or signal
 * delivery misbehaves); a name given on the command line runs only the tests
 * whose names contain it.
 *
 * Timing checks use generous bounds: they catch a hang or a lost wake-up,
 * never a slow machine.
 *
 * Build: cc -std=c11 -Isrc tests/c/test_api.c src/seqlock.c -lpthread
 */
#define _GNU_SOURCE
#include "seqlock.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the tiny harness ---- */

static int current_test_failed;

/* On failure: print where and what, mark the test failed, leave it. */
#define CHECK(expr)                                                        \
    do {                                                                   \
        if (!(expr)) {                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,         \
                    __LINE__, #expr);                                      \
            current_test_failed = 1;                                       \
            return;                                                        \
        }                                                                  \
    } while (0)

#define MS (1000 * 1000LL)
#define SEC (1000 * MS)

/* Bounds for "it happened promptly": far above anything a healthy run
 * needs (the library's own liveness period is 20 ms), far below a hang. */
#define PROMPTLY_NS (1 * SEC)
#define GIVE_UP_NS (5 * SEC)

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * MS};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Poll cond(arg) every millisecond; nonzero once it holds, 0 on giving up. */
static int
poll_until(int (*cond)(void *), void *arg)
{
    int64_t give_up = now_ns() + GIVE_UP_NS;
    while (!cond(arg)) {
        if (now_ns() > give_up) {
            return 0;
        }
        sleep_ms(1);
    }
    return 1;
}

/* ---- helper threads ---- */

/* A thread that takes the write lock and keeps it until told to let go. */
struct holder {
    seqlock_t *sl;
    pthread_t thread;
    atomic_int held;
    atomic_int release;
    _Atomic int64_t unlocked_at_ns;
    _Atomic uint32_t tid;
};

static void *
holder_main(void *arg)
{
    struct holder *h = arg;
    write_seqlock(h->sl);
    atomic_store(&h->tid, seqlock_thread_id());
    atomic_store(&h->held, 1);
    while (!atomic_load(&h->release)) {
        sleep_ms(1);
    }
    /* Stamped before the unlock, so a waiter's finish time is later. */
    atomic_store(&h->unlocked_at_ns, now_ns());
    write_sequnlock(h->sl);
    return NULL;
}

static int
holder_has_lock(void *arg)
{
    return atomic_load(&((struct holder *)arg)->held);
}

/* Returns nonzero once another thread holds sl. */
static int
holder_start(struct holder *h, seqlock_t *sl)
{
    memset(h, 0, sizeof *h);
    h->sl = sl;
    if (pthread_create(&h->thread, NULL, holder_main, h) != 0) {
        return 0;
    }
    return poll_until(holder_has_lock, h);
}

static void
holder_release(struct holder *h)
{
    atomic_store(&h->release, 1);
    pthread_join(h->thread, NULL);
}

/* A thread that waits for the lock (as writer or reader) and notes when. */
struct waiter {
    seqlock_t *sl;
    pthread_t thread;
    _Atomic int64_t done_at_ns;
    unsigned seq;
    int held_by_me;
};

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

static void *
reader_waiter_main(void *arg)
{
    struct waiter *w = arg;
    w->seq = read_seqbegin(w->sl);
    atomic_store(&w->done_at_ns, now_ns());
    return NULL;
}

/* A writer sets SEQLOCK_WAITERS just before its futex sleep. */
static int
writer_is_asleep(void *arg)
{
    return (atomic_load(&((seqlock_t *)arg)->owner) & SEQLOCK_WAITERS) != 0;
}

/* A reader counts itself in sleepers around each futex sleep. */
static int
reader_is_asleep(void *arg)
{
    return atomic_load(&((seqlock_t *)arg)->sleepers) > 0;
}

/* ---- child processes (for aborts and dead owners) ---- */

struct child_result {
    int status;        /* from waitpid */
    char stderr_text[512];
};

/* Run fn in a forked child with its stderr captured.  The child exits 0 if
 * fn returns; alarm() turns a hang into SIGALRM.  Returns 0 if fork failed. */
static int
run_in_child(void (*fn)(void), struct child_result *out)
{
    int pipefd[2];
    memset(out, 0, sizeof *out);
    if (pipe(pipefd) != 0) {
        return 0;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        return 0;
    }
    if (pid == 0) {
        close(pipefd[0]);
        dup2(pipefd[1], STDERR_FILENO);
        alarm(10);
        fn();
        _exit(0);
    }
    close(pipefd[1]);
    size_t used = 0;
    ssize_t n;
    while ((n = read(pipefd[0], out->stderr_text + used,
                     sizeof out->stderr_text - 1 - used)) > 0) {
        used += (size_t)n;
    }
    close(pipefd[0]);
    return waitpid(pid, &out->status, 0) == pid;
}

static int
died_of(const struct child_result *r, int sig)
{
    return WIFSIGNALED(r->status) && WTERMSIG(r->status) == sig;
}

static int
exited_cleanly(const struct child_result *r)
{
    return WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0;
}

/* ---- signal masks ---- */

static sigset_t
current_mask(void)
{
    sigset_t cur;
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    return cur;
}

/* Every signal a thread can block: 1..31 but KILL and STOP, and the
 * real-time ones (glibc reserves the two below SIGRTMIN for itself). */
static int
all_maskable_blocked(const sigset_t *set)
{
    for (int sig = 1; sig < 32; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP && !sigismember(set, sig)) {
            return 0;
        }
    }
    for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++) {
        if (!sigismember(set, sig)) {
            return 0;
        }
    }
    return 1;
}

static int
same_mask(const sigset_t *a, const sigset_t *b)
{
    for (int sig = 1; sig < NSIG; sig++) {
        if (sigismember(a, sig) != sigismember(b, sig)) {
            return 0;
        }
    }
    return 1;
}

/* The mask the irq tests start from: SIGUSR2 already blocked, so that
 * "restored exactly" means it stays blocked, not merely that the rest are
 * unblocked.  The runner restores the test-free mask after each test. */
static sigset_t
mask_with_sigusr2_blocked(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_SETMASK, &set, NULL);
    return current_mask();
}

/* ==== initialisation ==== */

static void
test_static_initializer_is_unlocked_with_sequence_zero(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    CHECK(seqlock_sequence(&sl) == 0);
    CHECK(seqlock_owner(&sl) == 0);
    CHECK(!seqlock_held_by_me(&sl));
}

static void
test_seqlock_init_makes_garbage_unlocked_with_sequence_zero(void)
{
    seqlock_t sl;
    memset(&sl, 0xa5, sizeof sl);
    seqlock_init(&sl);
    CHECK(seqlock_sequence(&sl) == 0);
    CHECK(seqlock_owner(&sl) == 0);
    CHECK(atomic_load(&sl.sleepers) == 0);
    CHECK(sl.reserved == 0);
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
test_write_seqlock_makes_caller_the_owner_until_unlock(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    write_seqlock(&sl);
    CHECK(seqlock_owner(&sl) == seqlock_thread_id());
    CHECK(seqlock_held_by_me(&sl));
    write_sequnlock(&sl);
    CHECK(seqlock_owner(&sl) == 0);
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
    unsigned seq = seqlock_sequence(&sl);
    holder_release(&h);
    CHECK(!took);
    CHECK(seq == 1); /* a failed try must not touch the count */
    CHECK(seqlock_sequence(&sl) == 2);
}

/* ==== exclusive readers (read_seqlock_excl) ==== */

static void
test_read_seqlock_excl_leaves_the_sequence_alone(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    read_seqlock_excl(&sl);
    unsigned inside = seqlock_sequence(&sl);
    int owned = seqlock_held_by_me(&sl);
    read_sequnlock_excl(&sl);
    CHECK(inside == 0);
    CHECK(owned);
    CHECK(seqlock_sequence(&sl) == 0);
    CHECK(seqlock_owner(&sl) == 0);
}

static void
test_read_seqlock_excl_keeps_writers_out_but_not_readers(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    read_seqlock_excl(&sl);
    unsigned seq;
    int reader_began = seqlock_read_try_begin(&sl, &seq);
    int reader_retries = read_seqretry(&sl, seq);
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
    unsigned seq = 99;
    CHECK(seqlock_read_try_begin(&sl, &seq));
    CHECK(seq == 0);
    CHECK(read_seqretry(&sl, seq) == 0);
}

static void
test_read_try_begin_fails_without_waiting_during_write(void)
{
    /* Same thread as the writer: a waiting call would deadlock here. */
    seqlock_t sl = SEQLOCK_UNLOCKED;
    unsigned seq = 0;
    write_seqlock(&sl);
    int ok = seqlock_read_try_begin(&sl, &seq);
    write_sequnlock(&sl);
    CHECK(!ok);
    CHECK(seq == 1);
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

/* ==== queries and thread ids ==== */

static void
test_thread_id_is_nonzero_and_stable(void)
{
    uint32_t id = seqlock_thread_id();
    CHECK(id != 0);
    CHECK((id & ~SEQLOCK_OWNER_MASK) == 0);
    CHECK(seqlock_thread_id() == id);
}

static void *
report_thread_id(void *arg)
{
    *(uint32_t *)arg = seqlock_thread_id();
    return NULL;
}

static void
test_thread_id_differs_between_threads(void)
{
    uint32_t other = 0;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, report_thread_id, &other) == 0);
    pthread_join(t, NULL);
    CHECK(other != 0);
    CHECK(other != seqlock_thread_id());
}

static void
test_owner_and_held_by_me_name_the_other_thread_holding_it(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    CHECK(holder_start(&h, &sl));
    uint32_t owner = seqlock_owner(&sl);
    int mine = seqlock_held_by_me(&sl);
    holder_release(&h);
    CHECK(owner == atomic_load(&h.tid));
    CHECK(owner != seqlock_thread_id());
    CHECK(!mine);
    CHECK(seqlock_owner(&sl) == 0);
}

static void
test_thread_alive_for_self(void)
{
    CHECK(seqlock_thread_alive(seqlock_thread_id()));
}

static void
test_thread_in_this_process_tells_own_threads_from_others(void)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        pause();
        _exit(0);
    }
    int own = seqlock_thread_in_this_process(seqlock_thread_id());
    int child = seqlock_thread_in_this_process((uint32_t)pid);
    kill(pid, SIGKILL);
    CHECK(waitpid(pid, NULL, 0) == pid);
    CHECK(own);
    CHECK(!child);
}

static void
test_thread_alive_is_false_for_reaped_child(void)
{
    /* A child that exited and was reaped has no thread left; its id is
     * not reused this soon (Linux hands out pids cyclically). */
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        _exit(0);
    }
    CHECK(waitpid(pid, NULL, 0) == pid);
    CHECK(!seqlock_thread_alive((uint32_t)pid));
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
    unsigned seq = seqlock_sequence(&sl);
    write_sequnlock(&sl);
    CHECK(with_wait == EDEADLK);
    CHECK(without_wait == EDEADLK);
    CHECK(seq == 1); /* the refused calls left the section alone */
    CHECK(seqlock_sequence(&sl) == 2);
}

/* ==== timed readers ==== */

static void
test_read_begin_timed_returns_even_sequence_when_no_writer(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    write_seqlock(&sl);
    write_sequnlock(&sl);
    unsigned seq = 99;
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
    unsigned seq = 0;
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
    unsigned seq = 0;
    write_seqlock(&sl);
    int err = seqlock_read_begin_timed(&sl, -1, &seq);
    write_sequnlock(&sl);
    CHECK(err == EDEADLK);
}

/* ==== waking sleepers ==== */

static void
test_unlock_wakes_writer_asleep_on_the_lock(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    struct waiter w = {.sl = &sl};
    CHECK(holder_start(&h, &sl));
    CHECK(pthread_create(&w.thread, NULL, writer_waiter_main, &w) == 0);
    /* Past spinning and yielding, into the futex sleep; then hold on a
     * while longer so that the unlock, not a spin, lets it in. */
    int slept = poll_until(writer_is_asleep, &sl);
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
    CHECK(seqlock_owner(&sl) == 0); /* the waiters bit went with it */
}

static void
test_unlock_wakes_reader_asleep_on_the_sequence(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    struct waiter r = {.sl = &sl};
    CHECK(holder_start(&h, &sl));
    CHECK(pthread_create(&r.thread, NULL, reader_waiter_main, &r) == 0);
    int slept = poll_until(reader_is_asleep, &sl);
    sleep_ms(100);
    int waiting_still = atomic_load(&r.done_at_ns) == 0;
    holder_release(&h);
    pthread_join(r.thread, NULL);
    CHECK(slept);
    CHECK(waiting_still);
    CHECK(r.seq == 2);
    CHECK(atomic_load(&r.done_at_ns) - atomic_load(&h.unlocked_at_ns)
          < PROMPTLY_NS);
    CHECK(atomic_load(&sl.sleepers) == 0);
}

static void
ignore_signal(int sig)
{
    (void)sig;
}

static seqlock_t interrupted_lock = SEQLOCK_UNLOCKED;

/* A handler that interrupts a sleeping write_seqlock() makes the futex wait
 * return EINTR; write_seqlock() must keep waiting, not abort. */
static void
writer_interrupted_while_asleep(void)
{
    struct sigaction sa = {.sa_handler = ignore_signal};
    sigaction(SIGUSR1, &sa, NULL);
    struct holder h;
    struct waiter w = {.sl = &interrupted_lock};
    if (!holder_start(&h, &interrupted_lock)
        || pthread_create(&w.thread, NULL, writer_waiter_main, &w) != 0
        || !poll_until(writer_is_asleep, &interrupted_lock)) {
        _exit(2);
    }
    sleep_ms(50);
    pthread_kill(w.thread, SIGUSR1);
    sleep_ms(50);
    holder_release(&h);
    pthread_join(w.thread, NULL);
    _exit(w.held_by_me ? 0 : 3);
}

static void
test_write_seqlock_keeps_waiting_when_a_signal_interrupts_its_sleep(void)
{
    struct child_result r;
    CHECK(run_in_child(writer_interrupted_while_asleep, &r));
    if (!exited_cleanly(&r)) {
        fprintf(stderr, "child status %#x, stderr: %s", r.status,
                r.stderr_text);
    }
    CHECK(exited_cleanly(&r));
}

static void
reader_interrupted_while_asleep(void)
{
    struct sigaction sa = {.sa_handler = ignore_signal};
    sigaction(SIGUSR1, &sa, NULL);
    struct holder h;
    struct waiter r = {.sl = &interrupted_lock};
    if (!holder_start(&h, &interrupted_lock)
        || pthread_create(&r.thread, NULL, reader_waiter_main, &r) != 0
        || !poll_until(reader_is_asleep, &interrupted_lock)) {
        _exit(2);
    }
    sleep_ms(50);
    pthread_kill(r.thread, SIGUSR1);
    sleep_ms(50);
    holder_release(&h);
    pthread_join(r.thread, NULL);
    _exit(r.seq == 2 ? 0 : 3);
}

static void
test_read_seqbegin_keeps_waiting_when_a_signal_interrupts_its_sleep(void)
{
    struct child_result r;
    CHECK(run_in_child(reader_interrupted_while_asleep, &r));
    if (!exited_cleanly(&r)) {
        fprintf(stderr, "child status %#x, stderr: %s", r.status,
                r.stderr_text);
    }
    CHECK(exited_cleanly(&r));
}

/* ==== signal-masking variants ==== */

static void
test_write_seqlock_irqsave_blocks_signals_and_restores_mask(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    unsigned long flags;
    write_seqlock_irqsave(&sl, flags);
    sigset_t inside = current_mask();
    unsigned seq = seqlock_sequence(&sl);
    write_sequnlock_irqrestore(&sl, flags);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&inside));
    CHECK(seq == 1);
    CHECK(same_mask(&after, &before));
    CHECK(sigismember(&after, SIGUSR2));
    CHECK(seqlock_sequence(&sl) == 2);
}

static void
test_write_seqlock_irq_blocks_signals_and_restores_mask(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    write_seqlock_irq(&sl);
    sigset_t inside = current_mask();
    unsigned seq = seqlock_sequence(&sl);
    write_sequnlock_irq(&sl);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&inside));
    CHECK(seq == 1);
    CHECK(same_mask(&after, &before));
    CHECK(seqlock_sequence(&sl) == 2);
}

static void
test_write_seqlock_bh_blocks_signals_and_restores_mask(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    write_seqlock_bh(&sl);
    sigset_t inside = current_mask();
    unsigned seq = seqlock_sequence(&sl);
    write_sequnlock_bh(&sl);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&inside));
    CHECK(seq == 1);
    CHECK(same_mask(&after, &before));
    CHECK(seqlock_sequence(&sl) == 2);
}

static void
test_read_seqbegin_irqsave_blocks_signals_and_restores_mask(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    unsigned long flags;
    unsigned seq = read_seqbegin_irqsave(&sl, flags);
    sigset_t inside = current_mask();
    int retry = read_seqretry_irqrestore(&sl, seq, flags);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&inside));
    CHECK(seq == 0);
    CHECK(retry == 0);
    CHECK(same_mask(&after, &before));
}

static void
test_read_seqbegin_irq_blocks_signals_and_restores_mask(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    unsigned seq = read_seqbegin_irq(&sl);
    sigset_t inside = current_mask();
    int retry = read_seqretry_irq(&sl, seq);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&inside));
    CHECK(retry == 0);
    CHECK(same_mask(&after, &before));
}

static void
test_read_seqbegin_bh_blocks_signals_and_restores_mask(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    unsigned seq = read_seqbegin_bh(&sl);
    sigset_t inside = current_mask();
    int retry = read_seqretry_bh(&sl, seq);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&inside));
    CHECK(retry == 0);
    CHECK(same_mask(&after, &before));
}

static void
test_read_seqretry_irqrestore_reports_intervening_write(void)
{
    /* The restoring forms still pass read_seqretry()'s answer through. */
    seqlock_t sl = SEQLOCK_UNLOCKED;
    unsigned long flags;
    unsigned seq = read_seqbegin_irqsave(&sl, flags);
    write_seqlock(&sl);
    write_sequnlock(&sl);
    CHECK(read_seqretry_irqrestore(&sl, seq, flags) != 0);
    seq = read_seqbegin_irq(&sl);
    write_seqlock(&sl);
    write_sequnlock(&sl);
    CHECK(read_seqretry_irq(&sl, seq) != 0);
}

static void
test_nested_irqsave_restores_mask_only_at_outermost_level(void)
{
    seqlock_t outer = SEQLOCK_UNLOCKED;
    seqlock_t inner = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    unsigned long outer_flags, inner_flags;
    write_seqlock_irqsave(&outer, outer_flags);
    write_seqlock_irqsave(&inner, inner_flags);
    write_sequnlock_irqrestore(&inner, inner_flags);
    sigset_t between = current_mask();
    write_sequnlock_irqrestore(&outer, outer_flags);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&between)); /* still inside the outer one */
    CHECK(same_mask(&after, &before));
    CHECK(seqlock_irq_depth_() == 0);
}

/* ---- a handler that reads data an _irq writer protects ---- */

static seqlock_t handler_lock = SEQLOCK_UNLOCKED;
static seqlock_word_t handler_data[2];
static volatile sig_atomic_t handler_calls;
static uint64_t handler_snapshot[2];
static unsigned handler_seq;

static void
read_in_handler(int sig)
{
    (void)sig;
    unsigned seq;
    do {
        seq = read_seqbegin(&handler_lock);
        seqlock_read_copy(handler_snapshot, handler_data,
                          sizeof handler_snapshot);
    } while (read_seqretry(&handler_lock, seq));
    handler_seq = seq;
    handler_calls++;
}

static void
test_signal_raised_in_irq_write_section_is_delivered_after_unlock(void)
{
    struct sigaction sa = {.sa_handler = read_in_handler};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    uint64_t update[2] = {7, 42};
    handler_calls = 0;

    write_seqlock_irq(&handler_lock);
    pthread_kill(pthread_self(), SIGUSR1);
    int ran_inside = handler_calls;
    sigset_t pending;
    sigpending(&pending);
    seqlock_write_copy(handler_data, update, sizeof update);
    write_sequnlock_irq(&handler_lock); /* unblocking delivers it here */
    int ran_after = handler_calls;

    signal(SIGUSR1, SIG_DFL);
    CHECK(ran_inside == 0);
    CHECK(sigismember(&pending, SIGUSR1));
    CHECK(ran_after == 1);
    CHECK(handler_seq == seqlock_sequence(&handler_lock));
    CHECK(handler_snapshot[0] == 7 && handler_snapshot[1] == 42);
}

/* ---- misuse that must abort rather than hang ---- */

static seqlock_t misuse_lock = SEQLOCK_UNLOCKED;

static void
read_own_write_section(int sig)
{
    (void)sig;
    (void)read_seqbegin(&misuse_lock); /* can never see an even count */
}

static void
raise_signal_in_plain_write_section(void)
{
    struct sigaction sa = {.sa_handler = read_own_write_section};
    sigaction(SIGUSR1, &sa, NULL);
    write_seqlock(&misuse_lock);
    pthread_kill(pthread_self(), SIGUSR1);
    write_sequnlock(&misuse_lock);
}

static void
test_handler_reading_its_own_threads_write_section_aborts(void)
{
    struct child_result r;
    CHECK(run_in_child(raise_signal_in_plain_write_section, &r));
    CHECK(!died_of(&r, SIGALRM)); /* a hang, caught by the guard */
    CHECK(died_of(&r, SIGABRT));
    CHECK(strstr(r.stderr_text, "read_seqbegin") != NULL);
}

static void
take_write_lock_twice(void)
{
    write_seqlock(&misuse_lock);
    write_seqlock(&misuse_lock);
}

static void
test_recursive_write_seqlock_aborts(void)
{
    struct child_result r;
    CHECK(run_in_child(take_write_lock_twice, &r));
    CHECK(!died_of(&r, SIGALRM));
    CHECK(died_of(&r, SIGABRT));
    CHECK(strstr(r.stderr_text, "already holds") != NULL);
}

/* ---- a writer that dies holding the lock ---- */

struct shared_record {
    seqlock_t lock;
    seqlock_word_t data[2];
};

/* A shared mapping whose lock a child took and never released.  With
 * reap, the child is reaped before this returns; without, it is left a
 * zombie (waitid WNOWAIT), which answers kill(pid, 0) but is dead all the
 * same, and *zombie is set to its pid for the caller to reap. */
static struct shared_record *
record_left_locked_by_child(int reap, pid_t *zombie)
{
    struct shared_record *rec = mmap(NULL, sizeof *rec,
                                     PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (rec == MAP_FAILED) {
        return NULL;
    }
    seqlock_init(&rec->lock);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        munmap(rec, sizeof *rec);
        return NULL;
    }
    if (pid == 0) {
        uint64_t half = 1;
        write_seqlock(&rec->lock);
        seqlock_write_copy(rec->data, &half, sizeof half); /* half-written */
        _exit(0);
    }
    if (!reap) {
        siginfo_t info;
        if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT) != 0) {
            munmap(rec, sizeof *rec);
            return NULL;
        }
        *zombie = pid;
        return rec;
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
        munmap(rec, sizeof *rec);
        return NULL;
    }
    return rec;
}

static struct shared_record *
record_left_locked_by_dead_child(void)
{
    return record_left_locked_by_child(1, NULL);
}

static void
test_timed_reader_reports_eownerdead_for_unreaped_dead_writer(void)
{
    pid_t zombie = 0;
    struct shared_record *rec = record_left_locked_by_child(0, &zombie);
    CHECK(rec != NULL);
    unsigned seq = 0;
    int err = seqlock_read_begin_timed(&rec->lock, -1, &seq);
    munmap(rec, sizeof *rec);
    CHECK(waitpid(zombie, NULL, 0) == zombie);
    CHECK(err == EOWNERDEAD);
}

static void
test_timed_reader_reports_eownerdead_for_dead_writer(void)
{
    struct shared_record *rec = record_left_locked_by_dead_child();
    CHECK(rec != NULL);
    unsigned seq = 0;
    int64_t start = now_ns();
    int err = seqlock_read_begin_timed(&rec->lock, -1, &seq);
    int64_t took = now_ns() - start;
    unsigned left = seqlock_sequence(&rec->lock);
    munmap(rec, sizeof *rec);
    CHECK(err == EOWNERDEAD);
    CHECK(took < PROMPTLY_NS); /* liveness is checked every 20 ms */
    CHECK(left == 1);
}

static void
test_timed_writer_takes_over_from_dead_writer(void)
{
    struct shared_record *rec = record_left_locked_by_dead_child();
    CHECK(rec != NULL);
    int64_t start = now_ns();
    int err = seqlock_write_lock_timed(&rec->lock, -1);
    int64_t took = now_ns() - start;
    int mine = seqlock_held_by_me(&rec->lock);
    unsigned inside = seqlock_sequence(&rec->lock);
    if (err == EOWNERDEAD || err == 0) {
        write_sequnlock(&rec->lock);
    }
    unsigned after = seqlock_sequence(&rec->lock);
    uint32_t owner_after = seqlock_owner(&rec->lock);
    munmap(rec, sizeof *rec);
    CHECK(err == EOWNERDEAD);
    CHECK(took < PROMPTLY_NS);
    CHECK(mine);
    CHECK(inside % 2 == 1); /* still odd: the data may be half-written */
    CHECK(after % 2 == 0);
    CHECK(owner_after == 0);
}

static void
test_lock_works_normally_after_dead_writer_is_repaired(void)
{
    struct shared_record *rec = record_left_locked_by_dead_child();
    CHECK(rec != NULL);
    uint64_t repaired[2] = {5, 6}, out[2] = {0, 0};
    int err = seqlock_write_lock_timed(&rec->lock, -1);
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
    unsigned timed_seq = 0;
    int timed = seqlock_read_begin_timed(&rec->lock, 0, &timed_seq);
    munmap(rec, sizeof *rec);
    CHECK(err == EOWNERDEAD);
    CHECK(seq == 4); /* the dead section 1..2, then ours 3..4 */
    CHECK(out[0] == 5 && out[1] == 6);
    CHECK(timed == 0 && timed_seq == 4);
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
    /* Same process this time: a thread's id is gone once it is joined. */
    seqlock_t sl = SEQLOCK_UNLOCKED;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, lock_and_exit_thread, &sl) == 0);
    pthread_join(t, NULL);
    unsigned seq;
    int64_t start = now_ns();
    int err = seqlock_read_begin_timed(&sl, -1, &seq);
    int64_t took = now_ns() - start;
    CHECK(err == EOWNERDEAD);
    CHECK(took < PROMPTLY_NS);
}

/* ==== runner ==== */

enum { PLAIN = 0, FORKS_OR_SIGNALS = 1 };

struct test {
    const char *name;
    void (*fn)(void);
    int kind;
};

#define TEST(fn, kind) {#fn, fn, kind}

static const struct test tests[] = {
    TEST(test_static_initializer_is_unlocked_with_sequence_zero, PLAIN),
    TEST(test_seqlock_init_makes_garbage_unlocked_with_sequence_zero, PLAIN),
    TEST(test_seqlock_words_rounds_bytes_up_to_whole_words, PLAIN),
    TEST(test_write_section_makes_sequence_odd_inside_and_even_after, PLAIN),
    TEST(test_each_write_section_adds_two_to_sequence, PLAIN),
    TEST(test_write_seqlock_makes_caller_the_owner_until_unlock, PLAIN),
    TEST(test_write_tryseqlock_succeeds_when_free, PLAIN),
    TEST(test_read_seqlock_excl_leaves_the_sequence_alone, PLAIN),
    TEST(test_read_seqlock_excl_keeps_writers_out_but_not_readers, PLAIN),
    TEST(test_read_seqlock_excl_waits_for_a_writer, PLAIN),
    TEST(test_write_tryseqlock_fails_while_another_thread_holds_it, PLAIN),
    TEST(test_read_seqbegin_returns_even_sequence, PLAIN),
    TEST(test_read_seqretry_is_zero_without_intervening_write, PLAIN),
    TEST(test_read_seqretry_is_nonzero_after_intervening_write, PLAIN),
    TEST(test_read_seqretry_is_nonzero_while_write_in_progress, PLAIN),
    TEST(test_read_try_begin_succeeds_with_even_sequence_when_no_writer,
         PLAIN),
    TEST(test_read_try_begin_fails_without_waiting_during_write, PLAIN),
    TEST(test_write_copy_then_read_copy_round_trips_whole_words, PLAIN),
    TEST(test_write_copy_of_partial_last_word_keeps_bytes_past_nbytes,
         PLAIN),
    TEST(test_read_copy_of_partial_last_word_writes_only_nbytes, PLAIN),
    TEST(test_thread_id_is_nonzero_and_stable, PLAIN),
    TEST(test_thread_id_differs_between_threads, PLAIN),
    TEST(test_owner_and_held_by_me_name_the_other_thread_holding_it, PLAIN),
    TEST(test_thread_alive_for_self, PLAIN),
    TEST(test_thread_alive_is_false_for_reaped_child, FORKS_OR_SIGNALS),
    TEST(test_thread_in_this_process_tells_own_threads_from_others,
         FORKS_OR_SIGNALS),
    TEST(test_write_lock_timed_takes_free_lock, PLAIN),
    TEST(test_write_lock_timed_with_zero_timeout_fails_while_held_elsewhere,
         PLAIN),
    TEST(test_write_lock_timed_gives_up_after_its_timeout_while_held_elsewhere,
         PLAIN),
    TEST(test_write_lock_timed_reports_edeadlk_to_the_holder, PLAIN),
    TEST(test_read_begin_timed_returns_even_sequence_when_no_writer, PLAIN),
    TEST(test_read_begin_timed_times_out_while_another_thread_writes, PLAIN),
    TEST(test_read_begin_timed_reports_edeadlk_to_the_writer, PLAIN),
    TEST(test_unlock_wakes_writer_asleep_on_the_lock, PLAIN),
    TEST(test_unlock_wakes_reader_asleep_on_the_sequence, PLAIN),
    TEST(test_write_seqlock_keeps_waiting_when_a_signal_interrupts_its_sleep,
         FORKS_OR_SIGNALS),
    TEST(test_read_seqbegin_keeps_waiting_when_a_signal_interrupts_its_sleep,
         FORKS_OR_SIGNALS),
    TEST(test_write_seqlock_irqsave_blocks_signals_and_restores_mask, PLAIN),
    TEST(test_write_seqlock_irq_blocks_signals_and_restores_mask, PLAIN),
    TEST(test_write_seqlock_bh_blocks_signals_and_restores_mask, PLAIN),
    TEST(test_read_seqbegin_irqsave_blocks_signals_and_restores_mask, PLAIN),
    TEST(test_read_seqbegin_irq_blocks_signals_and_restores_mask, PLAIN),
    TEST(test_read_seqbegin_bh_blocks_signals_and_restores_mask, PLAIN),
    TEST(test_read_seqretry_irqrestore_reports_intervening_write, PLAIN),
    TEST(test_nested_irqsave_restores_mask_only_at_outermost_level, PLAIN),
    TEST(test_signal_raised_in_irq_write_section_is_delivered_after_unlock,
         FORKS_OR_SIGNALS),
    TEST(test_handler_reading_its_own_threads_write_section_aborts,
         FORKS_OR_SIGNALS),
    TEST(test_recursive_write_seqlock_aborts, FORKS_OR_SIGNALS),
    TEST(test_timed_reader_reports_eownerdead_for_dead_writer,
         FORKS_OR_SIGNALS),
    TEST(test_timed_writer_takes_over_from_dead_writer, FORKS_OR_SIGNALS),
    TEST(test_timed_reader_reports_eownerdead_for_unreaped_dead_writer,
         FORKS_OR_SIGNALS),
    TEST(test_lock_works_normally_after_dead_writer_is_repaired,
         FORKS_OR_SIGNALS),
    TEST(test_timed_reader_reports_eownerdead_for_exited_thread, PLAIN),
};

static void
usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [--skip-fork-signal] [name-substring]\n",
            argv0);
    exit(2);
}

int
main(int argc, char **argv)
{
    int skip_fork_signal = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--skip-fork-signal") == 0) {
            skip_fork_signal = 1;
        } else if (argv[i][0] == '-' || only != NULL) {
            usage(argv[0]);
        } else {
            only = argv[i];
        }
    }

    setvbuf(stdout, NULL, _IOLBF, 0);
    sigset_t initial_mask = current_mask();
    int passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        const struct test *t = &tests[i];
        if (only != NULL && strstr(t->name, only) == NULL) {
            continue;
        }
        if (skip_fork_signal && t->kind == FORKS_OR_SIGNALS) {
            printf("skip %s\n", t->name);
            skipped++;
            continue;
        }
        current_test_failed = 0;
        t->fn();
        pthread_sigmask(SIG_SETMASK, &initial_mask, NULL);
        printf("%s %s\n", current_test_failed ? "FAIL" : "ok", t->name);
        if (current_test_failed) {
            failed++;
        } else {
            passed++;
        }
    }
    if (skipped) {
        printf("%d skipped (--skip-fork-signal)\n", skipped);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
