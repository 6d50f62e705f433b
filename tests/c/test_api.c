/*
 * test_api.c - one test per documented behaviour of src/libseqlock/seqlock.h (and of
 * record.h's recovery of a dead writer's section)
 *
 * Each test_* function checks one promise from the header's comments; the
 * "regressions" sections check what an earlier core got wrong (thread ids
 * compared across PID namespaces or after reuse, a handler that allocated,
 * a dead sleeper or a spinning waiter that cost later wake-ups, fork, the
 * 32-bit count).  The runner at the bottom runs them all and ends with
 * "N passed, M failed, K skipped" (CI parses the first two numbers).  A test
 * that cannot run here (PID namespaces need root) prints "skip <name>:
 * <reason>" and counts as skipped, not failed.  Tests that fork or deliver
 * signals can be skipped with --skip-fork-signal (for sanitizer builds where
 * fork or signal delivery misbehaves); a name given on the command line runs
 * only the tests whose names contain it.
 *
 * Timing checks use generous bounds: they catch a hang or a lost wake-up,
 * never a slow machine.  A real reader naps at most SEQLOCK_READER_NAP_MS,
 * which would hide a lost wake-up under any such bound, so wake-ups are
 * checked with a sleeper that follows the readers' protocol without the
 * nap (struct sleeper).  Tests may read a seqlock_t's fields, and the 64-bit
 * tests store to its count (and to a seqcount_latch_t's).
 *
 * Build: make -C tests/c test, or cc -std=c11 -Isrc/libseqlock tests/c/test_api.c
 *        with every .c file of src/libseqlock and -lpthread
 */
#define _GNU_SOURCE
#include "seqlock.h"
#include "record.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the tiny harness ---- */

static int current_test_failed;
static int current_test_skipped;

/* In memory shared with the test's child processes, which may be the ones
 * that find the test cannot run; they exit with SKIPPED_EXIT. */
#define SKIP_REASON_SIZE 160
static char *skip_reason;
#define SKIPPED_EXIT 77

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

/* The test cannot run here: say why, mark it skipped, leave it. */
#define SKIP(...)                                                          \
    do {                                                                   \
        snprintf(skip_reason, SKIP_REASON_SIZE, __VA_ARGS__);              \
        current_test_skipped = 1;                                          \
        return;                                                            \
    } while (0)

#define US 1000LL
#define MS (1000 * US)
#define SEC (1000 * MS)

/* Bounds for "it happened promptly": far above anything a healthy run
 * needs (a reader looks for a dead writer every SEQLOCK_READER_NAP_MS),
 * far below a hang. */
#define PROMPTLY_NS (1 * SEC)
#define GIVE_UP_NS (5 * SEC)
/* A child process still running after this long is hung: alarm() ends it. */
#define CHILD_GUARD_S 20

static int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

/* For printing: nanoseconds as microseconds. */
static double
us_of(int64_t ns)
{
    return (double)ns / US;
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

/* ---- counting allocations made by signal handlers ---- */

/* Set by a test's handler around its read: only the allocations this
 * thread makes while it is set are counted. */
static _Thread_local volatile sig_atomic_t in_handler;
static atomic_long handler_allocations;

static void
note_allocation(void)
{
    if (in_handler) {
        atomic_fetch_add(&handler_allocations, 1);
    }
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
/* The sanitizer's runtime owns malloc; it calls these hooks on every
 * allocation and release (sanitizer/allocator_interface.h). */
int __sanitizer_install_malloc_and_free_hooks(
    void (*malloc_hook)(const volatile void *, size_t),
    void (*free_hook)(const volatile void *));

static void
on_malloc(const volatile void *p, size_t n)
{
    (void)p;
    (void)n;
    note_allocation();
}

static void
on_free(const volatile void *p)
{
    (void)p;
    note_allocation();
}

static void
count_allocations(void)
{
    (void)__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}
#define CAN_COUNT_ALLOCATIONS 1
#elif defined(__GLIBC__)
/* Interpose glibc's allocator: each call is counted, then passed on to
 * glibc's own entry points. */
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void __libc_free(void *p);

void *
malloc(size_t n)
{
    note_allocation();
    return __libc_malloc(n);
}

void *
calloc(size_t n, size_t size)
{
    note_allocation();
    return __libc_calloc(n, size);
}

void *
realloc(void *p, size_t n)
{
    note_allocation();
    return __libc_realloc(p, n);
}

void
free(void *p)
{
    note_allocation();
    __libc_free(p);
}

static void
count_allocations(void)
{
}
#define CAN_COUNT_ALLOCATIONS 1
#else
static void
count_allocations(void)
{
}
#define CAN_COUNT_ALLOCATIONS 0
#endif

/* ---- helper threads ---- */

/* A thread that takes the lock (a write section, or with excl a locking
 * pass) and keeps it until told to let go, or for hold_ns if set. */
struct holder {
    seqlock_t *sl;
    int excl;
    int64_t hold_ns;
    pthread_t thread;
    atomic_int held;
    atomic_int release;
    _Atomic uint64_t token;
    _Atomic int64_t unlocked_at_ns;
};

static void *
holder_main(void *arg)
{
    struct holder *h = arg;
    if (h->excl) {
        read_seqlock_excl(h->sl);
    }
    else {
        write_seqlock(h->sl);
    }
    atomic_store(&h->token, seqlock_self());
    atomic_store(&h->held, 1);
    int64_t until = h->hold_ns ? now_ns() + h->hold_ns : INT64_MAX;
    while (!atomic_load(&h->release) && now_ns() < until) {
        sleep_ms(1);
    }
    /* Stamped before the unlock, so a waiter's finish time is later. */
    atomic_store(&h->unlocked_at_ns, now_ns());
    if (h->excl) {
        read_sequnlock_excl(h->sl);
    }
    else {
        write_sequnlock(h->sl);
    }
    return NULL;
}

static int
holder_has_lock(void *arg)
{
    return atomic_load(&((struct holder *)arg)->held);
}

/* Start *h, its sl and options set; nonzero once it holds the lock. */
static int
holder_run(struct holder *h)
{
    if (pthread_create(&h->thread, NULL, holder_main, h) != 0) {
        return 0;
    }
    return poll_until(holder_has_lock, h);
}

/* Returns nonzero once another thread holds sl in a write section. */
static int
holder_start(struct holder *h, seqlock_t *sl)
{
    memset(h, 0, sizeof *h);
    h->sl = sl;
    return holder_run(h);
}

static void
holder_release(struct holder *h)
{
    atomic_store(&h->release, 1);
    pthread_join(h->thread, NULL);
}

/* A thread that waits for the lock (as writer or reader) and notes when.
 * With go set it first spins until *go is nonzero. */
struct waiter {
    seqlock_t *sl;
    const _Atomic int64_t *go;
    pthread_t thread;
    int err;
    uint64_t seq;
    int held_by_me;
    _Atomic int64_t done_at_ns;
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

/* seqlock_write_lock_timed() with GIVE_UP_NS: a stall fails, never hangs. */
static void *
timed_writer_main(void *arg)
{
    struct waiter *w = arg;
    while (w->go != NULL && atomic_load(w->go) == 0) {
    }
    w->err = seqlock_write_lock_timed(w->sl, GIVE_UP_NS);
    atomic_store(&w->done_at_ns, now_ns());
    w->seq = seqlock_sequence(w->sl);
    w->held_by_me = seqlock_held_by_me(w->sl);
    if (w->err == 0 || w->err == EOWNERDEAD) {
        write_sequnlock(w->sl);
    }
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

static void *
timed_reader_main(void *arg)
{
    struct waiter *w = arg;
    w->err = seqlock_read_begin_timed(w->sl, GIVE_UP_NS, &w->seq);
    atomic_store(&w->done_at_ns, now_ns());
    return NULL;
}

static int
start_waiter(struct waiter *w, void *(*main_fn)(void *))
{
    return pthread_create(&w->thread, NULL, main_fn, w) == 0;
}

/* The count's low half, where readers sleep (as seqlock.c finds it). */
static _Atomic uint32_t *
count_low_half(seqlock_t *sl)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return (_Atomic uint32_t *)((char *)&sl->seqcount.sequence + 4);
#else
    return (_Atomic uint32_t *)&sl->seqcount.sequence;
#endif
}

/* A reader asleep on the count without a nap.  It follows seqlock.c's
 * sleep protocol (announce the odd count in wake_from as a monotone max,
 * seq_cst fence, look again, FUTEX_WAIT on the count's low half) but
 * sleeps until woken or GIVE_UP_NS, where a real reader looks again every
 * SEQLOCK_READER_NAP_MS.  A section end that forgets to wake it shows as a
 * stall of seconds, not the milliseconds a real reader's nap would hide. */
struct sleeper {
    seqlock_t *sl;
    pthread_t thread;
    int started;
    _Atomic int64_t done_at_ns;
};

static void *
sleeper_main(void *arg)
{
    struct sleeper *s = arg;
    seqlock_t *sl = s->sl;
    uint64_t seq = seqlock_sequence(sl);
    uint64_t cur = atomic_load(&sl->wake_from);
    while (cur < seq && !atomic_compare_exchange_weak(&sl->wake_from, &cur,
                                                      seq)) {
    }
    atomic_thread_fence(memory_order_seq_cst);
    int64_t give_up = now_ns() + GIVE_UP_NS;
    while ((seq & 1u) && seqlock_sequence(sl) == seq) {
        int64_t left = give_up - now_ns();
        if (left <= 0) {
            break;
        }
        struct timespec ts = {(time_t)(left / SEC), (long)(left % SEC)};
        (void)syscall(SYS_futex, count_low_half(sl), FUTEX_WAIT,
                      (uint32_t)seq, &ts, NULL, 0);
    }
    atomic_store(&s->done_at_ns, now_ns());
    return NULL;
}

/* A reader about to sleep has announced the odd count in wake_from. */
static int
reader_is_asleep(void *arg)
{
    seqlock_t *sl = arg;
    uint64_t seq = seqlock_sequence(sl);
    return (seq & 1u) && atomic_load(&sl->wake_from) >= seq;
}

/* A writer about to sleep on the holder's beacon sets FUTEX_WAITERS in it
 * (glibc's layout; elsewhere, give it time to get there). */
static int
writer_is_asleep(void *arg)
{
#if defined(__GLIBC__)
    seqlock_t *sl = arg;
    return (__atomic_load_n(&sl->beacon.__data.__lock, __ATOMIC_RELAXED)
            & FUTEX_WAITERS) != 0;
#else
    (void)arg;
    sleep_ms(100);
    return 1;
#endif
}

/* Nonzero once a waiter has announced its sleep, and a little after, for
 * it to reach the futex call that follows. */
static int
await_asleep(int (*is_asleep)(void *), seqlock_t *sl)
{
    int asleep = poll_until(is_asleep, sl);
    sleep_ms(20);
    return asleep;
}

/* Start a sleeper on sl (a section must be open); nonzero once asleep.
 * Whatever it returns, end with sleeper_join(). */
static int
sleeper_start(struct sleeper *s, seqlock_t *sl)
{
    memset(s, 0, sizeof *s);
    s->sl = sl;
    s->started = pthread_create(&s->thread, NULL, sleeper_main, s) == 0;
    return s->started && await_asleep(reader_is_asleep, sl);
}

static void
sleeper_join(struct sleeper *s)
{
    if (s->started) {
        pthread_join(s->thread, NULL);
    }
}

/* ---- child processes ---- */

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

/* Aborted (not hung: the guard's SIGALRM) with a message naming what. */
static int
aborted_saying(const struct child_result *r, const char *what)
{
    return died_of(r, SIGABRT) && strstr(r->stderr_text, what) != NULL;
}

/* The exit code that passes a child's wait status on. */
static int
exit_code_of(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Run body(arg), a test body with CHECKs, and exit with its verdict. */
static _Noreturn void
run_body(void (*body)(void *), void *arg)
{
    current_test_failed = current_test_skipped = 0;
    body(arg);
    fflush(NULL);
    _exit(current_test_skipped ? SKIPPED_EXIT : current_test_failed);
}

/* Fork a child that runs body(arg); returns its pid (or -1), for
 * child_passed(). */
static pid_t
start_child(void (*body)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(CHILD_GUARD_S);
        run_body(body, arg);
    }
    return pid;
}

static int
reap(pid_t pid)
{
    return pid > 0 && waitpid(pid, NULL, 0) == pid;
}

/* SIGKILL a child and reap it (never kill(-1, ...) for a failed fork). */
static int
kill_child(pid_t pid)
{
    return pid > 0 && kill(pid, SIGKILL) == 0 && reap(pid);
}

/* Reap a child from start_child() or start_in_new_pid_namespace():
 * nonzero if its body passed, or skipped (the test is then marked
 * skipped). */
static int
child_passed(pid_t pid)
{
    int status;
    if (pid <= 0 || waitpid(pid, &status, 0) != pid) {
        return 0;
    }
    int code = exit_code_of(status);
    if (code == SKIPPED_EXIT) {
        current_test_skipped = 1;
        return 1;
    }
    if (code != 0) {
        fprintf(stderr, "child process exited %d\n", code);
    }
    return code == 0;
}

static void
idle_until_killed(void *arg)
{
    (void)arg;
    for (;;) {
        pause();
    }
}

/* Start body(arg) as pid 1 of a new PID namespace.  A process that
 * unshares CLONE_NEWPID stays where it is and only its next child starts
 * the new namespace, so this goes through an intermediate child in ours,
 * which waits for the body and exits as it did: pass its pid, returned
 * here, to child_passed().  If the intermediate dies (its own hang guard),
 * the kernel kills the namespace's init (PR_SET_PDEATHSIG) and with it the
 * whole namespace.  As an init, the body ignores its own default-action
 * signals: an abort() there ends in SIGSEGV (exit 139).  Returns -1 with
 * the test marked skipped if namespaces are not permitted here (EPERM,
 * EINVAL), or failed otherwise. */
static pid_t
start_in_new_pid_namespace(void (*body)(void *), void *arg)
{
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        current_test_failed = 1;
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(CHILD_GUARD_S);
        int err = unshare(CLONE_NEWPID) == 0 ? 0 : errno;
        pid_t init = err ? -1 : fork();
        if (init == 0) {
            close(pipefd[1]);
            (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
            run_body(body, arg);
        }
        if (init < 0 && err == 0) {
            err = errno;
        }
        ssize_t ignored = write(pipefd[1], &err, sizeof err);
        (void)ignored;
        int status = 0;
        if (err != 0) {
            _exit(0); /* the parent reads why from the pipe */
        }
        _exit(waitpid(init, &status, 0) == init ? exit_code_of(status) : 1);
    }
    close(pipefd[1]);
    int err = -1;
    ssize_t got = pid > 0 ? read(pipefd[0], &err, sizeof err) : -1;
    close(pipefd[0]);
    if (got == (ssize_t)sizeof err && err == 0) {
        return pid;
    }
    reap(pid);
    if (got == (ssize_t)sizeof err && (err == EPERM || err == EINVAL)) {
        snprintf(skip_reason, SKIP_REASON_SIZE,
                 "unshare(CLONE_NEWPID): %s", strerror(err));
        current_test_skipped = 1;
    }
    else {
        fprintf(stderr, "no new PID namespace: %s\n",
                got == (ssize_t)sizeof err ? strerror(err) : "no answer");
        current_test_failed = 1;
    }
    return -1;
}

/* Make this PID namespace's next new process get pid `pid`.  Returns 0 or
 * an errno (ns_last_pid needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE). */
static int
next_pid_will_be(pid_t pid)
{
    int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
    if (fd < 0) {
        return errno;
    }
    char text[16];
    int n = snprintf(text, sizeof text, "%d", (int)pid - 1);
    int err = write(fd, text, (size_t)n) == n ? 0 : errno;
    close(fd);
    return err;
}

/* ---- memory shared between processes ---- */

enum { WORDS = 4 };
#define RECORD_WORDS WORDS
#include "record_form.h"

struct shared_record {
    seqlock_t lock;
    seqlock_word_t data[WORDS];
    atomic_int step; /* how far the processes sharing it have got */
};

/* A zeroed MAP_SHARED record with an initialised lock, or NULL. */
static struct shared_record *
shared_record_new(void)
{
    struct shared_record *rec = mmap(NULL, sizeof *rec,
                                     PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (rec == MAP_FAILED) {
        return NULL;
    }
    if (seqlock_init(&rec->lock) != 0) {
        munmap(rec, sizeof *rec);
        return NULL;
    }
    return rec;
}

static void
shared_record_free(struct shared_record *rec)
{
    if (rec != NULL) {
        munmap(rec, sizeof *rec);
    }
}

static void
step_to(struct shared_record *rec, int step)
{
    atomic_store(&rec->step, step);
}

struct step_goal {
    struct shared_record *rec;
    int step;
};

static int
step_reached(void *arg)
{
    struct step_goal *g = arg;
    return atomic_load(&g->rec->step) >= g->step;
}

/* Nonzero once another process has taken rec to step (or beyond). */
static int
await_step(struct shared_record *rec, int step)
{
    struct step_goal goal = {rec, step};
    return poll_until(step_reached, &goal);
}

static void
write_record(struct shared_record *rec, uint64_t a, int slowly)
{
    for (int i = 0; i < WORDS; i++) {
        uint64_t word = a + (uint64_t)i * K;
        seqlock_write_copy(&rec->data[i], &word, sizeof word);
        if (slowly && i == WORDS / 2) {
            sleep_ms(1); /* half written: readers must wait or retry */
        }
    }
}


enum hold_kind { WRITE_SECTION, LOCKING_PASS };

/* A child takes rec's lock (a write section that stores half its data, or
 * a locking pass) and dies holding it: it exits, or with sig it sends
 * itself that signal.  Returns its pid once it is dead but not yet reaped
 * (a zombie, waitid WNOWAIT), or -1. */
static pid_t
child_dies_holding(struct shared_record *rec, enum hold_kind how, int sig)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (how == LOCKING_PASS) {
            read_seqlock_excl(&rec->lock);
        }
        else {
            uint64_t half = 1;
            write_seqlock(&rec->lock);
            seqlock_write_copy(rec->data, &half, sizeof half);
        }
        if (sig != 0) {
            kill(getpid(), sig);
        }
        _exit(0);
    }
    siginfo_t info;
    if (pid < 0 || waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT) != 0) {
        return -1;
    }
    return pid;
}

/* A shared record whose lock a reaped child died holding, or NULL. */
static struct shared_record *
record_left_locked_by_dead_child(enum hold_kind how)
{
    struct shared_record *rec = shared_record_new();
    if (rec != NULL && !reap(child_dies_holding(rec, how, 0))) {
        shared_record_free(rec);
        return NULL;
    }
    return rec;
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

/* ==== waking sleepers ==== */

static void
test_unlock_wakes_writer_asleep_on_the_lock(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    struct waiter w = {.sl = &sl};
    CHECK(holder_start(&h, &sl));
    CHECK(start_waiter(&w, writer_waiter_main));
    /* Past spinning and yielding, into the futex sleep; then hold on a
     * while longer so that the unlock, not a spin, lets it in. */
    int slept = await_asleep(writer_is_asleep, &sl);
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
    CHECK(!seqlock_is_locked(&sl));
}

static void
test_unlock_lets_in_reader_asleep_on_the_sequence(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    struct waiter r = {.sl = &sl};
    CHECK(holder_start(&h, &sl));
    CHECK(start_waiter(&r, reader_waiter_main));
    int slept = await_asleep(reader_is_asleep, &sl);
    sleep_ms(100);
    int waiting_still = atomic_load(&r.done_at_ns) == 0;
    holder_release(&h);
    pthread_join(r.thread, NULL);
    CHECK(slept);
    CHECK(waiting_still);
    CHECK(r.seq == 2);
    CHECK(atomic_load(&r.done_at_ns) - atomic_load(&h.unlocked_at_ns)
          < PROMPTLY_NS);
}

static void
test_section_end_wakes_a_reader_that_announced_its_sleep(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    struct sleeper s;
    CHECK(holder_start(&h, &sl));
    int slept = sleeper_start(&s, &sl);
    holder_release(&h);
    sleeper_join(&s);
    CHECK(slept);
    CHECK(atomic_load(&s.done_at_ns) - atomic_load(&h.unlocked_at_ns)
          < PROMPTLY_NS);
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
        || !start_waiter(&w, writer_waiter_main)
        || !await_asleep(writer_is_asleep, &interrupted_lock)) {
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
        || !start_waiter(&r, reader_waiter_main)
        || !await_asleep(reader_is_asleep, &interrupted_lock)) {
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

/* ==== readers that wait for news (seqlock_wait_for_change) ==== */

/* A wake-up must come well before a waiter's nap would hide a lost one. */
#define WOKEN_NS (SEQLOCK_WAITER_NAP_MS * MS / 2)

/* A thread in seqlock_wait_for_change(sl, seq, GIVE_UP_NS, cancel). */
struct news_waiter {
    seqlock_t *sl;
    uint64_t seq;
    const _Atomic uint32_t *cancel;
    pthread_t thread;
    int err;
    uint64_t now;
    _Atomic int64_t done_at_ns;
};

static void *
news_waiter_main(void *arg)
{
    struct news_waiter *w = arg;
    w->err = seqlock_wait_for_change(w->sl, w->seq, GIVE_UP_NS, w->cancel,
                                     &w->now);
    atomic_store(&w->done_at_ns, now_ns());
    return NULL;
}

/* A waiter about to sleep has announced the count it saw in wake_from. */
static int
news_waiter_is_asleep(void *arg)
{
    seqlock_t *sl = arg;
    uint64_t announced = atomic_load(&sl->wake_from);
    return announced != 0 && announced >= seqlock_sequence(sl);
}

/* One empty write section; returns when it ended. */
static int64_t
write_once(seqlock_t *sl)
{
    write_seqlock(sl);
    int64_t ended_at = now_ns();
    write_sequnlock(sl);
    return ended_at;
}

/* Write once (so that the waiter's announcement is not wake_from's
 * initial 0), then start a waiter for a change from the count, 2; nonzero
 * once it sleeps.  Whatever it returns, pthread_join() it. */
static int
news_waiter_start(struct news_waiter *w, seqlock_t *sl,
                  const _Atomic uint32_t *cancel)
{
    (void)write_once(sl);
    memset(w, 0, sizeof *w);
    w->sl = sl;
    w->seq = seqlock_sequence(sl);
    w->cancel = cancel;
    if (pthread_create(&w->thread, NULL, news_waiter_main, w) != 0) {
        return 0;
    }
    return await_asleep(news_waiter_is_asleep, sl);
}

static void
test_wait_for_change_returns_at_once_when_a_section_has_ended_since(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    (void)write_once(&sl);
    uint64_t now = 0;
    CHECK(seqlock_wait_for_change(&sl, 0, 0, NULL, &now) == 0);
    CHECK(now == 2);
}

static void
test_wait_for_change_times_out_while_nothing_is_written(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    (void)write_once(&sl);
    uint64_t now = 0;
    CHECK(seqlock_wait_for_change(&sl, 2, 0, NULL, &now) == ETIMEDOUT);
    int64_t start = now_ns();
    CHECK(seqlock_wait_for_change(&sl, 2, 20 * MS, NULL, &now) == ETIMEDOUT);
    CHECK(now_ns() - start >= 20 * MS);
    CHECK(now == 0);
}

static void
test_wait_for_change_does_not_return_for_an_open_section(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct holder h;
    uint64_t now = 0;
    CHECK(holder_start(&h, &sl));
    int during = seqlock_wait_for_change(&sl, 0, 10 * MS, NULL, &now);
    int during_from_odd = seqlock_wait_for_change(&sl, 1, 0, NULL, &now);
    holder_release(&h);
    CHECK(during == ETIMEDOUT);
    CHECK(during_from_odd == ETIMEDOUT);
    CHECK(seqlock_wait_for_change(&sl, 1, 0, NULL, &now) == 0);
    CHECK(now == 2);
}

static void
test_section_end_wakes_a_thread_waiting_for_change(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct news_waiter w;
    int slept = news_waiter_start(&w, &sl, NULL);
    sleep_ms(50);
    int waiting_still = atomic_load(&w.done_at_ns) == 0;
    int64_t ended_at = write_once(&sl);
    pthread_join(w.thread, NULL);
    CHECK(slept);
    CHECK(waiting_still);
    CHECK(w.err == 0);
    CHECK(w.now == 4);
    CHECK(atomic_load(&w.done_at_ns) - ended_at < WOKEN_NS);
}

static void
test_opening_a_section_does_not_wake_a_waiter_for_change(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct news_waiter w;
    int slept = news_waiter_start(&w, &sl, NULL);
    write_seqlock(&sl);
    sleep_ms(50);
    int waiting_in_section = atomic_load(&w.done_at_ns) == 0;
    int64_t ended_at = now_ns();
    write_sequnlock(&sl);
    pthread_join(w.thread, NULL);
    CHECK(slept);
    CHECK(waiting_in_section);
    CHECK(w.err == 0 && w.now == 4);
    CHECK(atomic_load(&w.done_at_ns) - ended_at < WOKEN_NS);
}

static void
test_wait_for_change_is_edeadlk_for_the_lock_holder(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    uint64_t now;
    write_seqlock(&sl);
    int in_section = seqlock_wait_for_change(&sl, 0, GIVE_UP_NS, NULL, &now);
    write_sequnlock(&sl);
    CHECK(in_section == EDEADLK);
    CHECK(seqlock_lock_excl_timed(&sl, 0) == 0);
    int in_locking_pass = seqlock_wait_for_change(&sl, 2, GIVE_UP_NS, NULL,
                                                  &now);
    seqlock_unlock(&sl);
    CHECK(in_locking_pass == EDEADLK);
}

static void
test_wake_waiters_ends_a_cancelled_wait_at_once(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    _Atomic uint32_t cancel = 0;
    struct news_waiter w;
    int slept = news_waiter_start(&w, &sl, &cancel);
    int64_t cancelled_at = now_ns();
    atomic_store(&cancel, 1);
    seqlock_wake_waiters(&sl);
    pthread_join(w.thread, NULL);
    CHECK(slept);
    CHECK(w.err == ECANCELED);
    CHECK(atomic_load(&w.done_at_ns) - cancelled_at < WOKEN_NS);
    CHECK(seqlock_sequence(&sl) == 2);
}

static void
test_wake_waiters_leaves_uncancelled_waiters_waiting(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    struct news_waiter w;
    int slept = news_waiter_start(&w, &sl, NULL);
    seqlock_wake_waiters(&sl);
    sleep_ms(50);
    int waiting_still = atomic_load(&w.done_at_ns) == 0;
    (void)write_once(&sl);
    pthread_join(w.thread, NULL);
    CHECK(slept);
    CHECK(waiting_still);
    CHECK(w.err == 0 && w.now == 4);
}

static void
test_section_end_in_another_process_wakes_a_waiter_for_change(void)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    struct news_waiter w;
    int slept = news_waiter_start(&w, &rec->lock, NULL);
    pid_t child = fork();
    if (child == 0) {
        write_seqlock(&rec->lock);
        write_sequnlock(&rec->lock);
        _exit(0);
    }
    int status = -1;
    if (child > 0) {
        waitpid(child, &status, 0);
    }
    int64_t child_done_at = now_ns();
    pthread_join(w.thread, NULL);
    shared_record_free(rec);
    CHECK(slept);
    CHECK(child > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(w.err == 0 && w.now == 4);
    CHECK(atomic_load(&w.done_at_ns) - child_done_at < WOKEN_NS);
}

/* ---- hostile review of the waiters for news ---- */

/* A waiter for change, started on a count set directly. */
static int
news_waiter_start_at(struct news_waiter *w, seqlock_t *sl, uint64_t seq,
                     const _Atomic uint32_t *cancel)
{
    memset(w, 0, sizeof *w);
    w->sl = sl;
    w->seq = seq;
    w->cancel = cancel;
    return pthread_create(&w->thread, NULL, news_waiter_main, w) == 0;
}

/* A waiter asleep on the odd count 2**64 - 1 (a section open at the top
 * of the count's range) must be woken when that section ends and the count
 * wraps to 0: wake_from + 1 overflowed to 0, so the section end thought
 * nobody slept on it and the waiter slept its whole nap. */
static void
test_section_end_wrapping_the_count_to_zero_wakes_a_waiter(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    (void)write_once(&sl); /* sets the beacon up */
    atomic_store(&sl.seqcount.sequence, UINT64_MAX - 1);
    write_seqlock(&sl); /* count 2**64 - 1 */
    CHECK(seqlock_sequence(&sl) == UINT64_MAX);
    struct news_waiter w;
    int started = news_waiter_start_at(&w, &sl, UINT64_MAX - 1, NULL);
    int slept = started && await_asleep(news_waiter_is_asleep, &sl);
    int64_t ended_at = now_ns();
    write_sequnlock(&sl); /* count wraps to 0 */
    if (started) {
        pthread_join(w.thread, NULL);
    }
    CHECK(slept);
    CHECK(seqlock_sequence(&sl) == 0);
    CHECK(w.err == 0 && w.now == 0);
    CHECK(atomic_load(&w.done_at_ns) - ended_at < WOKEN_NS);
}

/* wake_from is 0 again: the next waiter's announcement shows it asleep. */
static int
news_waiter_announced(void *arg)
{
    return atomic_load(&((seqlock_t *)arg)->wake_from) != 0;
}

/* A cancel that lands just after the waiter looked at *cancel, before its
 * futex wait began, must still end the wait promptly: the wake-up found
 * nobody asleep, the count did not change, and the waiter slept its
 * whole nap (1 s) with the cancel set. */
static void
test_cancel_racing_a_waiter_falling_asleep_ends_it_promptly(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    (void)write_once(&sl);
    int slow = 0, rounds = 0;
    int64_t worst = 0;
    for (; rounds < 40; rounds++) {
        _Atomic uint32_t cancel = 0;
        atomic_store(&sl.wake_from, 0);
        struct news_waiter w;
        if (!news_waiter_start_at(&w, &sl, seqlock_sequence(&sl), &cancel)) {
            break;
        }
        /* the waiter has looked at *cancel and is about to sleep */
        while (!news_waiter_announced(&sl)) {
        }
        int64_t cancelled_at = now_ns();
        atomic_store(&cancel, 1);
        seqlock_wake_waiters(&sl);
        pthread_join(w.thread, NULL);
        int64_t took = atomic_load(&w.done_at_ns) - cancelled_at;
        worst = took > worst ? took : worst;
        slow += took >= WOKEN_NS;
        CHECK(w.err == ECANCELED);
        if (slow >= 2) {
            rounds++;
            break;
        }
    }
    printf("  %d of %d cancels raced the waiter's sleep (worst %.0f ms)\n",
           slow, rounds, (double)worst / MS);
    CHECK(slow == 0);
}

/* A waiter for news on a lock whose writer died inside its section hears
 * EOWNERDEAD, as a timed reader does, rather than sleeping on an odd
 * count that nobody will ever end (for ever, with no timeout). */
static void
test_wait_for_change_reports_eownerdead_for_dead_writer(void)
{
    struct shared_record *rec =
        record_left_locked_by_dead_child(WRITE_SECTION);
    CHECK(rec != NULL);
    uint64_t now = 0;
    int64_t start = now_ns();
    int err = seqlock_wait_for_change(&rec->lock, 0, 3 * SEC, NULL, &now);
    int64_t took = now_ns() - start;
    shared_record_free(rec);
    CHECK(err == EOWNERDEAD);
    CHECK(took < PROMPTLY_NS);
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
    uint64_t seq = seqlock_sequence(&sl);
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
    uint64_t seq = seqlock_sequence(&sl);
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
    uint64_t seq = seqlock_sequence(&sl);
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
    CHECK(handler_seq == (unsigned)seqlock_sequence(&handler_lock));
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
    CHECK(aborted_saying(&r, "read_seqbegin"));
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
    CHECK(aborted_saying(&r, "already holds"));
}

static void
write_sequnlock_without_the_lock(void)
{
    write_sequnlock(&misuse_lock);
}

static void
test_write_sequnlock_without_the_lock_aborts(void)
{
    struct child_result r;
    CHECK(run_in_child(write_sequnlock_without_the_lock, &r));
    CHECK(aborted_saying(&r, "write_sequnlock"));
}

static void
write_sequnlock_in_a_locking_pass(void)
{
    read_seqlock_excl(&misuse_lock);
    write_sequnlock(&misuse_lock);
}

static void
test_write_sequnlock_without_a_section_aborts(void)
{
    struct child_result r;
    CHECK(run_in_child(write_sequnlock_in_a_locking_pass, &r));
    CHECK(aborted_saying(&r, "write_sequnlock"));
}

static void
read_sequnlock_excl_without_the_lock(void)
{
    read_sequnlock_excl(&misuse_lock);
}

static void
test_read_sequnlock_excl_without_the_lock_aborts(void)
{
    struct child_result r;
    CHECK(run_in_child(read_sequnlock_excl_without_the_lock, &r));
    CHECK(aborted_saying(&r, "read_sequnlock_excl"));
}

/* ---- a writer that dies holding the lock ---- */

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

/* ==== regressions: PID namespaces and PID reuse ==== */

/* In a new PID namespace: take rec's lock (step 1) and keep it until
 * step 2. */
static void
hold_until_step_2(void *arg)
{
    struct shared_record *rec = arg;
    CHECK(getpid() == 1);
    write_seqlock(&rec->lock);
    step_to(rec, 1);
    int told = await_step(rec, 2);
    write_sequnlock(&rec->lock);
    CHECK(told);
}

static void
test_writer_in_another_pid_namespace_is_not_taken_over(void)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    pid_t ns = start_in_new_pid_namespace(hold_until_step_2, rec);
    if (ns < 0) {
        shared_record_free(rec);
        return;
    }
    uint64_t seq;
    int held = await_step(rec, 1);
    int as_writer = seqlock_write_lock_timed(&rec->lock, 200 * MS);
    int as_reader = seqlock_read_begin_timed(&rec->lock, 200 * MS, &seq);
    step_to(rec, 2);
    int passed = child_passed(ns);
    uint64_t after = seqlock_sequence(&rec->lock);
    shared_record_free(rec);
    CHECK(held);
    CHECK(as_writer == ETIMEDOUT);
    CHECK(as_reader == ETIMEDOUT);
    CHECK(passed);
    CHECK(after == 2); /* only the holder's own section, closed by it */
}

/* In a new PID namespace, while a writer in ours is slow inside its
 * sections: read until step 2; no accepted snapshot may be torn. */
static void
read_until_step_2(void *arg)
{
    struct shared_record *rec = arg;
    long reads = 0, retries = 0, torn = 0;
    step_to(rec, 1);
    while (atomic_load(&rec->step) < 2) {
        uint64_t snap[WORDS];
        unsigned seq;
        for (;;) {
            seq = read_seqbegin(&rec->lock);
            seqlock_read_copy(snap, rec->data, sizeof snap);
            if (!read_seqretry(&rec->lock, seq)) {
                break;
            }
            retries++;
        }
        reads++;
        torn += !well_formed(snap);
    }
    printf("  reader in its own PID namespace: %ld snapshots, %ld retries, "
           "%ld torn\n", reads, retries, torn);
    CHECK(torn == 0);
    CHECK(reads > 0);
}

static void
test_reader_in_another_pid_namespace_accepts_no_torn_snapshot(void)
{
    enum { SECTIONS = 100 };
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    write_record(rec, 0, 0);
    pid_t ns = start_in_new_pid_namespace(read_until_step_2, rec);
    if (ns < 0) {
        shared_record_free(rec);
        return;
    }
    int reading = await_step(rec, 1);
    for (uint64_t a = 1; reading && a <= SECTIONS; a++) {
        write_seqlock(&rec->lock);
        write_record(rec, a, 1);
        write_sequnlock(&rec->lock);
        sleep_ms(1);
    }
    step_to(rec, 2);
    int passed = child_passed(ns);
    shared_record_free(rec);
    CHECK(reading);
    CHECK(passed);
}

/* Pid 1 of a second PID namespace, while pid 1 of the first holds the
 * lock: its thread id is the holder's, its token is not. */
static void
try_to_take_the_other_pid_1s_lock(void *arg)
{
    struct shared_record *rec = arg;
    CHECK(getpid() == 1);
    int held = await_step(rec, 1);
    int mine = seqlock_held_by_me(&rec->lock);
    int err = seqlock_write_lock_timed(&rec->lock, 200 * MS);
    step_to(rec, 2);
    CHECK(held);
    CHECK(!mine);
    CHECK(err == ETIMEDOUT);
}

static void
try_to_unlock_the_other_pid_1s_lock(void *arg)
{
    struct shared_record *rec = arg;
    CHECK(getpid() == 1);
    int held = await_step(rec, 1);
    int closed = seqlock_close_section(&rec->lock);
    int unlocked = seqlock_unlock(&rec->lock);
    uint64_t seq = seqlock_sequence(&rec->lock);
    step_to(rec, 2);
    CHECK(held);
    CHECK(closed == EPERM);
    CHECK(unlocked == EPERM);
    CHECK(seq == 1);
}

/* Run pid 1 of one new namespace holding rec's lock against pid 1 of
 * another running body. */
static void
pid_1_against_pid_1(void (*body)(void *))
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    pid_t holder = start_in_new_pid_namespace(hold_until_step_2, rec);
    pid_t other = holder < 0 ? -1 : start_in_new_pid_namespace(body, rec);
    if (other < 0) {
        step_to(rec, 2);
        reap(holder);
        shared_record_free(rec);
        return;
    }
    int other_passed = child_passed(other);
    int holder_passed = child_passed(holder);
    shared_record_free(rec);
    CHECK(other_passed);
    CHECK(holder_passed);
}

static void
test_pid_1_of_another_namespace_does_not_take_pid_1s_lock(void)
{
    pid_1_against_pid_1(try_to_take_the_other_pid_1s_lock);
}

static void
test_pid_1_of_another_namespace_cannot_unlock_pid_1s_lock(void)
{
    pid_1_against_pid_1(try_to_unlock_the_other_pid_1s_lock);
}

/* As pid 1 of a new namespace, sleep waiting for the other pid 1's lock
 * until killed. */
static void
wait_for_the_other_pid_1s_lock(void *arg)
{
    struct shared_record *rec = arg;
    CHECK(getpid() == 1);
    CHECK(await_step(rec, 1));
    (void)seqlock_write_lock_timed(&rec->lock, GIVE_UP_NS);
}

/* The kernel marks a robust mutex dead when a thread dies with it as its
 * pending lock operation and the word holds the thread's own id: a waiter
 * asleep inside pthread_mutex_lock() is such a thread, and pid 1 of one
 * namespace has pid 1 of another's id.  Writers never sleep there. */
static void
test_waiter_with_the_holders_id_killed_asleep_leaves_the_lock_alive(void)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    pid_t holder = start_in_new_pid_namespace(hold_until_step_2, rec);
    pid_t waiter = holder < 0 ? -1
                              : start_in_new_pid_namespace(
                                    wait_for_the_other_pid_1s_lock, rec);
    if (waiter < 0) {
        step_to(rec, 2);
        if (holder >= 0) {
            reap(holder);
        }
        shared_record_free(rec);
        return;
    }
    int asleep = await_asleep(writer_is_asleep, &rec->lock);
    kill_child(waiter);
    sleep_ms(200); /* its pid 1 dies of the parent's death signal */
    int marked_dead = seqlock_owner_died(&rec->lock);
    int err = seqlock_write_lock_timed(&rec->lock, 200 * MS);
    if (err == 0 || err == EOWNERDEAD) {
        write_sequnlock(&rec->lock);
    }
    step_to(rec, 2);
    int holder_passed = child_passed(holder);
    shared_record_free(rec);
    CHECK(asleep);
    CHECK(!marked_dead);
    CHECK(err == ETIMEDOUT);
    CHECK(holder_passed);
}

/* As pid 1 of a new namespace: a writer (pid 2) is killed holding the
 * lock and reaped; its pid goes to an unrelated live process; only then do
 * a reader and a writer come, and both hear EOWNERDEAD at once. */
static void
reuse_a_dead_writers_pid(void *arg)
{
    struct shared_record *rec = arg;
    pid_t dead = child_dies_holding(rec, WRITE_SECTION, SIGKILL);
    CHECK(reap(dead));
    int err = next_pid_will_be(dead);
    if (err != 0) {
        SKIP("cannot write /proc/sys/kernel/ns_last_pid: %s", strerror(err));
    }
    pid_t reuser = start_child(idle_until_killed, NULL);
    if (reuser != dead) {
        kill_child(reuser);
        SKIP("the new process got pid %d, not the dead writer's %d",
             (int)reuser, (int)dead);
    }
    uint64_t seq;
    int64_t start = now_ns();
    int as_reader = seqlock_read_begin_timed(&rec->lock, GIVE_UP_NS, &seq);
    int64_t reader_took = now_ns() - start;
    start = now_ns();
    int as_writer = seqlock_write_lock_timed(&rec->lock, GIVE_UP_NS);
    int64_t writer_took = now_ns() - start;
    int reuser_alive = kill(reuser, 0) == 0;
    kill_child(reuser);
    printf("  dead writer's pid %d reused: reader told EOWNERDEAD in %.1f "
           "us, writer in %.1f us\n", (int)dead, us_of(reader_took),
           us_of(writer_took));
    CHECK(reuser_alive);
    CHECK(as_reader == EOWNERDEAD);
    CHECK(reader_took < PROMPTLY_NS);
    CHECK(as_writer == EOWNERDEAD);
    CHECK(writer_took < PROMPTLY_NS);
    CHECK(seqlock_sequence(&rec->lock) == 1);
    write_sequnlock(&rec->lock);
}

static void
test_dead_writer_whose_pid_was_reused_is_still_seen_dead(void)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    pid_t ns = start_in_new_pid_namespace(reuse_a_dead_writers_pid, rec);
    int passed = ns < 0 || child_passed(ns);
    shared_record_free(rec);
    CHECK(passed);
}

/* ==== regressions: async-signal safety of readers ==== */

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

/* ==== regressions: sleepers and wake-ups ==== */

static void
read_once(void *arg)
{
    struct shared_record *rec = arg;
    (void)read_seqbegin(&rec->lock);
}

/* A shared record whose first section (count 1) had a reader process
 * asleep on it, killed by SIGKILL while asleep; or NULL. */
static struct shared_record *
record_after_reader_killed_asleep(void)
{
    struct shared_record *rec = shared_record_new();
    if (rec == NULL) {
        return NULL;
    }
    write_seqlock(&rec->lock);
    pid_t reader = start_child(read_once, rec);
    int asleep = await_asleep(reader_is_asleep, &rec->lock);
    int reaped = kill_child(reader);
    write_sequnlock(&rec->lock);
    if (!asleep || !reaped || atomic_load(&rec->lock.wake_from) != 1) {
        shared_record_free(rec);
        return NULL;
    }
    return rec;
}

static void
test_reader_killed_asleep_costs_later_section_ends_no_wake_up(void)
{
    struct shared_record *rec = record_after_reader_killed_asleep();
    CHECK(rec != NULL);
    int below_start = 1;
    for (int i = 0; i < 3; i++) {
        write_seqlock(&rec->lock);
        uint64_t start = seqlock_sequence(&rec->lock) - 1;
        /* what the section's end will compare */
        below_start &= atomic_load(&rec->lock.wake_from) < start;
        write_sequnlock(&rec->lock);
    }
    shared_record_free(rec);
    CHECK(below_start);
}

static void
test_reader_killed_asleep_leaves_later_sleepers_woken(void)
{
    struct shared_record *rec = record_after_reader_killed_asleep();
    CHECK(rec != NULL);
    struct holder h;
    struct sleeper s = {0};
    int held = holder_start(&h, &rec->lock);
    int slept = held && sleeper_start(&s, &rec->lock);
    if (held) {
        holder_release(&h);
    }
    sleeper_join(&s);
    shared_record_free(rec);
    CHECK(held && slept);
    CHECK(atomic_load(&s.done_at_ns) - atomic_load(&h.unlocked_at_ns)
          < PROMPTLY_NS);
}

static void
test_locking_pass_closing_a_dead_writers_section_wakes_sleepers(void)
{
    struct shared_record *rec =
        record_left_locked_by_dead_child(WRITE_SECTION);
    CHECK(rec != NULL);
    struct sleeper s;
    int slept = sleeper_start(&s, &rec->lock);
    int64_t closed_at = now_ns();
    read_seqlock_excl(&rec->lock);
    uint64_t inside = seqlock_sequence(&rec->lock);
    read_sequnlock_excl(&rec->lock);
    sleeper_join(&s);
    shared_record_free(rec);
    CHECK(slept);
    CHECK(inside == 2);
    CHECK(atomic_load(&s.done_at_ns) - closed_at < PROMPTLY_NS);
}

/* One round: a writer asleep in the mutex, another spinning until the
 * holder's unlock begins, so that it usually wins the lock from under the
 * woken sleeper, which must then be woken again.  Nonzero if both got the
 * lock; *wait is how long after the unlock the later one got it. */
static int
sleeper_and_spinner_round(seqlock_t *sl, int64_t *wait, int *spinner_first)
{
    struct holder h;
    struct waiter sleeper = {.sl = sl};
    struct waiter spinner = {.sl = sl, .go = &h.unlocked_at_ns};
    if (!holder_start(&h, sl)) {
        return 0;
    }
    int sleeping = start_waiter(&sleeper, timed_writer_main);
    int asleep = sleeping && await_asleep(writer_is_asleep, sl);
    int spinning = start_waiter(&spinner, timed_writer_main);
    sleep_ms(1);
    holder_release(&h);
    if (sleeping) {
        pthread_join(sleeper.thread, NULL);
    }
    if (spinning) {
        pthread_join(spinner.thread, NULL);
    }
    int64_t slept_done = atomic_load(&sleeper.done_at_ns);
    int64_t spun_done = atomic_load(&spinner.done_at_ns);
    *wait = (slept_done > spun_done ? slept_done : spun_done)
            - atomic_load(&h.unlocked_at_ns);
    *spinner_first = spun_done < slept_done;
    return asleep && spinning && sleeper.err == 0 && spinner.err == 0;
}

static void
test_writer_winning_while_spinning_leaves_a_sleeping_writer_its_wake_up(void)
{
    enum { ROUNDS = 20 };
    seqlock_t sl = SEQLOCK_UNLOCKED;
    int64_t worst = 0;
    int spinner_first = 0, ok = 1;
    for (int i = 0; i < ROUNDS && ok; i++) {
        int64_t wait = 0;
        int first = 0;
        ok = sleeper_and_spinner_round(&sl, &wait, &first)
             && wait < PROMPTLY_NS;
        worst = wait > worst ? wait : worst;
        spinner_first += first;
    }
    printf("  worst wait for both writers after the release: %.1f us; the "
           "spinner got in first in %d of %d rounds\n", us_of(worst),
           spinner_first, ROUNDS);
    CHECK(ok);
    CHECK(seqlock_sequence(&sl) == 6 * ROUNDS);
}

/* ==== regressions: fork and process-private locks ==== */

/* A process-private lock tracked for fork repair; its undo counts, and
 * notes whether a section was open when it was called. */
struct tracked {
    seqlock_t lock;
    seqlock_private_t entry;
    int undos;
    int undo_saw_a_section;
};

static void
count_undo(void *arg)
{
    struct tracked *t = arg;
    t->undos++;
    t->undo_saw_a_section = (int)(seqlock_sequence(&t->lock) & 1u);
}

static void
track(struct tracked *t)
{
    seqlock_track_private(&t->entry, &t->lock, count_undo, t);
}

/* Fork, with body(t) run in the child while the lock is as the caller
 * left it; then untrack t in the parent.  Nonzero if the child passed. */
static int
child_of_fork_passes(void (*body)(void *), struct tracked *t)
{
    pid_t child = start_child(body, t);
    seqlock_untrack_private(&t->entry);
    return child_passed(child);
}

static void
forking_threads_section_goes_on(void *arg)
{
    struct tracked *t = arg;
    CHECK(seqlock_held_by_me(&t->lock));
    CHECK(seqlock_sequence(&t->lock) == 1);
    write_sequnlock(&t->lock); /* aborts if the child lost the lock */
    CHECK(seqlock_sequence(&t->lock) == 2);
    CHECK(!seqlock_is_locked(&t->lock));
    CHECK(t->undos == 0);
}

static void
test_fork_leaves_the_forking_threads_lock_held_by_it_in_the_child(void)
{
    static struct tracked t = {.lock = SEQLOCK_UNLOCKED};
    track(&t);
    write_seqlock(&t.lock);
    int passed = child_of_fork_passes(forking_threads_section_goes_on, &t);
    write_sequnlock(&t.lock);
    CHECK(passed);
}

static void
other_threads_section_was_undone(void *arg)
{
    struct tracked *t = arg;
    CHECK(t->undos == 1);
    CHECK(seqlock_sequence(&t->lock) == 2);
    CHECK(!seqlock_is_locked(&t->lock));
    CHECK(write_tryseqlock(&t->lock));
    write_sequnlock(&t->lock);
}

static void
test_fork_undoes_and_releases_another_threads_section_in_the_child(void)
{
    static struct tracked t = {.lock = SEQLOCK_UNLOCKED};
    struct holder h;
    CHECK(holder_start(&h, &t.lock));
    track(&t);
    int passed = child_of_fork_passes(other_threads_section_was_undone, &t);
    holder_release(&h);
    CHECK(passed);
}

static void
other_threads_locking_pass_was_released(void *arg)
{
    struct tracked *t = arg;
    CHECK(t->undos == 1 && !t->undo_saw_a_section);
    CHECK(seqlock_sequence(&t->lock) == 0);
    CHECK(!seqlock_is_locked(&t->lock));
}

static void
test_fork_releases_another_threads_locking_pass_after_its_repair(void)
{
    static struct tracked t = {.lock = SEQLOCK_UNLOCKED};
    struct holder h = {.sl = &t.lock, .excl = 1};
    CHECK(holder_run(&h));
    track(&t);
    int passed = child_of_fork_passes(other_threads_locking_pass_was_released,
                                      &t);
    holder_release(&h);
    CHECK(passed);
}

static void
new_thread_waits_for_forking_threads_section(void *arg)
{
    struct tracked *t = arg;
    struct waiter r = {.sl = &t->lock};
    CHECK(start_waiter(&r, reader_waiter_main));
    sleep_ms(100);
    int waiting_still = atomic_load(&r.done_at_ns) == 0;
    int64_t unlocked_at = now_ns();
    write_sequnlock(&t->lock);
    pthread_join(r.thread, NULL);
    CHECK(waiting_still);
    CHECK(r.seq == 2);
    CHECK(atomic_load(&r.done_at_ns) >= unlocked_at);
}

static void
test_thread_started_in_the_child_waits_for_the_forking_threads_section(void)
{
    static struct tracked t = {.lock = SEQLOCK_UNLOCKED};
    track(&t);
    write_seqlock(&t.lock);
    int passed =
        child_of_fork_passes(new_thread_waits_for_forking_threads_section, &t);
    write_sequnlock(&t.lock);
    CHECK(passed);
}

static void
twice_tracked_locks_repaired_once(void *arg)
{
    struct tracked *t = arg; /* t[0]: the forking thread's; t[1]: not */
    CHECK(seqlock_held_by_me(&t[0].lock));
    write_sequnlock(&t[0].lock);
    CHECK(t[0].undos == 0);
    CHECK(t[1].undos == 1);
    CHECK(seqlock_sequence(&t[1].lock) == 2);
    CHECK(!seqlock_is_locked(&t[1].lock));
}

static void
test_tracking_a_lock_twice_is_harmless(void)
{
    static struct tracked t[2] = {{.lock = SEQLOCK_UNLOCKED},
                                  {.lock = SEQLOCK_UNLOCKED}};
    static seqlock_private_t again[2];
    struct holder h;
    CHECK(holder_start(&h, &t[1].lock));
    for (int i = 0; i < 2; i++) {
        track(&t[i]);
        seqlock_track_private(&again[i], &t[i].lock, count_undo, &t[i]);
    }
    write_seqlock(&t[0].lock);
    pid_t child = start_child(twice_tracked_locks_repaired_once, t);
    for (int i = 0; i < 2; i++) {
        seqlock_untrack_private(&t[i].entry);
        seqlock_untrack_private(&again[i]);
    }
    write_sequnlock(&t[0].lock);
    holder_release(&h);
    CHECK(child_passed(child));
}

static void
shared_lock_stays_held(void *arg)
{
    struct shared_record *rec = arg;
    CHECK(!seqlock_held_by_me(&rec->lock));
    CHECK(seqlock_write_lock_timed(&rec->lock, 100 * MS) == ETIMEDOUT);
}

static void
test_fork_leaves_an_untracked_shared_lock_held_by_the_parents_thread(void)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    struct holder h;
    int held = holder_start(&h, &rec->lock);
    int passed = held && child_passed(start_child(shared_lock_stays_held,
                                                  rec));
    if (held) {
        holder_release(&h);
    }
    uint64_t after = seqlock_sequence(&rec->lock);
    shared_record_free(rec);
    CHECK(held);
    CHECK(passed);
    CHECK(after == 2);
}

/* ==== regressions: the 64-bit count ==== */

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

/* ==== regressions: a dead locking pass ==== */

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

/* ==== the gaps: a holder between its lock word and its beacon ==== */

/* Make sl look held by `token` in a gap: the word set, the beacon free
 * (as between a holder's compare-and-swap and its beacon). */
static void
enter_a_gap_as(seqlock_t *sl, uint64_t token)
{
    atomic_store(&sl->holder, token);
    atomic_fetch_add(&sl->gaps, 1);
}

static void
test_a_holder_gone_in_its_gap_is_taken_over_after_the_gap_timeout(void)
{
    /* Nothing to repair (a gap's holder opened no section): taken, not
     * taken over. */
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    enter_a_gap_as(&sl, 42);
    int early = seqlock_lock_excl_timed(&sl, 0); /* starts watching */
    int later = seqlock_lock_excl_timed(&sl, GIVE_UP_NS);
    if (later == EOWNERDEAD || later == 0) {
        seqlock_unlock(&sl);
    }
    CHECK(early == ETIMEDOUT);
    CHECK(later == 0);
    CHECK(seqlock_sequence(&sl) == 0);
}

static void
test_a_gap_that_leaves_the_count_odd_is_taken_over_for_repair(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    atomic_store(&sl.seqcount.sequence, 7); /* as no live holder leaves it */
    enter_a_gap_as(&sl, 42);
    int err = seqlock_lock_excl_timed(&sl, GIVE_UP_NS);
    if (err == EOWNERDEAD || err == 0) {
        seqlock_close_section(&sl);
        seqlock_unlock(&sl);
    }
    CHECK(err == EOWNERDEAD);
    CHECK(seqlock_sequence(&sl) == 8);
}

static void
test_a_holder_seen_in_two_different_gaps_is_not_taken_for_gone(void)
{
    /* One holder's consecutive sections pass through gaps of their own: a
     * waiter that saw it in one gap and, longer than the gap timeout
     * later, in another must not add the two up (once, a live writer lost
     * its lock that way). */
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    enter_a_gap_as(&sl, 42);
    int first = seqlock_lock_excl_timed(&sl, 0); /* starts watching */
    sleep_ms(5);
    enter_a_gap_as(&sl, 42); /* its next section's gap */
    int second = seqlock_lock_excl_timed(&sl, 0);
    if (second == EOWNERDEAD || second == 0) {
        seqlock_unlock(&sl);
    }
    CHECK(first == ETIMEDOUT);
    CHECK(second == ETIMEDOUT);
}

/* A holder found in a gap (word held, beacon free): if it recorded that it
 * lives in our PID namespace, /proc tells whether it is alive; a dead one
 * is taken over at once, a live one never (it is preempted or stopped in
 * its gap, or its beacon's word was rewritten: it will finish); one of
 * another namespace, or whose record is not its own, after 100 ms. */
static uint64_t
our_pid_namespace(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* /proc/self/task/<tid>/stat's start time (field 22) of thread tid. */
static uint64_t
thread_started_at(pid_t tid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    for (int field = 2; p != NULL && field < 22; field++) {
        p = strchr(p + 1, ' ');
    }
    return p == NULL ? 0 : strtoull(p + 1, NULL, 10);
}

static void
enter_a_gap_of(seqlock_t *sl, uint64_t token, uint64_t pid_ns, pid_t tid,
               uint64_t started)
{
    atomic_store(&sl->owner.token, 0);
    atomic_store(&sl->owner.pid_ns, pid_ns);
    atomic_store(&sl->owner.started, started);
    atomic_store(&sl->owner.tid, (uint32_t)tid);
    atomic_store(&sl->owner.token, token);
    enter_a_gap_as(sl, token);
}

static void
test_a_dead_gap_holder_of_our_namespace_is_taken_over_at_once(void)
{
    uint64_t ns = our_pid_namespace();
    if (ns == 0) {
        SKIP("/proc/self/ns/pid cannot be read here");
    }
    pid_t child = fork();
    if (child == 0) {
        _exit(0);
    }
    CHECK(child > 0);
    uint64_t started = thread_started_at(child); /* a zombie's, till reaped */
    CHECK(reap(child));
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    enter_a_gap_of(&sl, 41, ns, child, started);
    int64_t t0 = now_ns();
    int err = seqlock_lock_excl_timed(&sl, 50 * MS);
    int64_t took = now_ns() - t0;
    if (err == 0 || err == EOWNERDEAD) {
        seqlock_unlock(&sl);
    }
    printf("  gap of a dead holder of our namespace taken over after %.1f "
           "us\n", us_of(took));
    CHECK(err == 0);
}

static void
test_a_live_gap_holder_of_our_namespace_is_never_taken_over(void)
{
    uint64_t ns = our_pid_namespace();
    if (ns == 0) {
        SKIP("/proc/self/ns/pid cannot be read here");
    }
    pid_t me = (pid_t)syscall(SYS_gettid);
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    enter_a_gap_of(&sl, 42, ns, me, thread_started_at(me));
    int err = seqlock_lock_excl_timed(&sl, 150 * MS); /* past GAP_NS */
    if (err == 0 || err == EOWNERDEAD) {
        seqlock_unlock(&sl);
    }
    CHECK(err == ETIMEDOUT);
}

static void
test_a_gap_holder_of_another_namespace_is_taken_over_after_the_gap_timeout(
    void)
{
    uint64_t ns = our_pid_namespace();
    pid_t me = (pid_t)syscall(SYS_gettid);
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    enter_a_gap_of(&sl, 43, ns + 1, me, thread_started_at(me));
    int early = seqlock_lock_excl_timed(&sl, 50 * MS);
    int later = seqlock_lock_excl_timed(&sl, GIVE_UP_NS);
    if (later == 0 || later == EOWNERDEAD) {
        seqlock_unlock(&sl);
    }
    CHECK(early == ETIMEDOUT);
    CHECK(later == 0);
}

static void
test_a_holder_records_who_it_is_when_it_takes_the_word(void)
{
    uint64_t ns = our_pid_namespace();
    if (ns == 0) {
        SKIP("/proc/self/ns/pid cannot be read here");
    }
    pid_t me = (pid_t)syscall(SYS_gettid);
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    CHECK(seqlock_lock_excl_timed(&sl, 0) == 0);
    struct seqlock_owner o;
    memcpy(&o, &sl.owner, sizeof o);
    seqlock_unlock(&sl);
    CHECK(atomic_load(&o.token) == seqlock_self());
    CHECK(atomic_load(&o.pid_ns) == ns);
    CHECK(atomic_load(&o.tid) == (uint32_t)me);
    CHECK(atomic_load(&o.started) == thread_started_at(me));
}

static void
test_a_forks_child_records_itself_not_its_parents_thread(void)
{
    /* After fork() the child's only thread has another id and start time:
     * a record naming the parent's would make a waiter think the child,
     * dead in a gap, alive (the parent's thread lives on). */
    uint64_t ns = our_pid_namespace();
    if (ns == 0) {
        SKIP("/proc/self/ns/pid cannot be read here");
    }
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    CHECK(seqlock_lock_excl_timed(&rec->lock, 0) == 0); /* the parent's */
    seqlock_unlock(&rec->lock);
    pid_t child = fork();
    if (child == 0) {
        int ok = seqlock_lock_excl_timed(&rec->lock, GIVE_UP_NS) == 0;
        if (ok) {
            seqlock_unlock(&rec->lock);
        }
        _exit(ok ? 0 : 1);
    }
    CHECK(child > 0);
    CHECK(child_passed(child));
    uint32_t recorded = atomic_load(&rec->lock.owner.tid);
    shared_record_free(rec);
    CHECK(recorded == (uint32_t)child);
}

static void *
hold_for_a_while(void *arg)
{
    seqlock_t *sl = arg;
    if (seqlock_write_lock_timed(sl, 0) != 0) {
        return NULL;
    }
    sleep_ms(300);
    seqlock_close_section(sl);
    seqlock_unlock(sl);
    return NULL;
}

static void
test_an_owner_died_bit_written_into_a_live_holders_beacon_is_no_death(void)
{
    /* The kernel's mark clears the dead thread's id from the word; a word
     * with the bit and an id is another process's scribble: glibc would
     * hand the live holder's beacon to the next taker. */
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, hold_for_a_while, &sl) == 0);
    while (!seqlock_is_locked(&sl)) {
        sched_yield();
    }
    sleep_ms(20);
    __atomic_fetch_or(&sl.beacon.__data.__lock, FUTEX_OWNER_DIED,
                      __ATOMIC_RELAXED);
    int died = seqlock_owner_died(&sl);
    int err = seqlock_lock_excl_timed(&sl, 50 * MS);
    if (err == 0 || err == EOWNERDEAD) {
        seqlock_unlock(&sl);
    }
    pthread_join(t, NULL);
    int after = seqlock_write_lock_timed(&sl, GIVE_UP_NS);
    if (after == 0 || after == EOWNERDEAD) {
        write_sequnlock(&sl);
    }
    CHECK(!died);
    CHECK(err == ETIMEDOUT);
    CHECK(after == 0);
}

static void
test_a_ready_word_zeroed_on_a_used_lock_never_remakes_its_beacon(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    write_seqlock(&sl);
    write_sequnlock(&sl);
    atomic_store(&sl.ready, 0);
    int err = seqlock_lock_excl_timed(&sl, 0);
    CHECK(err == EINVAL);
}

/* ==== record.h: a record kept as a latch ==== */

/* A record of one 8-byte field: committed value 1, then a section that
 * stored 2 into copy 0 and stopped where `stage` says (as a writer that
 * died there would leave it): 0 inside the section, 1 after closing it
 * but before record_finish(). */
static record_view
record_left_at(int stage)
{
    static const char layout[] = "x:q";
    size_t size = record_size(sizeof layout - 1, 8);
    record_header *h = aligned_alloc(64, record_round_up(size, 64));
    record_view none = {0};
    if (h == NULL || record_init(h, layout, sizeof layout - 1, 8) != 0) {
        free(h);
        return none;
    }
    record_view v = record_view_of(h, sizeof layout - 1, 8);
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

/* ==== a lock in memory other processes may rewrite ==== */

/* Any process that maps a lock may write its words at any moment.  What
 * the holder believes comes from its own memory; glibc is never handed a
 * beacon of another kind; no rewrite makes a call wait past its timeout. */

static void
test_what_a_thread_holds_does_not_rest_on_the_holder_word(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    CHECK(seqlock_write_lock_timed(&sl, 0) == 0);
    atomic_store(&sl.holder, 0x1234); /* another process's scribble */
    int held = seqlock_held(&sl);
    int closed = seqlock_close_section(&sl);
    int unlocked = seqlock_unlock(&sl);
    int later = seqlock_lock_excl_timed(&sl, GIVE_UP_NS); /* a gap, then */
    if (later == 0 || later == EOWNERDEAD) {
        seqlock_unlock(&sl);
    }
    CHECK(held == SEQLOCK_HOLDS_SECTION);
    CHECK(closed == 0 && unlocked == 0);
    CHECK(later == 0);
}

static void
test_another_threads_lock_is_not_mine_whatever_the_holder_word_says(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    atomic_store(&sl.holder, seqlock_self()); /* as if ours */
    int held = seqlock_held(&sl);
    int closed = seqlock_close_section(&sl);
    int unlocked = seqlock_unlock(&sl);
    CHECK(held == SEQLOCK_HOLDS_NOTHING);
    CHECK(closed == EPERM && unlocked == EPERM);
}

static void
test_a_section_closes_at_its_opening_count_plus_2_whatever_the_count_says(
    void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    atomic_store(&sl.seqcount.sequence, 10);
    CHECK(seqlock_write_lock_timed(&sl, 0) == 0);
    atomic_store(&sl.seqcount.sequence, 4); /* flipped even mid-section */
    int closed = seqlock_close_section(&sl);
    uint64_t after = seqlock_sequence(&sl);
    int unlocked = seqlock_unlock(&sl);
    CHECK(closed == 0 && unlocked == 0);
    CHECK(after == 12);
}

static void
test_a_beacon_of_another_kind_is_einval_not_handed_to_glibc(void)
{
    /* glibc asserts on a priority-protect kind (0x40): SIGABRT */
    static const int kinds[] = {0x40, 0xc0, 0x20, 0, 0x12345678};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        seqlock_t sl;
        CHECK(seqlock_init(&sl) == 0);
        int good = seqlock_check(&sl);
        sl.beacon.__data.__kind = kinds[i];
        int checked = seqlock_check(&sl);
        int tried = seqlock_lock_excl_timed(&sl, 0);
        int waited = seqlock_lock_excl_timed(&sl, 20 * MS);
        CHECK(good == 0 && checked == EINVAL);
        CHECK(tried == EINVAL && waited == EINVAL);
    }
}

/* 1 if the calling thread's robust list (the kernel's view) links the
 * beacon of sl. */
static int
robust_list_links(const seqlock_t *sl)
{
    struct robust_list_head *head;
    size_t len;
    if (syscall(SYS_get_robust_list, 0, &head, &len) != 0) {
        return -1;
    }
    const struct robust_list *entry = head->list.next;
    for (int n = 0; entry != &head->list && n < 4096; n++) {
        if ((const char *)entry + head->futex_offset
            == (const char *)&sl->beacon.__data.__lock) {
            return 1;
        }
        entry = entry->next;
    }
    return 0;
}

static void
test_a_beacon_word_rewritten_during_a_section_is_still_released(void)
{
    /* glibc refuses (EPERM) to unlock a mutex whose word names another
     * thread, and leaves it on the robust list, where the kernel and the
     * next robust mutex would follow it into memory since freed. */
    seqlock_t *sl = malloc(sizeof *sl);
    CHECK(sl != NULL && seqlock_init(sl) == 0);
    CHECK(seqlock_write_lock_timed(sl, 0) == 0);
    int linked = robust_list_links(sl);
    __atomic_fetch_add(&sl->beacon.__data.__lock, 1, __ATOMIC_RELAXED);
    sl->beacon.__data.__owner += 7;
    int unlocked = seqlock_unlock(sl);
    int still_linked = robust_list_links(sl);
    free(sl);
    CHECK(linked == 1);
    CHECK(unlocked == 0);
    CHECK(still_linked == 0);
}

static void
test_a_ready_word_rewritten_never_makes_a_taker_spin(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    atomic_store(&sl.ready, 1); /* "being set up by a first taker" */
    int64_t t0 = now_ns();
    int tried = seqlock_lock_excl_timed(&sl, 0);
    int waited = seqlock_lock_excl_timed(&sl, 20 * MS);
    int64_t took = now_ns() - t0;
    atomic_store(&sl.ready, 0xdeadbeef);
    int garbage = seqlock_lock_excl_timed(&sl, -1);
    CHECK(tried == ETIMEDOUT && waited == ETIMEDOUT);
    CHECK(took < PROMPTLY_NS);
    CHECK(garbage == EINVAL);
}

static void
test_a_wait_through_death_is_not_told_eownerdead(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    atomic_store(&sl.seqcount.sequence, 5);
    atomic_store(&sl.abandoned, 1);
    uint64_t now = 0;
    int told = seqlock_wait_for_change_flags(&sl, 4, 0, NULL, 0, &now);
    int through = seqlock_wait_for_change_flags(
        &sl, 4, 20 * MS, NULL, SEQLOCK_WAIT_THROUGH_DEATH, &now);
    CHECK(told == EOWNERDEAD);
    CHECK(through == ETIMEDOUT);
}

struct read_only_waiter {
    const seqlock_t *sl;
    int err;
    uint64_t now;
};

static void *
read_only_waiter_main(void *arg)
{
    struct read_only_waiter *w = arg;
    w->err = seqlock_wait_for_change_flags(
        w->sl, 0, GIVE_UP_NS, NULL,
        SEQLOCK_WAIT_READ_ONLY | SEQLOCK_WAIT_THROUGH_DEATH, &w->now);
    return NULL;
}

static void
test_a_read_only_waiter_writes_nothing_and_sees_the_news(void)
{
    /* One page mapped twice: writable for the writer, read-only for the
     * waiter, which would die of SIGSEGV if it wrote (announced itself). */
    int fd = memfd_create("seqlock-read-only", 0);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, 4096) == 0);
    seqlock_t *rw = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                         0);
    const seqlock_t *ro = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(rw != MAP_FAILED && ro != MAP_FAILED);
    CHECK(seqlock_init(rw) == 0);
    uint64_t wake_from = atomic_load(&rw->wake_from);
    struct read_only_waiter w = {ro, -1, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, read_only_waiter_main, &w) == 0);
    sleep_ms(30);
    write_seqlock(rw);
    write_sequnlock(rw);
    pthread_join(t, NULL);
    uint64_t announced = atomic_load(&rw->wake_from);
    munmap(rw, 4096);
    munmap((void *)ro, 4096);
    CHECK(w.err == 0 && w.now == 2);
    CHECK(announced == wake_from); /* nothing written */
}

static void
test_record_matches_refuses_a_beacon_of_another_kind(void)
{
    static const char layout[] = "x:q";
    size_t size = record_size(sizeof layout - 1, 8);
    record_header *h = aligned_alloc(64, record_round_up(size, 64));
    CHECK(h != NULL);
    CHECK(record_init(h, layout, sizeof layout - 1, 8) == 0);
    int good = record_matches(h, size, layout, sizeof layout - 1, 8);
    h->lock.beacon.__data.__kind = 0x40;
    int bad = record_matches(h, size, layout, sizeof layout - 1, 8);
    free(h);
    CHECK(good == RECORD_MATCHES);
    CHECK(bad == RECORD_BROKEN_LOCK);
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
    TEST(test_read_seqbegin_returns_even_sequence, PLAIN),
    TEST(test_read_seqretry_is_zero_without_intervening_write, PLAIN),
    TEST(test_read_seqretry_is_nonzero_after_intervening_write, PLAIN),
    TEST(test_read_seqretry_is_nonzero_while_write_in_progress, PLAIN),
    TEST(test_read_try_begin_succeeds_with_even_sequence_when_no_writer,
         PLAIN),
    TEST(test_read_try_begin_fails_without_waiting_during_write, PLAIN),
    TEST(test_read_retry_is_nonzero_after_intervening_write, PLAIN),
    TEST(test_write_copy_then_read_copy_round_trips_whole_words, PLAIN),
    TEST(test_write_copy_of_partial_last_word_keeps_bytes_past_nbytes,
         PLAIN),
    TEST(test_read_copy_of_partial_last_word_writes_only_nbytes, PLAIN),
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
    TEST(test_read_begin_timed_returns_even_sequence_when_no_writer, PLAIN),
    TEST(test_read_begin_timed_times_out_while_another_thread_writes, PLAIN),
    TEST(test_read_begin_timed_reports_edeadlk_to_the_writer, PLAIN),
    TEST(test_unlock_wakes_writer_asleep_on_the_lock, PLAIN),
    TEST(test_unlock_lets_in_reader_asleep_on_the_sequence, PLAIN),
    TEST(test_section_end_wakes_a_reader_that_announced_its_sleep, PLAIN),
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
    TEST(test_write_sequnlock_without_the_lock_aborts, FORKS_OR_SIGNALS),
    TEST(test_write_sequnlock_without_a_section_aborts, FORKS_OR_SIGNALS),
    TEST(test_read_sequnlock_excl_without_the_lock_aborts, FORKS_OR_SIGNALS),
    TEST(test_timed_reader_reports_eownerdead_for_dead_writer,
         FORKS_OR_SIGNALS),
    TEST(test_timed_reader_reports_eownerdead_for_unreaped_dead_writer,
         FORKS_OR_SIGNALS),
    TEST(test_owner_died_is_set_by_the_holders_death_until_taken_over,
         FORKS_OR_SIGNALS),
    TEST(test_is_locked_stays_set_for_a_dead_holder_until_taken_over,
         FORKS_OR_SIGNALS),
    TEST(test_timed_writer_takes_over_from_dead_writer, FORKS_OR_SIGNALS),
    TEST(test_lock_excl_timed_reports_eownerdead_with_the_dead_section_open,
         FORKS_OR_SIGNALS),
    TEST(test_write_tryseqlock_takes_over_from_dead_writer, FORKS_OR_SIGNALS),
    TEST(test_lock_works_normally_after_dead_writer_is_repaired,
         FORKS_OR_SIGNALS),
    TEST(test_read_seqlock_excl_closes_a_dead_writers_section,
         FORKS_OR_SIGNALS),
    TEST(test_timed_reader_reports_eownerdead_for_exited_thread, PLAIN),
    TEST(test_writer_asleep_on_the_lock_wakes_at_once_when_the_holder_dies,
         FORKS_OR_SIGNALS),
    TEST(test_reader_asleep_sees_its_writer_die_within_a_nap,
         FORKS_OR_SIGNALS),
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
    /* regressions */
    TEST(test_writer_in_another_pid_namespace_is_not_taken_over,
         FORKS_OR_SIGNALS),
    TEST(test_reader_in_another_pid_namespace_accepts_no_torn_snapshot,
         FORKS_OR_SIGNALS),
    TEST(test_a_holder_gone_in_its_gap_is_taken_over_after_the_gap_timeout,
         PLAIN),
    TEST(test_a_gap_that_leaves_the_count_odd_is_taken_over_for_repair, PLAIN),
    TEST(test_a_holder_seen_in_two_different_gaps_is_not_taken_for_gone,
         PLAIN),
    TEST(test_a_dead_gap_holder_of_our_namespace_is_taken_over_at_once,
         FORKS_OR_SIGNALS),
    TEST(test_a_live_gap_holder_of_our_namespace_is_never_taken_over, PLAIN),
    TEST(test_a_gap_holder_of_another_namespace_is_taken_over_after_the_gap_timeout,
         PLAIN),
    TEST(test_a_holder_records_who_it_is_when_it_takes_the_word, PLAIN),
    TEST(test_a_forks_child_records_itself_not_its_parents_thread,
         FORKS_OR_SIGNALS),
    TEST(test_an_owner_died_bit_written_into_a_live_holders_beacon_is_no_death,
         PLAIN),
    TEST(test_a_ready_word_zeroed_on_a_used_lock_never_remakes_its_beacon,
         PLAIN),
    TEST(test_record_readers_see_the_committed_copy_while_a_section_is_open,
         PLAIN),
    TEST(test_record_repair_inside_a_section_puts_copy_0_back_and_counts_it,
         PLAIN),
    TEST(test_record_repair_after_a_section_finishes_copy_1_and_counts_nothing,
         PLAIN),
    TEST(test_record_abort_puts_copy_0_back_from_copy_1, PLAIN),
    TEST(test_a_record_view_never_reads_its_geometry_from_the_header, PLAIN),
    /* a lock in memory other processes may rewrite */
    TEST(test_what_a_thread_holds_does_not_rest_on_the_holder_word, PLAIN),
    TEST(test_another_threads_lock_is_not_mine_whatever_the_holder_word_says,
         PLAIN),
    TEST(test_a_section_closes_at_its_opening_count_plus_2_whatever_the_count_says,
         PLAIN),
    TEST(test_a_beacon_of_another_kind_is_einval_not_handed_to_glibc, PLAIN),
    TEST(test_a_beacon_word_rewritten_during_a_section_is_still_released,
         PLAIN),
    TEST(test_a_ready_word_rewritten_never_makes_a_taker_spin, PLAIN),
    TEST(test_a_wait_through_death_is_not_told_eownerdead, PLAIN),
    TEST(test_a_read_only_waiter_writes_nothing_and_sees_the_news, PLAIN),
    TEST(test_record_matches_refuses_a_beacon_of_another_kind, PLAIN),
    TEST(test_waiter_with_the_holders_id_killed_asleep_leaves_the_lock_alive,
         FORKS_OR_SIGNALS),
    TEST(test_pid_1_of_another_namespace_does_not_take_pid_1s_lock,
         FORKS_OR_SIGNALS),
    TEST(test_pid_1_of_another_namespace_cannot_unlock_pid_1s_lock,
         FORKS_OR_SIGNALS),
    TEST(test_dead_writer_whose_pid_was_reused_is_still_seen_dead,
         FORKS_OR_SIGNALS),
    TEST(test_allocation_counter_counts_while_in_handler_is_set, PLAIN),
    TEST(test_handler_finding_a_dead_writer_allocates_nothing,
         FORKS_OR_SIGNALS),
    TEST(test_handler_waiting_out_a_live_writer_allocates_nothing,
         FORKS_OR_SIGNALS),
    TEST(test_reader_killed_asleep_costs_later_section_ends_no_wake_up,
         FORKS_OR_SIGNALS),
    TEST(test_reader_killed_asleep_leaves_later_sleepers_woken,
         FORKS_OR_SIGNALS),
    TEST(test_locking_pass_closing_a_dead_writers_section_wakes_sleepers,
         FORKS_OR_SIGNALS),
    TEST(test_writer_winning_while_spinning_leaves_a_sleeping_writer_its_wake_up,
         PLAIN),
    TEST(test_fork_leaves_the_forking_threads_lock_held_by_it_in_the_child,
         FORKS_OR_SIGNALS),
    TEST(test_fork_undoes_and_releases_another_threads_section_in_the_child,
         FORKS_OR_SIGNALS),
    TEST(test_fork_releases_another_threads_locking_pass_after_its_repair,
         FORKS_OR_SIGNALS),
    TEST(test_thread_started_in_the_child_waits_for_the_forking_threads_section,
         FORKS_OR_SIGNALS),
    TEST(test_tracking_a_lock_twice_is_harmless, FORKS_OR_SIGNALS),
    TEST(test_fork_leaves_an_untracked_shared_lock_held_by_the_parents_thread,
         FORKS_OR_SIGNALS),
    TEST(test_read_retry_sees_a_write_across_the_2_to_32_boundary, PLAIN),
    TEST(test_read_retry_tells_counts_2_to_32_apart_where_read_seqretry_cannot,
         PLAIN),
    TEST(test_section_ending_at_2_to_32_wakes_a_sleeper, PLAIN),
    TEST(test_wait_for_change_returns_at_once_when_a_section_has_ended_since,
         PLAIN),
    TEST(test_wait_for_change_times_out_while_nothing_is_written, PLAIN),
    TEST(test_wait_for_change_does_not_return_for_an_open_section, PLAIN),
    TEST(test_section_end_wakes_a_thread_waiting_for_change, PLAIN),
    TEST(test_opening_a_section_does_not_wake_a_waiter_for_change, PLAIN),
    TEST(test_wait_for_change_is_edeadlk_for_the_lock_holder, PLAIN),
    TEST(test_wake_waiters_ends_a_cancelled_wait_at_once, PLAIN),
    TEST(test_wake_waiters_leaves_uncancelled_waiters_waiting, PLAIN),
    TEST(test_section_end_in_another_process_wakes_a_waiter_for_change,
         FORKS_OR_SIGNALS),
    TEST(test_dead_locking_pass_gives_the_next_writer_eownerdead_and_an_even_count,
         FORKS_OR_SIGNALS),
    TEST(test_section_end_wrapping_the_count_to_zero_wakes_a_waiter, PLAIN),
    TEST(test_cancel_racing_a_waiter_falling_asleep_ends_it_promptly, PLAIN),
    TEST(test_wait_for_change_reports_eownerdead_for_dead_writer,
         FORKS_OR_SIGNALS),
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
    skip_reason = mmap(NULL, SKIP_REASON_SIZE, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (skip_reason == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    count_allocations();
    sigset_t initial_mask = current_mask();
    int passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        const struct test *t = &tests[i];
        if (only != NULL && strstr(t->name, only) == NULL) {
            continue;
        }
        current_test_failed = current_test_skipped = 0;
        if (skip_fork_signal && t->kind == FORKS_OR_SIGNALS) {
            snprintf(skip_reason, SKIP_REASON_SIZE, "--skip-fork-signal");
            current_test_skipped = 1;
        }
        else {
            t->fn();
            pthread_sigmask(SIG_SETMASK, &initial_mask, NULL);
        }
        if (current_test_failed) {
            printf("FAIL %s\n", t->name);
            failed++;
        }
        else if (current_test_skipped) {
            printf("skip %s: %s\n", t->name, skip_reason);
            skipped++;
        }
        else {
            printf("ok %s\n", t->name);
            passed++;
        }
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
