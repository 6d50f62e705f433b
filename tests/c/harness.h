/*
 * harness.h - what the C tests of src/libseqlock/ share: the tiny harness
 * (CHECK, SKIP, the registration of each file's tests with the runner in
 * harness.c), the count of allocations made by signal handlers, helper
 * threads (holders, waiters, sleepers), child processes, records in memory
 * shared between processes, and the calling thread's signal mask.
 *
 * Each test_*.c file specifies one behaviour of a core header: its
 * test_* functions each check one promise from the header's comments, and
 * its table of them, registered with REGISTER_TESTS(), runs in the one
 * program bin/test_api, linked from harness.c and every test_*.c (the
 * Makefile takes them by wildcard).  The runner runs the files in link
 * order (alphabetical), each file's tests in the order of its table, and
 * ends with "N passed, M failed, K skipped" (CI parses the first two
 * numbers).  A test that cannot run here (PID namespaces need root) prints
 * "skip <name>: <reason>" and counts as skipped, not failed.  Tests that
 * fork or deliver signals can be skipped with --skip-fork-signal (for
 * sanitizer builds where fork or signal delivery misbehaves), and tests
 * that need the kernel's robust futex list are skipped where it has none
 * (under qemu-user: see ROBUST_LIST); a name given
 * on the command line runs only the tests whose names contain it.
 *
 * Timing checks use generous bounds: they catch a hang or a lost wake-up,
 * never a slow machine.  A real reader naps at most SEQLOCK_READER_NAP_MS,
 * which would hide a lost wake-up under any such bound, so wake-ups are
 * checked with a sleeper that follows the readers' protocol without the
 * nap (struct sleeper).  Tests may read a seqlock_t's fields, and the 64-bit
 * tests store to its count (and to a seqcount_latch_t's).
 *
 * Build: make -C tests/c test, or cc -std=c11 -Isrc/libseqlock
 *        tests/c/harness.c tests/c/test_*.c with every .c file of
 *        src/libseqlock and -lpthread
 */
#ifndef HARNESS_H
#define HARNESS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* include this header first */
#endif
#include "record.h"
#include "robust_list.h"
#include "seqlock.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the tiny harness ---- */

extern int current_test_failed;
extern int current_test_skipped;

/* In memory shared with the test's child processes, which may be the ones
 * that find the test cannot run; they exit with SKIPPED_EXIT. */
#define SKIP_REASON_SIZE 160
extern char *skip_reason;
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

/* A file's tests: a table of TEST(test_function, kind) entries, handed to
 * the runner by REGISTER_TESTS(table) at the file's end.  The kind is
 * PLAIN, or FORKS_OR_SIGNALS and/or ROBUST_LIST: the test needs the
 * kernel's robust futex list (a dead holder marked FUTEX_OWNER_DIED, or
 * glibc's list of held robust mutexes read back), which the runner skips
 * only where get_robust_list answers ENOSYS: qemu-user answers
 * set_robust_list so, as it cannot walk a guest's list when a guest thread
 * dies.  Any other failure runs the test (robust_list_missing()). */
enum { PLAIN = 0, FORKS_OR_SIGNALS = 1, ROBUST_LIST = 2 };

struct test {
    const char *name;
    void (*fn)(void);
    int kind;
};

#define TEST(fn, kind) {#fn, fn, kind}

struct test_group {
    const struct test *tests;
    size_t count;
    struct test_group *next;
};

/* Called before main() (a constructor), once for each file. */
void register_tests(struct test_group *group);

/* Once in a file, after its table. */
#define REGISTER_TESTS(table)                                              \
    static struct test_group this_files_tests = {                          \
        table, sizeof table / sizeof table[0], NULL};                      \
    __attribute__((constructor)) static void register_this_files_tests(    \
        void)                                                              \
    {                                                                      \
        register_tests(&this_files_tests);                                 \
    }

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

int64_t now_ns(void);
/* For printing: nanoseconds as microseconds. */
double us_of(int64_t ns);
void sleep_ms(long ms);
/* Poll cond(arg) every millisecond; nonzero once it holds, 0 on giving up. */
int poll_until(int (*cond)(void *), void *arg);

/* ---- counting allocations made by signal handlers ---- */

/* Set by a test's handler around its read: only the allocations this
 * thread makes while it is set are counted, in handler_allocations (by the
 * sanitizer's malloc hooks, or glibc's allocator interposed in harness.c).
 * The runner starts the count. */
extern _Thread_local volatile sig_atomic_t in_handler;
extern atomic_long handler_allocations;
void count_allocations(void);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)          \
    || defined(__GLIBC__)
#define CAN_COUNT_ALLOCATIONS 1
#else
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
    _Atomic int64_t unlocked_at_ns; /* stamped before the unlock */
};

/* Start *h, its sl and options set; nonzero once it holds the lock. */
int holder_run(struct holder *h);
/* Returns nonzero once another thread holds sl in a write section. */
int holder_start(struct holder *h, seqlock_t *sl);
void holder_release(struct holder *h);

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

/* Waiters' thread functions: seqlock_write_lock_timed() with GIVE_UP_NS
 * (a stall fails, never hangs), then unlocks; read_seqbegin(). */
void *timed_writer_main(void *arg);
void *reader_waiter_main(void *arg);
int start_waiter(struct waiter *w, void *(*main_fn)(void *));

/* A reader asleep on the count without a nap.  It follows count.h's
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

/* A reader about to sleep has announced the odd count in wake_from. */
int reader_is_asleep(void *arg);
/* A writer about to sleep on the holder's beacon sets FUTEX_WAITERS in it
 * (glibc's layout; elsewhere, give it time to get there). */
int writer_is_asleep(void *arg);
/* Nonzero once a waiter has announced its sleep, and a little after, for
 * it to reach the futex call that follows. */
int await_asleep(int (*is_asleep)(void *), seqlock_t *sl);
/* Start a sleeper on sl (a section must be open); nonzero once asleep.
 * Whatever it returns, end with sleeper_join(). */
int sleeper_start(struct sleeper *s, seqlock_t *sl);
void sleeper_join(struct sleeper *s);

/* ---- child processes ---- */

struct child_result {
    int status; /* from waitpid */
    char stderr_text[512];
};

/* Run fn in a forked child with its stderr captured.  The child exits 0 if
 * fn returns; alarm() turns a hang into SIGALRM.  Returns 0 if fork failed. */
int run_in_child(void (*fn)(void), struct child_result *out);
/* The exit code that passes a child's wait status on. */
int exit_code_of(int status);
/* Run body(arg), a test body with CHECKs, and exit with its verdict. */
_Noreturn void run_body(void (*body)(void *), void *arg);
/* Fork a child that runs body(arg); returns its pid (or -1), for
 * child_passed(). */
pid_t start_child(void (*body)(void *), void *arg);
int reap(pid_t pid);
/* SIGKILL a child and reap it (never kill(-1, ...) for a failed fork). */
int kill_child(pid_t pid);
/* Reap a child from start_child() (or start_in_new_pid_namespace() of
 * test_owner_identity.c): nonzero if its body passed, or skipped (the test
 * is then marked skipped). */
int child_passed(pid_t pid);
/* A child's body that waits to be killed. */
void idle_until_killed(void *arg);

/* ---- memory shared between processes ---- */

enum { WORDS = 4 };
#define RECORD_WORDS WORDS
#include "record_form.h"

/* A record of one 8-byte field ("x:q") on the heap, laid out by
 * record_init(), its size in *size; free() it.  NULL if it could not be
 * made. */
record_header *one_field_record(size_t *size);
/* record_matches() of such a record against its own layout. */
int one_field_record_matches(const record_header *h, size_t size);


struct shared_record {
    seqlock_t lock;
    seqlock_word_t data[WORDS];
    atomic_int step; /* how far the processes sharing it have got */
};

/* A zeroed MAP_SHARED record with an initialised lock, or NULL. */
struct shared_record *shared_record_new(void);
void shared_record_free(struct shared_record *rec);
/* Take rec to step; nonzero once another process has taken it to step (or
 * beyond). */
void step_to(struct shared_record *rec, int step);
int await_step(struct shared_record *rec, int step);

enum hold_kind { WRITE_SECTION, LOCKING_PASS };

/* A child takes rec's lock (a write section that stores half its data, or
 * a locking pass) and dies holding it: it exits, or with sig it sends
 * itself that signal.  Returns its pid once it is dead but not yet reaped
 * (a zombie, waitid WNOWAIT), or -1. */
pid_t child_dies_holding(struct shared_record *rec, enum hold_kind how,
                         int sig);
/* A shared record whose lock a reaped child died holding, or NULL. */
struct shared_record *record_left_locked_by_dead_child(enum hold_kind how);

/* ---- signal masks ---- */

/* The calling thread's; the runner restores the test-free mask after each
 * test. */
sigset_t current_mask(void);

#endif /* HARNESS_H */
