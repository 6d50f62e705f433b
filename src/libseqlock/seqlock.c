/*
 * seqlock.c - the slow paths of seqlock.h: the lock word and its beacon (a
 * robust, process-shared pthread mutex), thread tokens, readers' waits and
 * wake-ups, fork repair of process-private locks, signal masks.  The fast
 * paths are inline in the header.
 *
 * Waiting escalates: SPIN_ROUNDS CPU pause hints (a write section is often
 * shorter than a sleep), then YIELD_ROUNDS sched_yield() calls, then sleep
 * on a futex (FUTEX_WAIT, not _PRIVATE, so that a seqlock_t in memory
 * shared between processes works): writers on a count of releases, which a
 * release wakes; readers on the low half of the 64-bit count, which a
 * section's end wakes.  Elsewhere than Linux, sleeping is a
 * bounded exponential back-off.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "seqlock.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

enum {
    SPIN_ROUNDS = 128,
    YIELD_ROUNDS = 16,
};
#define NS_PER_SEC 1000000000LL
#define READER_NAP_NS (SEQLOCK_READER_NAP_MS * 1000 * 1000LL)
/* Writers asleep on the beacon are woken by its unlock, or by the kernel
 * at the holder's death: their nap is a safety net. */
#define WRITER_NAP_NS (100 * 1000 * 1000LL)
#define WAITER_NAP_NS (SEQLOCK_WAITER_NAP_MS * 1000 * 1000LL)
#define CANCELLABLE_NAP_NS (SEQLOCK_CANCELLABLE_NAP_MS * 1000 * 1000LL)
#define INITIALISING 1u

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
clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (int64_t)ts.tv_sec * NS_PER_SEC + ts.tv_nsec;
}

static int64_t
monotonic_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

static struct timespec
timespec_of(int64_t ns)
{
    struct timespec ts = {(time_t)(ns / NS_PER_SEC), (long)(ns % NS_PER_SEC)};
    return ts;
}

/* Deadline bookkeeping: timeout_ns < 0 means none (-1). */
static int64_t
deadline_after(int64_t timeout_ns)
{
    if (timeout_ns < 0) {
        return -1;
    }
    int64_t now = monotonic_ns();
    return timeout_ns > INT64_MAX - now ? INT64_MAX : now + timeout_ns;
}

/* How long the next nap may last: the time left, capped at cap; 0 once
 * the deadline has passed. */
static int64_t
next_nap_ns(int64_t deadline, int64_t cap)
{
    if (deadline < 0) {
        return cap;
    }
    int64_t left = deadline - monotonic_ns();
    if (left <= 0) {
        return 0;
    }
    return left < cap ? left : cap;
}

void
seqlock_die_(const char *what)
{
    /* write(2) and abort(3) only: this may run in a signal handler. */
    static const char prefix[] = "seqlock: ";
    ssize_t ignored = write(STDERR_FILENO, prefix, sizeof prefix - 1);
    ignored = write(STDERR_FILENO, what, strlen(what));
    ignored = write(STDERR_FILENO, "\n", 1);
    (void)ignored;
    abort();
}

/* ---- futexes: readers sleep on the low half of the count ---- */

static _Atomic uint32_t *
low_half(const _Atomic uint64_t *word)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return (_Atomic uint32_t *)((char *)word + 4);
#else
    return (_Atomic uint32_t *)word;
#endif
}

#ifdef __linux__
/* Sleep while *word == expected, for at most timeout_ns.  Returns 0 (woken
 * or the word changed), ETIMEDOUT or EINTR. */
static int
sleep_on(_Atomic uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    struct timespec ts = timespec_of(timeout_ns);
    if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts,
                NULL, 0) == 0) {
        return 0;
    }
    return (errno == ETIMEDOUT || errno == EINTR) ? errno : 0;
}

static void
wake_all_on(_Atomic uint32_t *word)
{
    (void)syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL,
                  NULL, 0);
}
#else /* portable fallback: poll with a bounded back-off */
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
    struct timespec ts = timespec_of(ns);
    if (nanosleep(&ts, NULL) != 0 && errno == EINTR) {
        return EINTR;
    }
    return ns == timeout_ns ? ETIMEDOUT : 0;
}

static void
wake_all_on(_Atomic uint32_t *word)
{
    (void)word;
}
#endif

/* ---- what each thread keeps ---- */

/* What this thread holds: the lock, the count its section opened at, and
 * the beacon's owner words as its trylock left them.  In the thread's own
 * memory, so that no rewrite of the shared words changes what the holder
 * believes or does (seqlock_held(), closing at the right count). */
#define NO_SECTION UINT64_MAX /* odd: never an opening count */

struct held_lock {
    const seqlock_t *lock;
    uint64_t section;
    uint64_t token;  /* the holder word we stored */
    int beacon_word; /* the owner's id as glibc stored it (tid bits) */
    int beacon_owner;
};

/* How long this thread has seen one holder of one lock in a gap: kept
 * per thread (a thread waits for one lock at a time) across the slices in
 * which the binding waits, and on this thread's own clock. */
struct gap_watch {
    const seqlock_t *lock;
    uint64_t holder, gap;
    int64_t since;    /* first seen */
    int64_t seen;     /* last seen: a watch not kept up is stale */
    int64_t looked;   /* when holder_verdict() last ran for it, or 0 */
    int verdict;      /* what it said */
};

enum { IDENTITY_UNKNOWN = 0, IDENTITY_KNOWN = 1, IDENTITY_UNAVAILABLE = 2 };

/* Everything the lock paths keep per thread, in one thread-local: each
 * public call finds it once (one __tls_get_addr in a shared library) and
 * hands it down. */
enum { HELD_INLINE = 4 };
struct lock_thread {
    /* The thread's token: 64 random bits, drawn on its first lock.
     * _Atomic so that a signal handler that interrupts the first call on
     * its thread cannot leave two different tokens behind (one CAS from 0
     * wins). */
    _Atomic uint64_t token;
    /* Who the thread is in its PID namespace, for owner records: its id
     * and start time, learnt on its first lock (know_myself()). */
    int identity;
    uint32_t tid;
    uint64_t started;
    unsigned held_count, held_spill_cap;
    struct held_lock held_inline[HELD_INLINE];
    struct held_lock *held_spill; /* the rest, on the heap */
    struct gap_watch gap;
    struct { /* seqlock.c's fairness: since when we kept off for another */
        const seqlock_t *lock;
        int64_t since;
    } held_off;
};

static _Thread_local struct lock_thread lock_thread;

/* This thread's lock_thread.  Not inlined: in a shared library gcc
 * recomputes a thread-local's address (a call into the dynamic linker) at
 * each use rather than keep it in a register across calls; a value a call
 * returned it keeps. */
static __attribute__((noinline)) struct lock_thread *
this_thread(void)
{
    return &lock_thread;
}

/* ---- thread tokens ---- */

/* 64 random bits: the kernel's if it answers at once, else a mix of what
 * tells this thread from every other (async-signal-safe either way). */
static uint64_t
fresh_token(void)
{
    uint64_t t = 0;
#if defined(__linux__) && defined(SYS_getrandom)
    if (syscall(SYS_getrandom, &t, sizeof t, 1 /* GRND_NONBLOCK */)
        != (long)sizeof t) {
        t = 0;
    }
#endif
    if (t == 0) {
        static _Atomic uint64_t counter;
        uint64_t z = (uint64_t)clock_ns(CLOCK_MONOTONIC)
                     ^ ((uint64_t)getpid() << 32)
                     ^ (uint64_t)(uintptr_t)&lock_thread
                     ^ (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15u);
        /* splitmix64 finaliser */
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        t = z ^ (z >> 31);
    }
    return t ? t : 1;
}

/* The calling thread's token, or 0 if it never needed one (then it holds
 * no lock).  For paths a signal handler may take. */
static uint64_t
current_token(void)
{
    return atomic_load_explicit(&this_thread()->token, memory_order_relaxed);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void);

static uint64_t new_token(struct lock_thread *th);

/* The calling thread's token, drawn on its first call. */
static inline uint64_t
token_of(struct lock_thread *th)
{
    uint64_t t = atomic_load_explicit(&th->token, memory_order_relaxed);
    return SEQLOCK_LIKELY(t != 0) ? t : new_token(th);
}

uint64_t
seqlock_self(void)
{
    return token_of(this_thread());
}

static uint64_t
new_token(struct lock_thread *th)
{
    (void)pthread_once(&atfork_once, register_atfork);
    uint64_t expected = 0;
    uint64_t t = fresh_token();
    if (!atomic_compare_exchange_strong(&th->token, &expected, t)) {
        t = expected; /* a signal handler on this thread chose first */
    }
    return t;
}

/* ---- the beacon: a robust, process-shared mutex ---- */

static int
init_beacon(seqlock_t *sl)
{
    pthread_mutexattr_t attr;
    int err = pthread_mutexattr_init(&attr);
    if (err != 0) {
        return err;
    }
    err = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
#if defined(__linux__) || defined(__FreeBSD__)
    if (err == 0) {
        err = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    }
#endif
    if (err == 0) {
        err = pthread_mutex_init(&sl->beacon, &attr);
    }
    pthread_mutexattr_destroy(&attr);
    return err;
}

int
seqlock_init(seqlock_t *sl)
{
    seqcount_latch_init(&sl->seqcount);
    atomic_init(&sl->wake_from, 0);
    atomic_init(&sl->holder, 0);
    atomic_init(&sl->starving, 0);
    atomic_init(&sl->gaps, 0);
    atomic_init(&sl->abandoned, 0);
    atomic_init(&sl->owner.token, 0);
    atomic_init(&sl->owner.pid_ns, 0);
    atomic_init(&sl->owner.started, 0);
    atomic_init(&sl->owner.tid, 0);
    atomic_init(&sl->owner.reserved, 0);
    int err = init_beacon(sl);
    atomic_init(&sl->ready, err == 0 ? SEQLOCK_READY : 0);
    return err;
}

void
seqlock_destroy(seqlock_t *sl)
{
    if (atomic_load_explicit(&sl->ready, memory_order_acquire)
        == SEQLOCK_READY) {
        (void)pthread_mutex_destroy(&sl->beacon);
        atomic_store_explicit(&sl->ready, 0, memory_order_relaxed);
    }
}

/* A SEQLOCK_UNLOCKED lock gets its beacon from the first taker.  Returns
 * 0 (ready), EBUSY (another taker is setting it up: wait as for a held
 * lock, within the caller's timeout) or EINVAL (`ready` holds garbage:
 * not a seqlock, or overwritten). */
static int
ensure_ready(seqlock_t *sl)
{
    uint32_t state = atomic_load_explicit(&sl->ready, memory_order_acquire);
    if (SEQLOCK_LIKELY(state == SEQLOCK_READY)) {
        return 0;
    }
    if (state == INITIALISING) {
        return EBUSY;
    }
    if (state != 0) {
        return EINVAL;
    }
    if (!atomic_compare_exchange_strong(&sl->ready, &state, INITIALISING)) {
        return state == SEQLOCK_READY ? 0 : EBUSY;
    }
    /* Set up only a lock nobody has used (a SEQLOCK_UNLOCKED one): a
     * `ready` word rewritten to 0 on a used lock must not have the beacon
     * made anew under its holder. */
    if (atomic_load_explicit(&sl->holder, memory_order_relaxed) != 0
        || atomic_load_explicit(&sl->gaps, memory_order_relaxed) != 0) {
        atomic_store_explicit(&sl->ready, 0, memory_order_relaxed);
        return EINVAL;
    }
    int err = init_beacon(sl);
    atomic_store_explicit(&sl->ready, err ? 0 : SEQLOCK_READY,
                          memory_order_release);
    return err;
}

/*
 * The lock word and its beacon.
 *
 * The lock word is `holder`: 0, or the holder's token, taken by a
 * compare-and-swap.  The beacon is a robust, process-shared pthread mutex
 * that the holder locks just after winning the word and unlocks just
 * before giving it back; nobody else ever operates on it, except to take
 * over from a dead holder.  When the holder dies, the kernel (robust futex
 * list) marks the beacon FUTEX_OWNER_DIED, whatever PID namespace anyone
 * lives in; a waiter that sees the mark takes the word from the dead token
 * (one compare-and-swap wins), then the beacon (EOWNERDEAD).
 *
 * Why not the mutex as the lock itself: the kernel marks a robust mutex
 * dead when a thread dies with it as its robust list's pending operation
 * (inside pthread_mutex_trylock/lock/unlock) and the mutex's word holds
 * the dying thread's id.  Ids are per PID namespace: pid 1 of one
 * container is pid 1 of another.  A contended mutex is some thread's
 * pending operation much of the time, and a contender that dies there with
 * the holder's id (killed while trying) gets the live holder's lock marked
 * dead and taken over.  Only the holder touching its beacon closes that:
 * the only pending operations on a beacon are its own holder's.
 *
 * What is left: a holder that dies in the few instructions between
 * winning the word and locking the beacon, or between unlocking the
 * beacon and giving the word back (its gaps), leaves the word held and the
 * beacon free and unmarked.  Just after winning the word a holder writes
 * who it is (seqlock_t.owner: its PID namespace, thread id and start
 * time), so a waiter of the same namespace that finds it in a gap asks
 * /proc: a dead holder is taken over at once (after GAP_LOOK_NS, longer
 * than a live holder's passing gap), a live one never (preempted or
 * stopped in its gap, it will finish; and a beacon's word another process
 * zeroed under a live holder is no gap).  A holder whose record says
 * nothing of the kind (another namespace, or it died before writing it)
 * is taken over after GAP_NS.  That is safe against the holder even if it
 * is alive: a section is entered only with the beacon held (a holder in
 * its first gap that finds the beacon taken backs off), and a holder in
 * its second gap has closed its section.  Not sooner: such a holder has
 * the beacon as its robust list's pending operation (in its first gap it
 * is about to try the beacon; in its second, glibc's unlock names it
 * pending until it returns), and if it is killed there, the kernel marks
 * the beacon dead if its word holds the dying thread's id, which is the
 * taker's: two threads share an id only in different PID namespaces
 * (test_hostile.py's same-id writers in other namespaces had a live
 * holder's beacon taken within seconds with a 1 ms timeout).  GAP_NS
 * outlasts a preemption.  Neither gap makes a system call
 * (release_lock_word()), but gaps hold atomic instructions on a contended
 * cache line: 4-12 % of SIGKILLs of a flat-out writer landed in one
 * (benchmarks/bench_takeover.py).  The kernel's own mark, too, is told
 * from a rewrite: it clears the dead thread's id from the word, so a word
 * marked dead that still names a thread was written by another process
 * over a live holder's (beacon_state()).
 *
 * The lock's words are shared with every process that maps the lock, and
 * any of them may rewrite them.  So what the caller holds is kept in the
 * calling thread's own memory (held_lock below), never read back from
 * `holder` or the count; the beacon's kind is checked before glibc sees it
 * (another kind takes glibc down paths that assert), and its owner fields
 * are put back before the unlock.  What cannot be checked is glibc's own
 * robust-list links inside the mutex, which its unlock follows: a process
 * that rewrites them during a section can make the holder's unlock write
 * where it chooses.  Every process that can write a lock is therefore
 * trusted with the memory of the threads that take it (as LMDB and
 * Boost.Interprocess trust theirs); readers are not in that circle.
 */

#define GAP_NS (100 * 1000 * 1000LL)      /* 100 ms */
#define GAP_LOOK_NS (50 * 1000LL)         /* 50 us: longer than a passing gap */
#define RECHECK_NS (1000 * 1000LL)        /* 1 ms: a live holder looked at again */
#define WATCH_STALE_NS (20 * 1000 * 1000LL) /* a waiter looks far more often */
#define PID_MAX_LIMIT 4194304u            /* the kernel's ceiling for ids */

/* The inode of this process's PID namespace, as /proc says it, once /proc
 * is known to be this namespace's (its "self" is our pid): NS_UNKNOWN
 * until first asked (and again in a fork's child, which unshare() may
 * have put in another), NS_UNAVAILABLE if /proc cannot tell. */
#define NS_UNKNOWN 0
#define NS_UNAVAILABLE 1
static _Atomic uint64_t my_pid_ns = NS_UNKNOWN;

static uint64_t
pid_namespace(void)
{
    uint64_t ns = atomic_load_explicit(&my_pid_ns, memory_order_relaxed);
    if (SEQLOCK_LIKELY(ns != NS_UNKNOWN)) {
        return ns;
    }
    ns = NS_UNAVAILABLE;
#ifdef __linux__
    char self[32];
    ssize_t n = readlink("/proc/self", self, sizeof self - 1);
    struct stat st;
    if (n > 0) {
        self[n] = '\0';
        if (strtol(self, NULL, 10) == (long)getpid()
            && stat("/proc/self/ns/pid", &st) == 0 && st.st_ino > 1) {
            ns = (uint64_t)st.st_ino;
        }
    }
#endif
    atomic_store_explicit(&my_pid_ns, ns, memory_order_relaxed);
    return ns;
}

/* Thread tid of our PID namespace, as /proc/<tid>/stat says: its state
 * letter and its start time (clock ticks since boot).  0, ENOENT (no
 * such thread: it has exited and been reaped), or another error (the
 * kernel does not say).  Not async-signal-safe only in that it opens a
 * file; writers' paths only. */
static int
thread_status(uint32_t tid, char *state, uint64_t *started)
{
#ifdef __linux__
    char path[48], buf[1024];
    snprintf(path, sizeof path, "/proc/%u/stat", (unsigned)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return errno == ENOENT || errno == ESRCH ? ENOENT : EIO;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int err = n <= 0 ? (n < 0 && errno == ESRCH ? ENOENT : EIO) : 0;
    (void)close(fd);
    if (err) {
        return err;
    }
    buf[n] = '\0';
    /* "tid (comm) S ppid ...": comm may hold spaces and parentheses, so
     * the fields start after the last ')'; the start time is the 22nd. */
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ' || p[2] == '\0') {
        return EIO;
    }
    p += 2;
    *state = *p;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL) {
            return EIO;
        }
        p++;
    }
    char *end;
    unsigned long long ticks = strtoull(p, &end, 10);
    if (end == p) {
        return EIO;
    }
    *started = ticks;
    return 0;
#else
    (void)tid;
    (void)state;
    (void)started;
    return EIO;
#endif
}

/* This thread's identity for an owner record, learnt on its first lock
 * (and anew in a fork's child): 1 if known. */
static int
know_myself(struct lock_thread *t)
{
    if (SEQLOCK_LIKELY(t->identity != IDENTITY_UNKNOWN)) {
        return t->identity == IDENTITY_KNOWN;
    }
    t->identity = IDENTITY_UNAVAILABLE;
#ifdef __linux__
    char state;
    uint64_t started;
    uint32_t tid = (uint32_t)syscall(SYS_gettid);
    if (pid_namespace() != NS_UNAVAILABLE
        && thread_status(tid, &state, &started) == 0) {
        t->tid = tid;
        t->started = started;
        t->identity = IDENTITY_KNOWN;
    }
#endif
    return t->identity == IDENTITY_KNOWN;
}

/* Say who holds the word (seqlock_t.owner).  The token is written last,
 * after a 0 and a release fence, so a reader that sees the same token
 * before and after reading the rest (an acquire fence between) read this
 * holder's record. */
static void
write_owner(seqlock_t *sl, const struct seqlock_owner *o)
{
    struct seqlock_owner *w = &sl->owner;
    atomic_store_explicit(&w->token, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&w->pid_ns, atomic_load(&o->pid_ns),
                          memory_order_relaxed);
    atomic_store_explicit(&w->started, atomic_load(&o->started),
                          memory_order_relaxed);
    atomic_store_explicit(&w->tid, atomic_load(&o->tid), memory_order_relaxed);
    atomic_store_explicit(&w->token, atomic_load(&o->token),
                          memory_order_release);
}

/* The owner record as it stands, read seqlock-style; 0 if torn (being
 * rewritten). */
static int
read_owner(const seqlock_t *sl, struct seqlock_owner *o)
{
    const struct seqlock_owner *r = &sl->owner;
    uint64_t token = atomic_load_explicit(&r->token, memory_order_acquire);
    atomic_init(&o->pid_ns, atomic_load_explicit(&r->pid_ns,
                                                 memory_order_relaxed));
    atomic_init(&o->started, atomic_load_explicit(&r->started,
                                                  memory_order_relaxed));
    atomic_init(&o->tid, atomic_load_explicit(&r->tid, memory_order_relaxed));
    atomic_thread_fence(memory_order_acquire);
    atomic_init(&o->token, token);
    return token != 0
           && atomic_load_explicit(&r->token, memory_order_relaxed) == token;
}

/* Just after winning the word: say that we hold it, and who we are.  A
 * thread that takes the lock again finds its own record there and writes
 * nothing. */
static void
publish_owner(seqlock_t *sl, struct lock_thread *t, uint64_t me)
{
    struct seqlock_owner mine;
    int known = know_myself(t);
    atomic_init(&mine.token, me);
    atomic_init(&mine.pid_ns, known ? pid_namespace() : NS_UNAVAILABLE);
    atomic_init(&mine.started, known ? t->started : 0);
    atomic_init(&mine.tid, known ? t->tid : 0);
    if (atomic_load_explicit(&sl->owner.token, memory_order_relaxed) != me
        || atomic_load_explicit(&sl->owner.tid, memory_order_relaxed)
               != atomic_load(&mine.tid)
        || atomic_load_explicit(&sl->owner.pid_ns, memory_order_relaxed)
               != atomic_load(&mine.pid_ns)) {
        write_owner(sl, &mine);
    }
}

enum holder_verdict { HOLDER_UNKNOWN, HOLDER_ALIVE, HOLDER_DEAD };

/* Is the thread holding the word h alive?  Known only if it wrote, just
 * after winning the word, that it lives in our PID namespace: then
 * /proc tells (gone, a zombie, or another thread with its id since).
 * Otherwise (another namespace, an older record, /proc unavailable)
 * unknown.  A record anyone may have rewritten: it can make us wrong
 * about whom to wait for, never make us write outside the lock. */
static enum holder_verdict
holder_verdict(const seqlock_t *sl, uint64_t h)
{
    struct seqlock_owner o;
    uint64_t ns = pid_namespace();
    if (ns == NS_UNAVAILABLE || !read_owner(sl, &o)
        || atomic_load(&o.token) != h || atomic_load(&o.pid_ns) != ns) {
        return HOLDER_UNKNOWN;
    }
    uint32_t tid = atomic_load(&o.tid);
    if (tid == 0 || tid > PID_MAX_LIMIT) {
        return HOLDER_UNKNOWN;
    }
    char state;
    uint64_t started;
    switch (thread_status(tid, &state, &started)) {
    case 0:
        return started != atomic_load(&o.started) || state == 'Z'
                       || state == 'X'
                   ? HOLDER_DEAD
                   : HOLDER_ALIVE;
    case ENOENT:
        return HOLDER_DEAD;
    default:
        return HOLDER_UNKNOWN;
    }
}

/* The beacon's words as glibc keeps them: the first int is a robust futex
 * (the kernel's robust-futex ABI fixes the meaning of its bits). */
#if defined(__GLIBC__) && defined(__linux__)
#define BEACON_WORD(sl) (&(sl)->beacon.__data.__lock)
#define BEACON_OWNER(sl) (&(sl)->beacon.__data.__owner)
#define BEACON_KIND(sl) (&(sl)->beacon.__data.__kind)
#endif

static pthread_key_t held_spill_key;
static pthread_once_t held_spill_key_once = PTHREAD_ONCE_INIT;

static void
free_held_spill(void *spill)
{
    free(spill);
}

static void
make_held_spill_key(void)
{
    (void)pthread_key_create(&held_spill_key, free_held_spill);
}

static inline struct held_lock *
held_at(struct lock_thread *t, unsigned i)
{
    return i < HELD_INLINE ? &t->held_inline[i]
                           : &t->held_spill[i - HELD_INLINE];
}

static inline struct held_lock *
find_held(struct lock_thread *t, const seqlock_t *sl)
{
    for (unsigned i = 0; i < t->held_count; i++) {
        struct held_lock *h = held_at(t, i);
        if (h->lock == sl) {
            return h;
        }
    }
    return NULL;
}

/* Room for one more entry: 0, ENOLCK (SEQLOCK_MAX_HELD) or ENOMEM. */
static int
reserve_held(struct lock_thread *t)
{
    if (t->held_count >= SEQLOCK_MAX_HELD) {
        return ENOLCK;
    }
    if (SEQLOCK_LIKELY(t->held_count < HELD_INLINE + t->held_spill_cap)) {
        return 0;
    }
    unsigned cap = t->held_spill_cap ? 2 * t->held_spill_cap : 8;
    struct held_lock *more = realloc(t->held_spill, cap * sizeof *more);
    if (more == NULL) {
        return ENOMEM;
    }
    if (t->held_spill == NULL) {
        (void)pthread_once(&held_spill_key_once, make_held_spill_key);
    }
    t->held_spill = more;
    t->held_spill_cap = cap;
    (void)pthread_setspecific(held_spill_key, more);
    return 0;
}

static inline void
forget_held(struct lock_thread *t, struct held_lock *h)
{
    *h = *held_at(t, t->held_count - 1);
    t->held_count--;
}

int
seqlock_held(const seqlock_t *sl)
{
    const struct held_lock *h = find_held(this_thread(), sl);
    if (h == NULL) {
        return SEQLOCK_HOLDS_NOTHING;
    }
    return h->section == NO_SECTION ? SEQLOCK_HOLDS_WORD
                                    : SEQLOCK_HOLDS_SECTION;
}

/* The kind glibc gives a robust, process-shared mutex (the value init_beacon
 * leaves in __kind), learnt from one of our own the first time it is
 * needed (threads that race to learn it learn the same). */
#ifdef BEACON_KIND
#define KIND_UNKNOWN (-1)
static _Atomic int beacon_kind_value = KIND_UNKNOWN;

static int
beacon_kind(void)
{
    int kind = atomic_load_explicit(&beacon_kind_value,
                                    memory_order_relaxed);
    if (SEQLOCK_UNLIKELY(kind == KIND_UNKNOWN)) {
        seqlock_t probe;
        if (init_beacon(&probe) == 0) {
            kind = __atomic_load_n(BEACON_KIND(&probe), __ATOMIC_RELAXED);
            (void)pthread_mutex_destroy(&probe.beacon);
            atomic_store_explicit(&beacon_kind_value, kind,
                                  memory_order_relaxed);
        }
    }
    return kind;
}
#endif

/* 1 if glibc may be handed the beacon: its kind is a robust, shared
 * mutex's (another kind sends glibc down paths that assert, or that never
 * put the mutex on the robust list). */
static int
beacon_kind_ok(const seqlock_t *sl)
{
#ifdef BEACON_KIND
    return __atomic_load_n(BEACON_KIND(sl), __ATOMIC_RELAXED) == beacon_kind();
#else
    (void)sl;
    return 1;
#endif
}

/* Just after our trylock: remember the owner words glibc stored. */
static void
note_beacon_owner(seqlock_t *sl, struct held_lock *h)
{
#ifdef BEACON_WORD
    h->beacon_word = __atomic_load_n(BEACON_WORD(sl), __ATOMIC_RELAXED)
                     & FUTEX_TID_MASK;
    h->beacon_owner = __atomic_load_n(BEACON_OWNER(sl), __ATOMIC_RELAXED);
#else
    (void)sl;
    (void)h;
#endif
}

/* Before our unlock: put back what another process may have rewritten,
 * so that glibc releases the beacon and takes it off our robust list
 * (its unlock refuses, EPERM, a mutex whose word names another thread,
 * and another kind takes another path). */
static void
restore_beacon_owner(seqlock_t *sl, const struct held_lock *h)
{
#ifdef BEACON_WORD
    if (!beacon_kind_ok(sl)) {
        __atomic_store_n(BEACON_KIND(sl), beacon_kind(), __ATOMIC_RELAXED);
    }
    if (__atomic_load_n(BEACON_OWNER(sl), __ATOMIC_RELAXED)
        != h->beacon_owner) {
        __atomic_store_n(BEACON_OWNER(sl), h->beacon_owner, __ATOMIC_RELAXED);
    }
    int seen = __atomic_load_n(BEACON_WORD(sl), __ATOMIC_RELAXED);
    while ((seen & (FUTEX_TID_MASK | FUTEX_OWNER_DIED)) != h->beacon_word
           && !__atomic_compare_exchange_n(
               BEACON_WORD(sl), &seen, h->beacon_word | (seen & FUTEX_WAITERS),
               0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
#else
    (void)sl;
    (void)h;
#endif
}

int
seqlock_check(const seqlock_t *sl)
{
    if (atomic_load_explicit(&sl->ready, memory_order_acquire)
        != SEQLOCK_READY) {
        return EINVAL;
    }
    return beacon_kind_ok(sl) ? 0 : EINVAL;
}

/* What the beacon's word says, read once.  The kernel marks a dead
 * holder's robust futex FUTEX_OWNER_DIED and clears its id, so a word
 * that has the bit and an id is no mark of the kernel's: another process
 * rewrote the word of a beacon a live thread holds (its unlock puts the
 * word back).  Without glibc's word to look at: always held. */
enum beacon_state { BEACON_HELD, BEACON_FREE, BEACON_MARKED_DEAD };

static enum beacon_state
beacon_state(const seqlock_t *sl)
{
#ifdef BEACON_WORD
    int word = __atomic_load_n(BEACON_WORD(sl), __ATOMIC_RELAXED);
    if (word == 0) {
        return BEACON_FREE;
    }
    if ((word & FUTEX_OWNER_DIED) && (word & FUTEX_TID_MASK) == 0) {
        return BEACON_MARKED_DEAD;
    }
#else
    (void)sl;
#endif
    return BEACON_HELD;
}

int
seqlock_owner_died(const seqlock_t *sl)
{
    if (atomic_load_explicit(&sl->abandoned, memory_order_relaxed)) {
        return 1;
    }
    /* The acquire load of `ready` orders the peek after the beacon's
     * setup (a SEQLOCK_UNLOCKED lock gets it from its first writer). */
    return atomic_load_explicit(&sl->holder, memory_order_relaxed) != 0
           && atomic_load_explicit(&sl->ready, memory_order_acquire)
                  == SEQLOCK_READY
           && beacon_state(sl) == BEACON_MARKED_DEAD;
}

static inline void
gap_ended(struct lock_thread *t)
{
    t->gap.lock = NULL;
}

/* Take the word from holder h, found in a gap (word held, beacon free and
 * unmarked)?  Not while the gap may be a live holder's passing one (under
 * GAP_LOOK_NS); then only if the holder is dead, as /proc tells for a
 * holder of our PID namespace (looked at again every RECHECK_NS while
 * it lives: preempted in its gap, or stopped, or its beacon's word
 * rewritten mid-section); a holder we cannot look at, after GAP_NS. */
static int
gap_holder_gone(struct lock_thread *t, const seqlock_t *sl, uint64_t h)
{
    int64_t now = monotonic_ns();
    uint64_t gap = atomic_load_explicit(&sl->gaps, memory_order_relaxed);
    if (t->gap.lock != sl || t->gap.holder != h || t->gap.gap != gap
        || now - t->gap.seen > WATCH_STALE_NS) {
        t->gap = (struct gap_watch){sl, h, gap, now, now, 0, HOLDER_UNKNOWN};
        return 0;
    }
    t->gap.seen = now;
    if (now - t->gap.since < GAP_LOOK_NS) {
        return 0;
    }
    if (t->gap.looked == 0 || now - t->gap.looked >= RECHECK_NS) {
        t->gap.verdict = holder_verdict(sl, h);
        t->gap.looked = now;
    }
    switch (t->gap.verdict) {
    case HOLDER_DEAD:
        return 1;
    case HOLDER_ALIVE:
        return 0;
    default:
        return now - t->gap.since >= GAP_NS;
    }
}

/*
 * Fairness.  The lock word is taken by whoever tries first when it comes
 * free (no queue), and a writer that releases and retakes at once can
 * keep a sleeper out for ever (a reader's locking pass in a write storm).
 * So a sleeper that has waited STARVE_NS names itself in `starving`; then
 * others leave the free word to it (the release wakes every sleeper) for
 * up to STARVE_GRACE_NS, after which they take it as if nobody were
 * starving: a starving waiter that died or stopped cannot hold them off.
 */
#define STARVE_NS (1000 * 1000LL)        /* 1 ms */
#define STARVE_GRACE_NS (5 * 1000 * 1000LL) /* 5 ms */

/* Nonzero if another's starvation asks us to keep off the free word now. */
static int
keep_off(struct lock_thread *t, seqlock_t *sl, uint64_t me)
{
    uint64_t starving = atomic_load_explicit(&sl->starving,
                                             memory_order_relaxed);
    if (starving == 0 || starving == me) {
        return 0;
    }
    int64_t now = monotonic_ns();
    if (t->held_off.lock != sl) {
        t->held_off.lock = sl;
        t->held_off.since = now;
        return 1;
    }
    if (now - t->held_off.since < STARVE_GRACE_NS) {
        return 1;
    }
    /* The starving waiter did not come: forget it. */
    (void)atomic_compare_exchange_strong_explicit(
        &sl->starving, &starving, 0, memory_order_relaxed,
        memory_order_relaxed);
    t->held_off.lock = NULL;
    return 0;
}

/* Take the word once: free, or from a holder dead (or gone in its gap for
 * GAP_NS).  Returns 0, EOWNERDEAD (taken over from a holder that died or
 * abandoned a section, or whose gap left the count odd: repair first),
 * EBUSY, EINVAL (a corrupted beacon), or a pthread error, with the word
 * given back.  On 0 and EOWNERDEAD, *h has the beacon's owner words. */
static int
try_lock_word(struct lock_thread *t, seqlock_t *sl, uint64_t me,
              struct held_lock *held)
{
    int err = ensure_ready(sl);
    if (err != 0) {
        return err;
    }
    uint64_t h = atomic_load_explicit(&sl->holder, memory_order_relaxed);
    int takeover = 0, dead = 0;
    if (h == 0 && keep_off(t, sl, me)) {
        return EBUSY;
    }
    t->held_off.lock = NULL;
    if (h == me) {
        /* Our token, though this thread holds no lock at this address:
         * the same lock through another mapping of its memory.  Waiting
         * would be for ourselves. */
        return EDEADLK;
    }
    if (h != 0) {
        switch (beacon_state(sl)) {
        case BEACON_MARKED_DEAD:
            dead = 1;
            break;
        case BEACON_FREE: /* a gap */
            if (!gap_holder_gone(t, sl, h)) {
                return EBUSY;
            }
            break;
        default: /* held: by a live holder, whatever else its word says */
            gap_ended(t);
            return EBUSY;
        }
        takeover = 1;
    }
    gap_ended(t);
    if (!beacon_kind_ok(sl)) {
        return EINVAL;
    }
    /* A takeover that fails gives the word back to the holder it took it
     * from: the holder's record of itself goes back with it. */
    struct seqlock_owner theirs;
    int have_theirs = takeover && read_owner(sl, &theirs);
    if (!atomic_compare_exchange_strong_explicit(
            &sl->holder, &h, me, memory_order_acquire, memory_order_relaxed)) {
        return EBUSY; /* another taker came first */
    }
    publish_owner(sl, t, me);
    atomic_fetch_add_explicit(&sl->gaps, 1, memory_order_relaxed);
    err = pthread_mutex_trylock(&sl->beacon);
    if (err == 0 || err == EOWNERDEAD) {
        if (err == EOWNERDEAD) {
            /* If we die repairing, the kernel marks the beacon again. */
            (void)pthread_mutex_consistent(&sl->beacon);
            dead = 1;
        }
        /* The beacon makes the lock ours.  A waiter that took our gap for
         * a dead holder's may have the word for an instant: it gives it
         * back when it finds the beacon taken, and our store wins. */
        atomic_store_explicit(&sl->holder, me, memory_order_relaxed);
        note_beacon_owner(sl, held);
        /* A gap's holder has no section open (it has not opened one yet,
         * or closed it), so there is nothing to repair, unless the count
         * says otherwise. */
        if (takeover && !dead && (seqlock_sequence(sl) & 1u)) {
            dead = 1;
        }
        return dead ? EOWNERDEAD : 0;
    }
    /* EBUSY: a holder we took for gone locked its beacon after all; or
     * the beacon is broken.  Give the word back. */
    if (have_theirs) {
        write_owner(sl, &theirs);
    }
    uint64_t mine = me;
    (void)atomic_compare_exchange_strong_explicit(
        &sl->holder, &mine, takeover ? h : 0, memory_order_release,
        memory_order_relaxed);
    return err == EBUSY ? EBUSY : err;
}

/* Sleep while the holder holds its beacon, at most nap_ns: on the
 * beacon's word, with FUTEX_WAITERS set as glibc's own waiters set it, so
 * that the holder's unlock wakes one sleeper, and so does the kernel the
 * moment the holder dies.  (Only the holder's own pending operations
 * touch the beacon: waiting here opens no window for a contender.)  In a
 * gap (word free, holder set) yield: it lasts instructions.  Without
 * glibc's word to look at, nap 1 ms. */
static void
sleep_on_beacon(seqlock_t *sl, int64_t nap_ns)
{
#ifdef BEACON_WORD
    int *word = BEACON_WORD(sl);
    int seen = __atomic_load_n(word, __ATOMIC_RELAXED);
    if (seen == 0 || (seen & FUTEX_OWNER_DIED)) {
        sched_yield(); /* a gap, or dead: try again */
        return;
    }
    if (!(seen & FUTEX_WAITERS)) {
        if (!__atomic_compare_exchange_n(word, &seen, seen | FUTEX_WAITERS,
                                         0, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED)) {
            return; /* it changed: try again */
        }
        seen |= FUTEX_WAITERS;
    }
    struct timespec ts = timespec_of(nap_ns);
    (void)syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
#else
    struct timespec ts = timespec_of(nap_ns < 1000000 ? nap_ns : 1000000);
    (void)nanosleep(&ts, NULL);
#endif
}

/* Before the holder's unlock: clear FUTEX_WAITERS in the beacon's word, so
 * that glibc's unlock makes no system call (release_lock_word() wakes the
 * sleepers itself, after giving the word back).  1 if it was set. */
static int
take_waiters_flag(seqlock_t *sl)
{
#ifdef BEACON_WORD
    /* a plain load first: with nobody asleep (the common case) no
     * read-modify-write */
    return (__atomic_load_n(BEACON_WORD(sl), __ATOMIC_RELAXED) & FUTEX_WAITERS)
           && (__atomic_fetch_and(BEACON_WORD(sl), ~FUTEX_WAITERS,
                                  __ATOMIC_RELAXED)
               & FUTEX_WAITERS);
#else
    (void)sl;
    return 0;
#endif
}

static void
wake_on_beacon(seqlock_t *sl, int how_many)
{
#ifdef BEACON_WORD
    (void)syscall(SYS_futex, BEACON_WORD(sl), FUTEX_WAKE, how_many, NULL,
                  NULL, 0);
#else
    (void)sl;
    (void)how_many;
#endif
}

/* A writer that slept and then took the beacon keeps FUTEX_WAITERS set in
 * it, as glibc's own lock does: another sleeper may remain, and the unlock
 * must wake it (a trylock writes the bare thread id). */
static void
keep_waiters_flag(seqlock_t *sl)
{
#ifdef BEACON_WORD
    __atomic_fetch_or(BEACON_WORD(sl), FUTEX_WAITERS, __ATOMIC_RELAXED);
#else
    (void)sl;
#endif
}

/* Take the word within timeout_ns: spin, yield, then sleep on the
 * holder's beacon.  Returns 0, EOWNERDEAD, ETIMEDOUT, EINVAL or a pthread
 * error. */
static int
take_lock_word(struct lock_thread *t, seqlock_t *sl, uint64_t me,
               int64_t timeout_ns, struct held_lock *held)
{
    int err = try_lock_word(t, sl, me, held);
    if (err != EBUSY) {
        return err;
    }
    if (timeout_ns == 0) {
        return ETIMEDOUT;
    }
    int64_t deadline = deadline_after(timeout_ns);
    int64_t first_sleep = 0;
    int slept = 0;
    for (unsigned round = 0;; round++) {
        if (round < SPIN_ROUNDS) {
            cpu_relax();
        }
        else if (round < SPIN_ROUNDS + YIELD_ROUNDS) {
            sched_yield();
        }
        else {
            int64_t nap = next_nap_ns(deadline, WRITER_NAP_NS);
            if (nap == 0) {
                err = ETIMEDOUT;
                break;
            }
            if (!slept) {
                first_sleep = monotonic_ns();
            }
            else if (monotonic_ns() - first_sleep >= STARVE_NS) {
                uint64_t none = 0;
                (void)atomic_compare_exchange_strong_explicit(
                    &sl->starving, &none, me, memory_order_relaxed,
                    memory_order_relaxed);
            }
            if (atomic_load_explicit(&sl->ready, memory_order_acquire)
                == SEQLOCK_READY) {
                sleep_on_beacon(sl, nap);
            }
            else { /* another taker is setting the beacon up */
                struct timespec ts = timespec_of(nap < 1000000 ? nap
                                                               : 1000000);
                (void)nanosleep(&ts, NULL);
            }
            slept = 1;
        }
        err = try_lock_word(t, sl, me, held);
        if (err != EBUSY) {
            if (slept && (err == 0 || err == EOWNERDEAD)) {
                keep_waiters_flag(sl);
            }
            break;
        }
        if (deadline >= 0 && round < SPIN_ROUNDS + YIELD_ROUNDS
            && round % 16 == 15 && monotonic_ns() >= deadline) {
            err = ETIMEDOUT;
            break;
        }
    }
    uint64_t mine = me; /* no longer waiting: taken, or given up */
    (void)atomic_compare_exchange_strong_explicit(
        &sl->starving, &mine, 0, memory_order_relaxed, memory_order_relaxed);
    return err;
}

int
seqlock_lock_excl_timed(seqlock_t *sl, int64_t timeout_ns)
{
    struct lock_thread *t = this_thread();
    if (find_held(t, sl) != NULL) {
        return EDEADLK;
    }
    int err = reserve_held(t);
    if (err != 0) {
        return err;
    }
    uint64_t me = token_of(t);
    struct held_lock held = {sl, NO_SECTION, me, 0, 0};
    int saved_errno = errno;
    err = take_lock_word(t, sl, me, timeout_ns, &held);
    errno = saved_errno;
    if (err != 0 && err != EOWNERDEAD) {
        return err;
    }
    *held_at(t, t->held_count++) = held;
    if (atomic_load_explicit(&sl->abandoned, memory_order_relaxed)) {
        /* A taker before us could not repair this section: it is ours now,
         * as from its dead writer. */
        atomic_store_explicit(&sl->abandoned, 0, memory_order_relaxed);
        err = EOWNERDEAD;
    }
    return err;
}

void
seqlock_ask_turn(seqlock_t *sl)
{
    uint64_t none = 0;
    (void)atomic_compare_exchange_strong_explicit(
        &sl->starving, &none, seqlock_self(), memory_order_relaxed,
        memory_order_relaxed);
}

void
seqlock_drop_turn(seqlock_t *sl)
{
    uint64_t mine = seqlock_self();
    (void)atomic_compare_exchange_strong_explicit(
        &sl->starving, &mine, 0, memory_order_relaxed, memory_order_relaxed);
}

int
seqlock_open_section(seqlock_t *sl)
{
    struct held_lock *h = find_held(this_thread(), sl);
    if (h == NULL) {
        return EPERM;
    }
    if (h->section != NO_SECTION) {
        return EINVAL;
    }
    /* Make the count odd (it already is if a dead holder left its section
     * open: adopt it): a latch switch (seqlock_latch()), whose first fence
     * orders the last holder's stores before it and whose second orders it
     * before the caller's data stores. */
    uint64_t seq = seqlock_sequence(sl);
    if (seq & 1u) {
        h->section = seq - 1;
        atomic_thread_fence(memory_order_release);
    }
    else {
        h->section = seq;
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit(&sl->seqcount.sequence, seq + 1,
                              memory_order_relaxed);
        atomic_thread_fence(memory_order_release);
    }
    return 0;
}

int
seqlock_write_lock_timed(seqlock_t *sl, int64_t timeout_ns)
{
    int err = seqlock_lock_excl_timed(sl, timeout_ns);
    if (err == 0 || err == EOWNERDEAD) {
        (void)seqlock_open_section(sl);
    }
    return err;
}

/* The section that opened at `start` (even) ends: the count becomes start
 * + 2, then the sleepers are woken if one announced itself for this
 * section.  The count's store is a latch switch (its first fence publishes
 * the section's stores; its second orders the count before the caller's
 * stores to the other copy, seqlock_latch()); the seq_cst fence pairs with
 * the sleeper's announce-then-fence-then-check (sleep_while_count_is), so
 * either we see its announcement or it sees the new count. */
static void
end_section(seqlock_t *sl, uint64_t start)
{
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&sl->seqcount.sequence, start + 2,
                          memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    /* A sleeper announces the count it saw: this section's (start + 1)
     * or one before.  Not wake_from + 1 > start: that overflows for a
     * sleeper announced on the count 2**64 - 1. */
    if (atomic_load_explicit(&sl->wake_from, memory_order_relaxed)
        >= start) {
        wake_all_on(low_half(&sl->seqcount.sequence));
    }
}

int
seqlock_close_section(seqlock_t *sl)
{
    struct held_lock *h = find_held(this_thread(), sl);
    if (h == NULL) {
        return EPERM;
    }
    if (h->section == NO_SECTION) {
        /* A dead holder's section, taken over with the lock word */
        uint64_t seq = seqlock_sequence(sl);
        if (!(seq & 1u)) {
            return EINVAL;
        }
        h->section = seq - 1;
    }
    end_section(sl, h->section);
    h->section = NO_SECTION;
    return 0;
}

/* Unlock the beacon, then give the word back: never the word first, or a
 * contender would try a beacon its holder still holds (the one thing the
 * beacon design rules out: see the top of this section).  Between the two
 * lies the holder's second gap, which makes no system call, as kills
 * land on system calls: glibc's unlock would wake a sleeping writer
 * there, so the flag that asks it to is taken off first, and the sleepers
 * are woken after the word is given back.  The word's compare-and-swap: a
 * waiter that took it over in the gap has it now.  Returns 0, or
 * ENOTRECOVERABLE (seqlock_unlock()). */
static int
release_lock_word(struct lock_thread *t, seqlock_t *sl, struct held_lock *h)
{
    struct held_lock held = *h;
    forget_held(t, h);
    restore_beacon_owner(sl, &held);
    int sleepers = take_waiters_flag(sl);
    atomic_fetch_add_explicit(&sl->gaps, 1, memory_order_relaxed);
    int err = pthread_mutex_unlock(&sl->beacon);
    if (err != 0) { /* rewritten again after restore_beacon_owner(): once more */
        restore_beacon_owner(sl, &held);
        err = pthread_mutex_unlock(&sl->beacon);
    }
    uint64_t me = held.token;
    (void)atomic_compare_exchange_strong_explicit(
        &sl->holder, &me, 0, memory_order_release, memory_order_relaxed);
    int starving = atomic_load_explicit(&sl->starving, memory_order_relaxed)
                   != 0;
    if (sleepers || starving) {
        /* one, as glibc would; every one if the starving one must come */
        wake_on_beacon(sl, starving ? INT_MAX : 1);
    }
    return err == 0 ? 0 : ENOTRECOVERABLE;
}

int
seqlock_unlock(seqlock_t *sl)
{
    struct lock_thread *t = this_thread();
    struct held_lock *h = find_held(t, sl);
    if (h == NULL) {
        return EPERM;
    }
    if (h->section != NO_SECTION) {
        end_section(sl, h->section); /* never leave readers waiting */
    }
    return release_lock_word(t, sl, h);
}

int
seqlock_abandon(seqlock_t *sl)
{
    struct lock_thread *t = this_thread();
    struct held_lock *h = find_held(t, sl);
    if (h == NULL) {
        return EPERM;
    }
    if (h->section == NO_SECTION && !(seqlock_sequence(sl) & 1u)) {
        return EINVAL;
    }
    atomic_store_explicit(&sl->abandoned, 1, memory_order_release);
    int err = release_lock_word(t, sl, h);
    wake_all_on(low_half(&sl->seqcount.sequence)); /* readers: look again */
    return err;
}

/* ---- readers ---- */

/* Announce a sleeper waiting for the count to leave seq: wake_from only
 * ever grows (counts never repeat), so a stale announcement from a sleeper
 * that died cannot make a later section's end pay for a wake-up, and a
 * slow sleeper cannot lower a newer one's announcement. */
static void
announce_sleeper(seqlock_t *sl, uint64_t seq)
{
    uint64_t cur = atomic_load_explicit(&sl->wake_from, memory_order_relaxed);
    while (cur < seq && !atomic_compare_exchange_weak_explicit(
                            &sl->wake_from, &cur, seq, memory_order_seq_cst,
                            memory_order_relaxed)) {
    }
}

/* Sleep at most nap_ns while the count is still s, having announced it:
 * the announcement, a seq_cst fence, then a second look at the count pair
 * with end_section()'s store, fence, look at wake_from, so either its
 * writer sees us or we see its count.  Returns EINTR (a signal handler
 * ran), else 0: woken, timed out, or the count had moved. */
static int
sleep_while_count_is(seqlock_t *sl, uint64_t s, int64_t nap_ns)
{
    announce_sleeper(sl, s);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&sl->seqcount.sequence, memory_order_relaxed)
        != s) {
        return 0;
    }
    return sleep_on(low_half(&sl->seqcount.sequence), (uint32_t)s, nap_ns)
                   == EINTR
               ? EINTR
               : 0;
}

int
seqlock_read_begin_timed(const seqlock_t *sl, int64_t timeout_ns,
                         uint64_t *seq)
{
    seqlock_t *lock = (seqlock_t *)sl; /* sleeping announces; data untouched */
    int saved_errno = errno;
    uint64_t me = current_token();
    int64_t deadline = -2; /* computed when first needed */
    int result;
    for (unsigned round = 0;; round++) {
        uint64_t s = atomic_load_explicit(&lock->seqcount.sequence,
                                          memory_order_acquire);
        if (!(s & 1u)) {
            *seq = s;
            result = 0;
            break;
        }
        if (me != 0
            && atomic_load_explicit(&lock->holder, memory_order_relaxed)
                   == me) {
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
        if (seqlock_owner_died(lock)) {
            result = EOWNERDEAD;
            break;
        }
        if (deadline == -2) {
            deadline = deadline_after(timeout_ns);
        }
        int64_t nap = next_nap_ns(deadline, READER_NAP_NS);
        if (nap == 0) {
            result = ETIMEDOUT;
            break;
        }
        if (sleep_while_count_is(lock, s, nap) == EINTR) {
            result = EINTR;
            break;
        }
    }
    errno = saved_errno;
    return result;
}

/* ---- readers that wait for news ---- */

/* A read-only waiter's next nap: it cannot announce itself, so it looks
 * again soon after a change and ever less often while nothing changes. */
static int64_t
poll_nap_ns(int64_t last)
{
    const int64_t first = SEQLOCK_POLL_FIRST_NAP_US * 1000LL;
    const int64_t cap = SEQLOCK_POLL_NAP_MS * 1000 * 1000LL;
    if (last <= 0) {
        return first;
    }
    return last >= cap / 2 ? cap : 2 * last;
}

int
seqlock_wait_for_change_flags(const seqlock_t *sl, uint64_t seq,
                              int64_t timeout_ns,
                              const _Atomic uint32_t *cancel, unsigned flags,
                              uint64_t *now)
{
    seqlock_t *lock = (seqlock_t *)sl; /* sleeping announces; data untouched */
    int saved_errno = errno;
    uint64_t me = current_token();
    int64_t deadline = -2; /* computed when first needed */
    int64_t poll_nap = 0;
    int result;
    for (;;) {
        uint64_t s = atomic_load_explicit(&lock->seqcount.sequence,
                                          memory_order_acquire);
        if (!(s & 1u) && s != seq) {
            *now = s;
            result = 0;
            break;
        }
        if (cancel != NULL
            && atomic_load_explicit(cancel, memory_order_acquire)) {
            result = ECANCELED;
            break;
        }
        if (me != 0
            && atomic_load_explicit(&lock->holder, memory_order_relaxed)
                   == me) {
            result = EDEADLK;
            break;
        }
        if (!(flags & SEQLOCK_WAIT_THROUGH_DEATH) && (s & 1u)
            && seqlock_owner_died(lock)) {
            result = EOWNERDEAD; /* nobody will end this section */
            break;
        }
        if (deadline == -2) {
            deadline = timeout_ns == 0 ? 0 : deadline_after(timeout_ns);
        }
        /* A cancel's wake-up finds nobody if it lands between our look at
         * *cancel and our futex wait (the count, our futex word, does not
         * change): a cancellable wait naps short. */
        int64_t cap = cancel != NULL ? CANCELLABLE_NAP_NS : WAITER_NAP_NS;
        if (flags & SEQLOCK_WAIT_READ_ONLY) {
            poll_nap = poll_nap_ns(poll_nap);
            cap = poll_nap < cap ? poll_nap : cap;
        }
        int64_t nap = next_nap_ns(deadline, cap);
        if (nap == 0) {
            result = ETIMEDOUT;
            break;
        }
        int slept = (flags & SEQLOCK_WAIT_READ_ONLY)
                        ? sleep_on(low_half(&lock->seqcount.sequence),
                                   (uint32_t)s, nap)
                        : sleep_while_count_is(lock, s, nap);
        if (slept == EINTR) {
            result = EINTR;
            break;
        }
    }
    errno = saved_errno;
    return result;
}

int
seqlock_wait_for_change(const seqlock_t *sl, uint64_t seq,
                        int64_t timeout_ns, const _Atomic uint32_t *cancel,
                        uint64_t *now)
{
    return seqlock_wait_for_change_flags(sl, seq, timeout_ns, cancel, 0, now);
}

void
seqlock_wake_waiters(const seqlock_t *sl)
{
    seqlock_t *lock = (seqlock_t *)sl;
    atomic_thread_fence(memory_order_seq_cst); /* the caller's *cancel */
    wake_all_on(low_half(&lock->seqcount.sequence));
}

uint64_t
seqlock_read_wait_(const seqlock_t *sl)
{
    uint64_t seq = 0;
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

/* ---- fork ---- */

/* Every tracked process-private lock; the list's mutex is held across
 * fork() (prepare/parent/child), so the child inherits a whole list. */
static pthread_mutex_t private_locks_mutex = PTHREAD_MUTEX_INITIALIZER;
static seqlock_private_t private_locks = {
    .prev = &private_locks, .next = &private_locks,
};

void
seqlock_track_private(seqlock_private_t *p, seqlock_t *sl,
                      void (*undo)(void *arg), void *arg)
{
    (void)pthread_once(&atfork_once, register_atfork);
    p->lock = sl;
    p->undo = undo;
    p->arg = arg;
    pthread_mutex_lock(&private_locks_mutex);
    p->next = &private_locks;
    p->prev = private_locks.prev;
    private_locks.prev->next = p;
    private_locks.prev = p;
    pthread_mutex_unlock(&private_locks_mutex);
}

void
seqlock_untrack_private(seqlock_private_t *p)
{
    if (p->next == NULL) {
        return;
    }
    pthread_mutex_lock(&private_locks_mutex);
    p->prev->next = p->next;
    p->next->prev = p->prev;
    pthread_mutex_unlock(&private_locks_mutex);
    p->next = p->prev = NULL;
}

/* In the child: the only thread, once the forking thread, now has token
 * me.  Idempotent, as a lock may be tracked twice. */
static void
repair_in_child(seqlock_private_t *p, uint64_t me)
{
    seqlock_t *sl = p->lock;
    if (atomic_load_explicit(&sl->ready, memory_order_acquire)
        != SEQLOCK_READY) {
        return; /* never taken */
    }
    uint64_t holder = atomic_load_explicit(&sl->holder, memory_order_relaxed);
    if (holder == me) {
        return; /* repaired already */
    }
    /* The beacon names a thread of the parent and sits on no robust list
     * here: make it anew, whoever holds the word (a thread of the parent
     * may have given the word back and not yet unlocked the beacon). */
    if (init_beacon(sl) != 0) {
        return; /* broken */
    }
    struct held_lock *mine = find_held(this_thread(), sl);
    if (mine != NULL) {
        /* The forking thread keeps its lock: its section goes on. */
        if (pthread_mutex_lock(&sl->beacon) == 0) {
            atomic_store_explicit(&sl->holder, me, memory_order_relaxed);
            publish_owner(sl, this_thread(), me);
            mine->token = me;
            note_beacon_owner(sl, mine);
        }
        return;
    }
    if (holder == 0 || pthread_mutex_lock(&sl->beacon) != 0) {
        return; /* free; or broken */
    }
    atomic_store_explicit(&sl->holder, me, memory_order_relaxed);
    if (p->undo != NULL) {
        p->undo(p->arg);
    }
    uint64_t seq = seqlock_sequence(sl);
    if (seq & 1u) {
        if (p->undo != NULL) {
            end_section(sl, seq - 1);
        }
        else { /* nothing can repair it: leave it to the next writer */
            atomic_store_explicit(&sl->abandoned, 1, memory_order_relaxed);
        }
    }
    (void)pthread_mutex_unlock(&sl->beacon);
    atomic_store_explicit(&sl->holder, 0, memory_order_relaxed);
}

static void
before_fork(void)
{
    pthread_mutex_lock(&private_locks_mutex);
}

static void
after_fork_in_parent(void)
{
    pthread_mutex_unlock(&private_locks_mutex);
}

/* In the child: the forking thread's record of what it holds came from
 * the parent.  A lock in memory the child shares with the parent is the
 * parent's thread's, which lives on there: the child holds none of them
 * (its copy of a private lock it keeps: repair_in_child()). */
static void
forget_shared_locks_in_child(void)
{
    struct lock_thread *t = this_thread();
    for (unsigned i = 0; i < t->held_count;) {
        struct held_lock *h = held_at(t, i);
        int private_lock = 0;
        for (seqlock_private_t *p = private_locks.next; p != &private_locks;
             p = p->next) {
            private_lock |= p->lock == h->lock;
        }
        if (private_lock) {
            i++;
        }
        else {
            forget_held(t, h); /* the last entry moves to i */
        }
    }
}

static void
after_fork_in_child(void)
{
    struct lock_thread *t = this_thread();
    atomic_store_explicit(&my_pid_ns, NS_UNKNOWN, memory_order_relaxed);
    atomic_store_explicit(&t->token, 0, memory_order_relaxed);
    t->identity = IDENTITY_UNKNOWN; /* another thread id, start time */
    forget_shared_locks_in_child();
    uint64_t me = seqlock_self();
    for (seqlock_private_t *p = private_locks.next; p != &private_locks;
         p = p->next) {
        repair_in_child(p, me);
    }
    pthread_mutex_unlock(&private_locks_mutex);
}

static void
register_atfork(void)
{
    (void)pthread_atfork(before_fork, after_fork_in_parent,
                         after_fork_in_child);
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
