/*
 * seqlock.h - sequence locks for user space, after Linux <linux/seqlock.h>
 *
 * A seqlock protects a small amount of plain data that is read far more
 * often than it is written.  Writers serialise on a lock word and bump a
 * sequence counter before (odd: write in progress) and after (even: stable)
 * their update.  Readers take no lock and write no shared memory: they note
 * the counter, copy the data, and retry if a write overlapped the copy.
 * Readers never starve writers; a writer never waits for a reader.
 *
 * The canonical reader:
 *
 *     unsigned seq;
 *     do {
 *         seq = read_seqbegin(&lock);
 *         seqlock_read_copy(&snapshot, shared_words, sizeof snapshot);
 *     } while (read_seqretry(&lock, seq));
 *
 * and writer:
 *
 *     write_seqlock(&lock);
 *     seqlock_write_copy(shared_words, &update, sizeof update);
 *     write_sequnlock(&lock);
 *
 * WARNING: protect plain numbers only.  Until read_seqretry() returns 0 a
 * reader's copy may be torn, so never dereference a pointer (or use an
 * index, or divide by a value) read inside the loop: copy first, use after.
 *
 * Memory order (C11; Boehm, "Can Seqlocks Get Along with Programming
 * Language Memory Models?", MSPC 2012):
 *   reader: acquire load of the counter; relaxed loads of the data words;
 *           acquire fence; relaxed re-load of the counter.
 *   writer: take the lock (acquire); counter+1 (relaxed); release fence;
 *           relaxed stores of the data words; counter+1 (release store);
 *           release the lock (release).
 * If a reader's relaxed load saw any store made after the writer's release
 * fence, its acquire fence synchronises with that fence, so the re-load sees
 * the odd count and the read is retried.  Protected data are accessed only
 * through seqlock_word_t atomics (seqlock_read_copy / seqlock_write_copy),
 * so a racing copy is never a data race; nothing here relies on x86 order.
 *
 * Waiting never burns a core for long: a waiter spins briefly with a CPU
 * pause hint, then yields, then sleeps (a futex on Linux, so a seqlock_t in
 * memory shared between processes works too) and the writer wakes sleepers.
 *
 * Signals stand in for interrupts: the _irq, _irqsave and _bh variants block
 * every maskable signal for the calling thread for the section and restore
 * the previous mask afterwards.  User space has no bottom halves; its only
 * asynchronous context is a signal handler, so _bh is an alias for _irq.
 * A reader that runs in a signal handler which interrupted its own thread's
 * write section could never see an even count: read_seqbegin() detects this
 * and aborts with a message rather than spin forever (writers whose data a
 * handler reads must use the _irq variants; seqlock_read_begin_timed()
 * reports the same case as EDEADLK instead).
 *
 * The kernel's names are kept so that ported code compiles unchanged.  The
 * seqlock_* extensions add timeouts, error reporting, owner checks and the
 * word-wise copy helpers.  Build: cc -Isrc prog.c src/seqlock.c -lpthread
 */
#ifndef SEQLOCK_H
#define SEQLOCK_H

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
#error "seqlock.h is C11: include it from C"
#endif

/* Lock-word layout: 0 when free, else the owner's thread id (at most 30
 * bits, as Linux futex owner words) with SEQLOCK_WAITERS set while a writer
 * may be asleep waiting for it. */
#define SEQLOCK_OWNER_MASK 0x3fffffffu
#define SEQLOCK_WAITERS 0x80000000u

#if defined(__GNUC__) || defined(__clang__)
#define SEQLOCK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SEQLOCK_LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define SEQLOCK_UNLIKELY(x) (x)
#define SEQLOCK_LIKELY(x) (x)
#endif

typedef struct seqlock {
    _Atomic uint32_t sequence; /* even: stable; odd: a write is in progress */
    _Atomic uint32_t owner;    /* 0, or owner thread id | SEQLOCK_WAITERS */
    _Atomic uint32_t sleepers; /* readers asleep until sequence changes */
    uint32_t reserved;         /* zero; keeps the shared layout 16 bytes */
} seqlock_t;

#define SEQLOCK_UNLOCKED {0, 0, 0, 0}

/* One word of protected data.  64-bit where that is lock-free, else 32. */
#if ATOMIC_LLONG_LOCK_FREE == 2
typedef uint64_t seqlock_word_value_t;
#else
typedef uint32_t seqlock_word_value_t;
#endif
typedef _Atomic seqlock_word_value_t seqlock_word_t;
#define SEQLOCK_WORD_SIZE (sizeof(seqlock_word_value_t))
/* Number of words that hold nbytes of data. */
#define SEQLOCK_WORDS(nbytes) \
    (((nbytes) + SEQLOCK_WORD_SIZE - 1) / SEQLOCK_WORD_SIZE)

/* ---- slow paths and platform glue (seqlock.c) ---- */

/* Wait until the sequence is even.  timeout_ns < 0 waits for ever, 0 only
 * looks.  Returns 0 with *seq set, ETIMEDOUT, EINTR (a signal handler ran
 * while asleep), EDEADLK (the caller owns the write lock) or EOWNERDEAD
 * (the writer's thread no longer exists; the caller may take the lock with
 * seqlock_write_lock_timed() to repair the data). */
int seqlock_read_begin_timed(const seqlock_t *sl, int64_t timeout_ns,
                             unsigned *seq);

/* Take the write lock and make the sequence odd.  timeout_ns as above.
 * Returns 0, ETIMEDOUT, EINTR, EDEADLK (the caller already owns it), or
 * EOWNERDEAD: the lock was taken over from a thread that died holding it;
 * the caller now owns it and the data may be half-written. */
int seqlock_write_lock_timed(seqlock_t *sl, int64_t timeout_ns);

/* Take only the lock word, leaving the sequence alone (see
 * read_seqlock_excl).  Same timeouts and results as above; on EOWNERDEAD
 * the sequence may be odd (the dead owner was mid-write). */
int seqlock_lock_excl_timed(seqlock_t *sl, int64_t timeout_ns);

/* The calling thread's id as stored in the lock word (Linux: its TID). */
uint32_t seqlock_thread_id(void);

/* Nonzero if the thread with this id may still exist (Linux: kill(tid, 0)
 * does not fail with ESRCH).  Elsewhere always nonzero. */
int seqlock_thread_alive(uint32_t tid);

/* Nonzero if the thread with this id belongs to the calling process (Linux:
 * tgkill(getpid(), tid, 0)).  After fork() a lock word may name a thread of
 * the parent, which is alive but not here.  Elsewhere always nonzero. */
int seqlock_thread_in_this_process(uint32_t tid);

/* Wake every reader asleep on the sequence counter. */
void seqlock_wake_readers_(const seqlock_t *sl);
/* Wake one writer asleep on the lock word. */
void seqlock_wake_writer_(seqlock_t *sl);
/* Spin, yield, then sleep while the count is odd; the bottom of
 * read_seqbegin().  Aborts on EDEADLK. */
unsigned seqlock_read_wait_(const seqlock_t *sl);
/* Block all maskable signals for this thread; returns the previous nesting
 * depth, to pass back to seqlock_irq_restore_().  Only the outermost level
 * saves and restores the thread's mask (kept in thread-local storage). */
unsigned long seqlock_irq_save_(void);
void seqlock_irq_restore_(unsigned long depth);
/* Fatal misuse: print and abort (no error channel in the kernel API). */
void seqlock_die_(const char *what);

/* ---- initialisation ---- */

/**
 * seqlock_init - make *sl an unlocked seqlock with sequence 0
 * Not safe against concurrent users: call before sharing the lock.
 */
static inline void
seqlock_init(seqlock_t *sl)
{
    atomic_init(&sl->sequence, 0);
    atomic_init(&sl->owner, 0);
    atomic_init(&sl->sleepers, 0);
    sl->reserved = 0;
}

/* ---- readers ---- */

/**
 * read_seqbegin - start a read-side critical section
 * Returns: an even sequence value to pass to read_seqretry().  Waits (spin,
 * yield, sleep) while a writer is active.  The acquire load orders the
 * caller's data loads after it.
 */
static inline unsigned
read_seqbegin(const seqlock_t *sl)
{
    unsigned seq = atomic_load_explicit(&sl->sequence, memory_order_acquire);
    if (SEQLOCK_UNLIKELY(seq & 1u)) {
        seq = seqlock_read_wait_(sl);
    }
    return seq;
}

/**
 * read_seqretry - end a read-side critical section
 * Returns: nonzero if a write overlapped the section (the copy may be torn
 * and must be retried).  The acquire fence orders the caller's data loads
 * before the re-load of the counter.
 */
static inline int
read_seqretry(const seqlock_t *sl, unsigned start)
{
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&sl->sequence, memory_order_relaxed) != start;
}

/**
 * seqlock_read_try_begin - start a read section without waiting
 * Returns: nonzero with *seq set if no writer is active; 0 otherwise.
 */
static inline int
seqlock_read_try_begin(const seqlock_t *sl, unsigned *seq)
{
    *seq = atomic_load_explicit(&sl->sequence, memory_order_acquire);
    return !(*seq & 1u);
}

/**
 * seqlock_read_copy - copy protected data out, one relaxed load per word
 * Call between read_seqbegin() and read_seqretry(); dst is private memory.
 * A concurrent writer may make the copy torn, never a data race.
 */
static inline void
seqlock_read_copy(void *dst, const seqlock_word_t *src, size_t nbytes)
{
    unsigned char *out = (unsigned char *)dst;
    size_t whole = nbytes / SEQLOCK_WORD_SIZE;
    for (size_t i = 0; i < whole; i++) {
        seqlock_word_value_t w = atomic_load_explicit(
            (seqlock_word_t *)&src[i], memory_order_relaxed);
        memcpy(out + i * SEQLOCK_WORD_SIZE, &w, SEQLOCK_WORD_SIZE);
    }
    size_t tail = nbytes % SEQLOCK_WORD_SIZE;
    if (tail) {
        seqlock_word_value_t w = atomic_load_explicit(
            (seqlock_word_t *)&src[whole], memory_order_relaxed);
        memcpy(out + whole * SEQLOCK_WORD_SIZE, &w, tail);
    }
}

/* ---- writers ---- */

/**
 * write_tryseqlock - take the write lock if it is free
 * Returns: nonzero if taken (the sequence is now odd), 0 if another writer
 * holds it.  Never waits.  The release fence after the bump orders it before
 * the caller's data stores.
 */
static inline int
write_tryseqlock(seqlock_t *sl)
{
    uint32_t expected = 0;
    if (!atomic_compare_exchange_strong_explicit(
            &sl->owner, &expected, seqlock_thread_id(),
            memory_order_acquire, memory_order_relaxed)) {
        return 0;
    }
    uint32_t seq = atomic_load_explicit(&sl->sequence, memory_order_relaxed);
    atomic_store_explicit(&sl->sequence, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    return 1;
}

/**
 * write_seqlock - take the write lock, waiting for other writers
 * Afterwards the sequence is odd and the caller may store protected data.
 * Aborts if the caller already holds it (a recursive write would deadlock).
 * A lock whose owner thread died is taken over silently: use
 * seqlock_write_lock_timed() to be told (EOWNERDEAD).
 */
static inline void
write_seqlock(seqlock_t *sl)
{
    if (SEQLOCK_UNLIKELY(!write_tryseqlock(sl))) {
        int err;
        do { /* EINTR: a signal handler ran while we slept; keep waiting */
            err = seqlock_write_lock_timed(sl, -1);
        } while (err == EINTR);
        if (err == EDEADLK) {
            seqlock_die_("write_seqlock: the calling thread already holds "
                         "this seqlock");
        }
    }
}

/**
 * read_seqlock_excl - take the lock word as a reader, without touching the
 * sequence: writers are kept out, lock-free readers are not disturbed.
 * For a reader that must finish (read_seqbegin_or_lock's locking pass).
 * Aborts if the caller already holds the lock.
 */
static inline void
read_seqlock_excl(seqlock_t *sl)
{
    uint32_t expected = 0;
    if (SEQLOCK_UNLIKELY(!atomic_compare_exchange_strong_explicit(
            &sl->owner, &expected, seqlock_thread_id(),
            memory_order_acquire, memory_order_relaxed))) {
        int err;
        do {
            err = seqlock_lock_excl_timed(sl, -1);
        } while (err == EINTR);
        if (err == EDEADLK) {
            seqlock_die_("read_seqlock_excl: the calling thread already "
                         "holds this seqlock");
        }
    }
}

/**
 * read_sequnlock_excl - release the lock word taken by read_seqlock_excl
 * The release exchange orders the section before the next owner's
 * acquire; a writer asleep on the lock word is woken.
 */
static inline void
read_sequnlock_excl(seqlock_t *sl)
{
    uint32_t old = atomic_exchange_explicit(&sl->owner, 0,
                                            memory_order_release);
    if (old & SEQLOCK_WAITERS) {
        seqlock_wake_writer_(sl);
    }
}

/**
 * write_sequnlock - end a write section and release the lock
 * The release store of the even count publishes the data stores to readers
 * whose acquire load sees it; the seq_cst fence pairs with a sleeping
 * reader's registration so that no wake-up is lost.
 */
static inline void
write_sequnlock(seqlock_t *sl)
{
    uint32_t seq = atomic_load_explicit(&sl->sequence, memory_order_relaxed);
    atomic_store_explicit(&sl->sequence, seq + 1, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&sl->sleepers, memory_order_relaxed)) {
        seqlock_wake_readers_(sl);
    }
    read_sequnlock_excl(sl);
}

/**
 * seqlock_write_copy - store protected data, one relaxed store per word
 * The caller holds the write lock.  A partial last word is merged, so the
 * bytes past nbytes in that word keep their value.
 */
static inline void
seqlock_write_copy(seqlock_word_t *dst, const void *src, size_t nbytes)
{
    const unsigned char *in = (const unsigned char *)src;
    size_t whole = nbytes / SEQLOCK_WORD_SIZE;
    for (size_t i = 0; i < whole; i++) {
        seqlock_word_value_t w;
        memcpy(&w, in + i * SEQLOCK_WORD_SIZE, SEQLOCK_WORD_SIZE);
        atomic_store_explicit(&dst[i], w, memory_order_relaxed);
    }
    size_t tail = nbytes % SEQLOCK_WORD_SIZE;
    if (tail) {
        seqlock_word_value_t w = atomic_load_explicit(&dst[whole],
                                                      memory_order_relaxed);
        memcpy(&w, in + whole * SEQLOCK_WORD_SIZE, tail);
        atomic_store_explicit(&dst[whole], w, memory_order_relaxed);
    }
}

/* ---- queries ---- */

/** seqlock_sequence - the current count (odd while a write is in progress) */
static inline unsigned
seqlock_sequence(const seqlock_t *sl)
{
    return atomic_load_explicit(&sl->sequence, memory_order_relaxed);
}

/** seqlock_owner - the owner's thread id, or 0 if the lock is free */
static inline uint32_t
seqlock_owner(const seqlock_t *sl)
{
    return atomic_load_explicit(&sl->owner, memory_order_relaxed)
           & SEQLOCK_OWNER_MASK;
}

/** seqlock_held_by_me - nonzero if the calling thread holds the lock */
static inline int
seqlock_held_by_me(const seqlock_t *sl)
{
    return seqlock_owner(sl) == seqlock_thread_id();
}

/* ---- signal-masking variants (the kernel's interrupt variants) ---- */

#define write_seqlock_irqsave(sl, flags) \
    do { (flags) = seqlock_irq_save_(); write_seqlock(sl); } while (0)
#define write_sequnlock_irqrestore(sl, flags) \
    do { write_sequnlock(sl); seqlock_irq_restore_(flags); } while (0)
#define read_seqbegin_irqsave(sl, flags) \
    ((flags) = seqlock_irq_save_(), read_seqbegin(sl))
#define read_seqretry_irqrestore(sl, seq, flags) \
    seqlock_retry_restore_(read_seqretry((sl), (seq)), (flags))

/* The _irq forms save the previous mask in thread-local storage. */
#define write_seqlock_irq(sl) \
    do { (void)seqlock_irq_save_(); write_seqlock(sl); } while (0)
#define write_sequnlock_irq(sl) \
    do { write_sequnlock(sl); seqlock_irq_restore_(seqlock_irq_depth_() - 1); \
    } while (0)
#define read_seqbegin_irq(sl) ((void)seqlock_irq_save_(), read_seqbegin(sl))
#define read_seqretry_irq(sl, seq) \
    seqlock_retry_restore_(read_seqretry((sl), (seq)), \
                           seqlock_irq_depth_() - 1)

/* User space has no bottom halves: _bh means _irq (see the top comment). */
#define write_seqlock_bh(sl) write_seqlock_irq(sl)
#define write_sequnlock_bh(sl) write_sequnlock_irq(sl)
#define read_seqbegin_bh(sl) read_seqbegin_irq(sl)
#define read_seqretry_bh(sl, seq) read_seqretry_irq(sl, seq)

/* The current nesting depth of the signal-masking variants. */
unsigned long seqlock_irq_depth_(void);

static inline int
seqlock_retry_restore_(int retry, unsigned long depth)
{
    seqlock_irq_restore_(depth);
    return retry;
}

#endif /* SEQLOCK_H */
