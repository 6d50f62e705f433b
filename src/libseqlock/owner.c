/*
 * owner.c - who holds a lock word: the owner record the holder writes
 * just after winning the word (seqlock_t.owner: its token, PID namespace,
 * thread id and start time), and what a waiter that finds the holder in a
 * gap (word held, beacon free and unmarked) makes of it: a holder of our
 * PID namespace is alive or dead as /proc says; any other is taken over
 * only after GAP_NS (lock.c says why).  A record anyone may have
 * rewritten: it can make a waiter wrong about whom to wait for, never make
 * it write outside the lock.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
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
