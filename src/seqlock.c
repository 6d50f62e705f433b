/*
 * seqlock.c - the slow paths of seqlock.h: waiting, waking, thread ids,
 * signal masks.  The fast paths are inline in the header.
 *
 * Waiting escalates: SPIN_ROUNDS CPU pause hints (a write section is often
 * shorter than a sleep), then YIELD_ROUNDS sched_yield() calls, then sleep.
 * On Linux a sleeper waits on a futex (FUTEX_WAIT, not _PRIVATE, so that a
 * seqlock_t in memory shared between processes works); readers sleep on the
 * sequence word and writers on the lock word.  Sleeps last at most
 * LIVENESS_CHECK_NS, after which the sleeper checks that the owner's thread
 * still exists, so a writer that died holding the lock is noticed within a
 * bounded time.  Elsewhere sleeping is a bounded exponential back-off.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "seqlock.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

enum {
    SPIN_ROUNDS = 128,
    YIELD_ROUNDS = 16,
};
#define LIVENESS_CHECK_NS (20 * 1000 * 1000LL) /* 20 ms */
#define NS_PER_SEC 1000000000LL

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static int64_t
monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_SEC + ts.tv_nsec;
}

/* Deadline bookkeeping: timeout_ns < 0 means none. */
static int64_t
deadline_after(int64_t timeout_ns)
{
    if (timeout_ns < 0) {
        return -1;
    }
    int64_t now = monotonic_ns();
    return timeout_ns > INT64_MAX - now ? INT64_MAX : now + timeout_ns;
}

/* How long the next sleep may last: the time left, capped at the liveness
 * check period; 0 when the deadline has passed. */
static int64_t
next_sleep_ns(int64_t deadline)
{
    if (deadline < 0) {
        return LIVENESS_CHECK_NS;
    }
    int64_t left = deadline - monotonic_ns();
    if (left <= 0) {
        return 0;
    }
    return left < LIVENESS_CHECK_NS ? left : LIVENESS_CHECK_NS;
}

/* ---- thread ids ---- */

static _Thread_local uint32_t cached_thread_id;

#ifdef __linux__
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* The child's only thread has a new TID: forget the parent's. */
static void
forget_thread_id_in_child(void)
{
    cached_thread_id = 0;
}

static void
register_atfork(void)
{
    (void)pthread_atfork(NULL, NULL, forget_thread_id_in_child);
}

uint32_t
seqlock_thread_id(void)
{
    if (SEQLOCK_UNLIKELY(cached_thread_id == 0)) {
        (void)pthread_once(&atfork_once, register_atfork);
        cached_thread_id = (uint32_t)syscall(SYS_gettid) & SEQLOCK_OWNER_MASK;
    }
    return cached_thread_id;
}

/* A thread that has exited but whose process has not been reaped yet (a
 * zombie) still answers kill(2); /proc tells its state ('Z' or 'X'). */
static int
is_zombie(uint32_t tid)
{
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/%u/stat", (unsigned)tid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return 0; /* no /proc: trust kill(2) */
    }
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    /* "tid (comm) S ...": comm may hold spaces and parentheses. */
    char *end = strrchr(stat, ')');
    return end != NULL && end[1] == ' ' && (end[2] == 'Z' || end[2] == 'X');
}

int
seqlock_thread_alive(uint32_t tid)
{
    int saved = errno;
    /* kill(2) finds any thread by its TID; signal 0 only checks. */
    int alive = !(kill((pid_t)tid, 0) != 0 && errno == ESRCH)
                && !is_zombie(tid);
    errno = saved;
    return alive;
}

int
seqlock_thread_in_this_process(uint32_t tid)
{
    int saved = errno;
    /* tgkill(2) succeeds only for a thread of the given thread group. */
    int mine = syscall(SYS_tgkill, (pid_t)getpid(), (pid_t)tid, 0) == 0
               || errno == EPERM;
    errno = saved;
    return mine;
}

/* Sleep while *word == expected, for at most timeout_ns.  Returns 0 (woken
 * or the word changed), ETIMEDOUT or EINTR. */
static int
sleep_on(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    struct timespec ts = {
        .tv_sec = (time_t)(timeout_ns / NS_PER_SEC),
        .tv_nsec = (long)(timeout_ns % NS_PER_SEC),
    };
    if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts,
                NULL, 0) == 0) {
        return 0;
    }
    return (errno == ETIMEDOUT || errno == EINTR) ? errno : 0;
}

static void
wake_on(_Atomic uint32_t *word, int count)
{
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, count, NULL, NULL,
                  0);
}

#else /* portable fallback: no futex, no TIDs */

static _Atomic uint32_t next_thread_id = 1;

uint32_t
seqlock_thread_id(void)
{
    if (SEQLOCK_UNLIKELY(cached_thread_id == 0)) {
        uint32_t id;
        do {
            id = atomic_fetch_add(&next_thread_id, 1) & SEQLOCK_OWNER_MASK;
        } while (id == 0);
        cached_thread_id = id;
    }
    return cached_thread_id;
}

int
seqlock_thread_alive(uint32_t tid)
{
    (void)tid;
    return 1;
}

int
seqlock_thread_in_this_process(uint32_t tid)
{
    (void)tid;
    return 1;
}

static _Thread_local int64_t backoff_ns;

static int
sleep_on(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    if (atomic_load_explicit(word, memory_order_relaxed) != expected) {
        backoff_ns = 0;
        return 0;
    }
    backoff_ns = backoff_ns ? backoff_ns * 2 : 1000;
    if (backoff_ns > 1000000) {
        backoff_ns = 1000000;
    }
    int64_t ns = backoff_ns < timeout_ns ? backoff_ns : timeout_ns;
    struct timespec ts = {(time_t)(ns / NS_PER_SEC), (long)(ns % NS_PER_SEC)};
    if (nanosleep(&ts, NULL) != 0 && errno == EINTR) {
        return EINTR;
    }
    return ns == timeout_ns ? ETIMEDOUT : 0;
}

static void
wake_on(_Atomic uint32_t *word, int count)
{
    (void)word;
    (void)count;
}
#endif

void
seqlock_wake_readers_(const seqlock_t *sl)
{
    wake_on((_Atomic uint32_t *)&sl->sequence, INT_MAX);
}

void
seqlock_wake_writer_(seqlock_t *sl)
{
    wake_on(&sl->owner, 1);
}

void
seqlock_die_(const char *what)
{
    fprintf(stderr, "seqlock: %s\n", what);
    fflush(stderr);
    abort();
}

/* ---- readers ---- */

int
seqlock_read_begin_timed(const seqlock_t *sl, int64_t timeout_ns,
                         unsigned *seq)
{
    seqlock_t *lock = (seqlock_t *)sl; /* sleeping registers; data untouched */
    int saved_errno = errno;
    int64_t deadline = -2; /* computed when first needed */
    int result;
    for (unsigned round = 0;; round++) {
        uint32_t s = atomic_load_explicit(&lock->sequence,
                                          memory_order_acquire);
        if (!(s & 1u)) {
            *seq = s;
            result = 0;
            break;
        }
        uint32_t owner = seqlock_owner(lock);
        if (owner == seqlock_thread_id()) {
            result = EDEADLK;
            break;
        }
        if (timeout_ns == 0) {
            result = ETIMEDOUT;
            break;
        }
        if (round < SPIN_ROUNDS) {
            cpu_relax();
            continue;
        }
        if (round < SPIN_ROUNDS + YIELD_ROUNDS) {
            sched_yield();
            continue;
        }
        if (deadline == -2) {
            deadline = deadline_after(timeout_ns);
        }
        int64_t nap = next_sleep_ns(deadline);
        if (nap == 0) {
            result = ETIMEDOUT;
            break;
        }
        /* Register, then sleep only if the count is still s: paired with
         * the writer's store-then-fence-then-check in write_sequnlock(). */
        atomic_fetch_add_explicit(&lock->sleepers, 1, memory_order_seq_cst);
        atomic_thread_fence(memory_order_seq_cst);
        int woke = sleep_on(&lock->sequence, s, nap);
        atomic_fetch_sub_explicit(&lock->sleepers, 1, memory_order_relaxed);
        if (woke == EINTR) {
            result = EINTR;
            break;
        }
        if (woke == ETIMEDOUT && owner != 0
            && atomic_load_explicit(&lock->sequence, memory_order_relaxed) == s
            && seqlock_owner(lock) == owner && !seqlock_thread_alive(owner)) {
            result = EOWNERDEAD;
            break;
        }
    }
    errno = saved_errno;
    return result;
}

unsigned
seqlock_read_wait_(const seqlock_t *sl)
{
    unsigned seq = 0;
    for (;;) {
        switch (seqlock_read_begin_timed(sl, -1, &seq)) {
        case 0:
            return seq;
        case EDEADLK:
            seqlock_die_("read_seqbegin: this thread holds the write lock "
                         "(a signal handler reading data its own thread is "
                         "writing? use write_seqlock_irqsave)");
            break;
        case EOWNERDEAD:
            seqlock_die_("read_seqbegin: the writer died holding the lock "
                         "(use seqlock_read_begin_timed to recover)");
            break;
        default: /* EINTR: a handler ran; keep waiting */
            break;
        }
    }
}

/* ---- writers ---- */

/* The lock word is ours: make the count odd (it already is if we took over
 * from a writer that died mid-section) and order it before data stores. */
static void
enter_write_section(seqlock_t *sl)
{
    uint32_t seq = atomic_load_explicit(&sl->sequence, memory_order_relaxed);
    if (!(seq & 1u)) {
        atomic_store_explicit(&sl->sequence, seq + 1, memory_order_relaxed);
    }
    atomic_thread_fence(memory_order_release);
}

int
seqlock_write_lock_timed(seqlock_t *sl, int64_t timeout_ns)
{
    int err = seqlock_lock_excl_timed(sl, timeout_ns);
    if (err == 0 || err == EOWNERDEAD) {
        enter_write_section(sl);
    }
    return err;
}

int
seqlock_lock_excl_timed(seqlock_t *sl, int64_t timeout_ns)
{
    int saved_errno = errno;
    uint32_t self = seqlock_thread_id();
    int64_t deadline = -2;
    int result;
    for (unsigned round = 0;; round++) {
        uint32_t cur = atomic_load_explicit(&sl->owner, memory_order_relaxed);
        if (cur == 0) {
            /* Once anyone has slept, keep the waiters bit: another sleeper
             * may remain, and the unlock must wake it. */
            uint32_t mine = round < SPIN_ROUNDS + YIELD_ROUNDS
                                ? self : (self | SEQLOCK_WAITERS);
            if (atomic_compare_exchange_weak_explicit(
                    &sl->owner, &cur, mine, memory_order_acquire,
                    memory_order_relaxed)) {
                result = 0;
                break;
            }
            continue;
        }
        uint32_t owner = cur & SEQLOCK_OWNER_MASK;
        if (owner == self) {
            result = EDEADLK;
            break;
        }
        if (timeout_ns == 0) {
            result = ETIMEDOUT;
            break;
        }
        if (round < SPIN_ROUNDS) {
            cpu_relax();
            continue;
        }
        if (round < SPIN_ROUNDS + YIELD_ROUNDS) {
            sched_yield();
            continue;
        }
        if (deadline == -2) {
            deadline = deadline_after(timeout_ns);
        }
        int64_t nap = next_sleep_ns(deadline);
        if (nap == 0) {
            result = ETIMEDOUT;
            break;
        }
        if (!(cur & SEQLOCK_WAITERS)) {
            if (!atomic_compare_exchange_weak_explicit(
                    &sl->owner, &cur, cur | SEQLOCK_WAITERS,
                    memory_order_relaxed, memory_order_relaxed)) {
                continue;
            }
            cur |= SEQLOCK_WAITERS;
        }
        int woke = sleep_on(&sl->owner, cur, nap);
        if (woke == EINTR) {
            result = EINTR;
            break;
        }
        if (woke == ETIMEDOUT && !seqlock_thread_alive(owner)) {
            /* Take over from the dead owner, unless someone beat us. */
            if (atomic_compare_exchange_strong_explicit(
                    &sl->owner, &cur, self | SEQLOCK_WAITERS,
                    memory_order_acquire, memory_order_relaxed)) {
                result = EOWNERDEAD;
                break;
            }
        }
    }
    errno = saved_errno;
    return result;
}

/* ---- signal masks ---- */

static _Thread_local unsigned long irq_depth;
static _Thread_local sigset_t irq_saved_mask;

unsigned long
seqlock_irq_save_(void)
{
    unsigned long depth = irq_depth;
    if (depth == 0) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &irq_saved_mask);
    }
    irq_depth = depth + 1;
    return depth;
}

void
seqlock_irq_restore_(unsigned long depth)
{
    irq_depth = depth;
    if (depth == 0) {
        pthread_sigmask(SIG_SETMASK, &irq_saved_mask, NULL);
    }
}

unsigned long
seqlock_irq_depth_(void)
{
    return irq_depth;
}
