/*
 * owner.c - who holds a lock word: the owner record the holder writes
 * just after winning the word (seqlock_t.owner: its token, PID namespace,
 * thread id and start time), and what a waiter that finds the holder in a
 * gap (word held, beacon free and unmarked) makes of it: a holder of our
 * PID namespace is alive or dead as /proc says; any other is taken over
 * only after GAP_NS (lock.c says why).  And stuck locks: which thread
 * alone can end the state a lock's words are in, and whether /proc shows
 * it held up inside the instructions that end it (lock.c, "Stuck
 * locks").  A record anyone may have rewritten: it can make a waiter
 * wrong about whom to wait for, or call the lock corrupt, never make it
 * write outside the lock.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "beacon.h"
#include "owner.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef __linux__
#include <sys/syscall.h>
#endif

#define PID_MAX_LIMIT 4194304u /* the kernel's ceiling for ids */

/* The inode of this process's PID namespace, as /proc says it, once /proc
 * is known to be this namespace's (its "self" is our pid): NS_UNKNOWN
 * until first asked (and again in a fork's child, which unshare() may
 * have put in another), NS_UNAVAILABLE if /proc cannot tell. */
#define NS_UNKNOWN 0
#define NS_UNAVAILABLE 1
static _Atomic uint64_t my_pid_ns = NS_UNKNOWN;

/* The unsigned decimal number p starts with, *end past its digits (p if
 * it has none); UINT64_MAX if it is larger.  Not strtoull(): under
 * _GNU_SOURCE, glibc 2.38 and later redirect it to __isoc23_strtoull, and
 * a library built there would need that glibc to load. */
static uint64_t
parse_decimal(const char *p, const char **end)
{
    uint64_t value = 0;
    while (*p >= '0' && *p <= '9') {
        unsigned digit = (unsigned)(*p - '0');
        value = value > (UINT64_MAX - digit) / 10 ? UINT64_MAX
                                                   : value * 10 + digit;
        p++;
    }
    *end = p;
    return value;
}

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
        const char *end;
        uint64_t pid = parse_decimal(self, &end);
        if (end != self && *end == '\0' && pid == (uint64_t)getpid()
            && stat("/proc/self/ns/pid", &st) == 0 && st.st_ino > 1) {
            ns = (uint64_t)st.st_ino;
        }
    }
#endif
    atomic_store_explicit(&my_pid_ns, ns, memory_order_relaxed);
    return ns;
}

void
seqlock_forget_namespace_(void)
{
    atomic_store_explicit(&my_pid_ns, NS_UNKNOWN, memory_order_relaxed);
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
    const char *end;
    uint64_t ticks = parse_decimal(p, &end);
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

/* How long thread tid of our PID namespace has run, in ns
 * (/proc/<tid>/schedstat's first field), or -1 if the kernel does not
 * say. */
static int64_t
thread_run_ns(uint32_t tid)
{
#ifdef __linux__
    char path[48], buf[128];
    snprintf(path, sizeof path, "/proc/%u/schedstat", (unsigned)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    (void)close(fd);
    if (n <= 0) {
        return -1;
    }
    buf[n] = '\0';
    const char *end;
    uint64_t ran = parse_decimal(buf, &end);
    return end == buf || ran > INT64_MAX ? -1 : (int64_t)ran;
#else
    (void)tid;
    return -1;
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

int
seqlock_know_myself_(struct lock_thread *t)
{
    return know_myself(t);
}

/* Say who holds the word (seqlock_t.owner).  The token is written last,
 * after a 0 and a release fence, so a reader that sees the same token
 * before and after reading the rest (an acquire fence between) read this
 * holder's record. */
void
seqlock_write_owner_(seqlock_t *sl, const struct seqlock_owner *o)
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
int
seqlock_read_owner_(const seqlock_t *sl, struct seqlock_owner *o)
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

void
seqlock_owner_of_(const seqlock_t *sl, uint64_t h, struct seqlock_owner *o)
{
    if (seqlock_read_owner_(sl, o) && atomic_load(&o->token) == h) {
        return;
    }
    atomic_init(&o->token, h);
    atomic_init(&o->pid_ns, NS_UNAVAILABLE);
    atomic_init(&o->started, 0);
    atomic_init(&o->tid, 0);
}

/* Just after winning the word: say that we hold it, and who we are.  A
 * thread that takes the lock again finds its own record there and writes
 * nothing. */
void
seqlock_publish_owner_(seqlock_t *sl, struct lock_thread *t, uint64_t me)
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
        seqlock_write_owner_(sl, &mine);
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
    if (ns == NS_UNAVAILABLE || !seqlock_read_owner_(sl, &o)
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

/* Take the word from holder h, found in a gap (word held, beacon free and
 * unmarked)?  Not while the gap may be a live holder's passing one (under
 * GAP_LOOK_NS); then only if the holder is dead, as /proc tells for a
 * holder of our PID namespace (looked at again every RECHECK_NS while
 * it lives: preempted in its gap, or stopped, or its beacon's word
 * rewritten mid-section); a holder we cannot look at, after GAP_NS. */
int
seqlock_gap_holder_gone_(struct lock_thread *t, const seqlock_t *sl, uint64_t h)
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
 * Stuck locks (lock.c says the rule, and when it could call an honest
 * lock corrupt).  A waiter that has slept reads the lock's words and the
 * owner record once, and names the thread that alone could end the state
 * they are in (its mover).  Once that state has stayed unchanged for
 * STUCK_NS, it looks at the mover in /proc every STUCK_RECHECK_NS (only a
 * thread of its own PID namespace can be looked at), and reads the words
 * again after each look: a state that moved while it looked (a holder
 * that died meanwhile is marked first) is no verdict.
 */

enum mover_state {
    MOVER_GONE,    /* no such thread, a zombie, or another with its id */
    MOVER_UNKNOWN, /* /proc cannot tell */
    MOVER_HELD_UP, /* stopped, or runnable and not run since */
    MOVER_MOVING,  /* running, or asleep */
    MOVER_SELF,    /* the waiter itself: in none of those instructions */
};

/* Thread tid of our PID namespace (started: its start time, 0 if not
 * known), as /proc says: held up if stopped by a signal or a debugger, or
 * runnable (or in an uninterruptible wait, a page's, say) and not run
 * RAN_NS since the watch's first look at it; moving if running or asleep
 * otherwise (the instructions that end a stuck state make no system
 * call, so a thread inside them is never asleep). */
static enum mover_state
mover_state(struct lock_thread *t, uint32_t tid, uint64_t started)
{
    if (tid == 0 || tid > PID_MAX_LIMIT) {
        return MOVER_GONE;
    }
    if (pid_namespace() == NS_UNAVAILABLE) {
        return MOVER_UNKNOWN;
    }
    if (know_myself(t) && tid == t->tid
        && (started == 0 || started == t->started)) {
        return MOVER_SELF;
    }
    char state;
    uint64_t began;
    switch (thread_status(tid, &state, &began)) {
    case 0:
        break;
    case ENOENT:
        return MOVER_GONE;
    default:
        return MOVER_UNKNOWN;
    }
    if ((started != 0 && began != started) || state == 'Z' || state == 'X'
        || state == 'x') {
        return MOVER_GONE;
    }
    switch (state) {
    case 'T': /* stopped by a signal */
    case 't': /* stopped by its tracer */
        return MOVER_HELD_UP;
    case 'R': /* runnable: preempted, or running */
    case 'D': {
        int64_t ran = thread_run_ns(tid);
        if (ran < 0) {
            return MOVER_HELD_UP; /* cannot tell: as if it had not run */
        }
        if (t->stuck.ran_ns < 0) {
            t->stuck.ran_ns = ran;
            return MOVER_HELD_UP;
        }
        return ran - t->stuck.ran_ns < RAN_NS ? MOVER_HELD_UP : MOVER_MOVING;
    }
    default:
        return MOVER_MOVING;
    }
}

/* The states lock.c's rule watches, by what their mover must be doing
 * for them to be honest. */
enum stuck_kind {
    NOT_STUCK,  /* free, held by a holder we cannot look at, dead-marked */
    ITS_TO_END, /* held up: it is inside the instructions that end it */
    ITS_GAP,    /* held up, or gone (then the gap rule takes it over) */
    ITS_HOLD,   /* alive: a live holder may hold the lock for as long */
};

/* Read sl's words and owner record once, into key (its words, mover,
 * started and kind), and say which state they are in. */
static enum stuck_kind
stuck_kind_of(const seqlock_t *sl, struct stuck_watch *key)
{
    key->ready = atomic_load_explicit(&sl->ready, memory_order_acquire);
    key->holder = atomic_load_explicit(&sl->holder, memory_order_relaxed);
    key->gaps = atomic_load_explicit(&sl->gaps, memory_order_relaxed);
    /* The beacon only once set up: `ready`'s acquire orders it after the
     * first taker's pthread_mutex_init(), whose stores are plain. */
    uint32_t word = key->ready == SEQLOCK_READY ? beacon_word(sl) : 0;
    key->beacon = beacon_key_of(word);
    struct seqlock_owner o;
    uint64_t ns = pid_namespace();
    int whole = seqlock_read_owner_(sl, &o);
    int ours = ns != NS_UNAVAILABLE && whole && atomic_load(&o.pid_ns) == ns;
    uint64_t named = whole ? atomic_load(&o.token) : 0; /* any namespace */
    uint64_t token = ours ? atomic_load(&o.token) : 0;
    uint32_t recorded = ours ? atomic_load(&o.tid) : 0;
    uint64_t recorded_start = ours ? atomic_load(&o.started) : 0;
    enum stuck_kind kind = NOT_STUCK;
    key->mover = recorded;
    key->started = recorded_start;
    if (key->ready == INITIALISING) {
        /* A first taker records itself before it sets the beacon up
         * (lock.c); no record of ours: mover 0, nobody we can see. */
        kind = ITS_TO_END;
    }
    else if (key->ready != SEQLOCK_READY || !BEACON_VISIBLE) {
        kind = NOT_STUCK;
    }
    else {
        switch (beacon_state_of(word)) {
        case BEACON_MARKED_DEAD:
            kind = NOT_STUCK;
            break;
        case BEACON_FREE: /* a gap, if the word is held */
            kind = key->holder != 0 && token == key->holder ? ITS_GAP
                                                            : NOT_STUCK;
            break;
        default:
            if (key->holder == 0) {
                /* Only the beacon's holder can end it, by storing its
                 * token: as its own namespace numbers it. */
                key->mover = beacon_tid_of(word);
                key->started = 0;
                kind = ITS_TO_END;
            }
            else if (named != key->holder) {
                /* A word the owner record does not name, in any
                 * namespace: honest only between a taker's win and its
                 * record, written just after (or a failed taker-over's
                 * giving back: the record first, then the word).  Its
                 * mover's id is nowhere: nobody we can look at. */
                key->mover = 0;
                key->started = 0;
                kind = ITS_TO_END;
            }
            else if (token != key->holder) {
                kind = NOT_STUCK; /* recorded in another namespace */
            }
            else {
                /* Its recorded holder holds the beacon, or is in its
                 * first gap over a taker that won the beacon after all:
                 * it gives the word back next. */
                kind = beacon_tid_of(word) == recorded ? ITS_HOLD
                                                       : ITS_TO_END;
            }
        }
    }
    if (kind == NOT_STUCK) {
        key->mover = 0;
        key->started = 0;
    }
    key->kind = (int)kind;
    return kind;
}

/* 1 if two readings of one lock found the same state. */
static int
same_state(const struct stuck_watch *a, const struct stuck_watch *b)
{
    return a->holder == b->holder && a->gaps == b->gaps
           && a->ready == b->ready && a->beacon == b->beacon
           && a->mover == b->mover && a->started == b->started
           && a->kind == b->kind;
}

/* Is a state of this kind dishonest, its mover being so? */
static int
stuck_verdict(enum stuck_kind kind, enum mover_state m)
{
    switch (kind) {
    case ITS_TO_END:
        return m != MOVER_HELD_UP;
    case ITS_GAP:
        return m == MOVER_MOVING || m == MOVER_SELF;
    case ITS_HOLD:
        return m == MOVER_GONE || m == MOVER_SELF;
    default:
        return 0;
    }
}

int
seqlock_lock_stuck_(struct lock_thread *t, const seqlock_t *sl)
{
    struct stuck_watch key;
    enum stuck_kind kind = stuck_kind_of(sl, &key);
    struct stuck_watch *w = &t->stuck;
    int64_t now = monotonic_ns();
    if (kind == NOT_STUCK) {
        w->lock = NULL;
        return 0;
    }
    if (w->lock != sl || !same_state(w, &key)
        || now - w->seen > STUCK_STALE_NS) {
        key.lock = sl;
        key.since = key.seen = now;
        key.looked = 0;
        key.ran_ns = -1;
        *w = key;
        return 0;
    }
    w->seen = now;
    if (now - w->since < STUCK_NS
        || (w->looked != 0 && now - w->looked < STUCK_RECHECK_NS)) {
        return 0;
    }
    w->looked = now;
    if (!stuck_verdict(kind, mover_state(t, w->mover, w->started))) {
        return 0;
    }
    if (stuck_kind_of(sl, &key) == NOT_STUCK || !same_state(w, &key)) {
        w->lock = NULL; /* it moved while we looked */
        return 0;
    }
    return 1;
}
