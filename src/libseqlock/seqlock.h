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
 *   writer: take the lock (acquire); release fence, counter+1 (relaxed),
 *           release fence; relaxed stores of the data words; release
 *           fence, counter+1 (relaxed), release fence; release the lock
 *           (release).  (Each increment between two release fences is a
 *           latch switch too: seqlock_latch().)
 * If a reader's relaxed load saw any store made after the writer's release
 * fence, its acquire fence synchronises with that fence, so the re-load sees
 * the odd count and the read is retried.  Protected data are accessed only
 * through seqlock_word_t atomics (seqlock_read_copy / seqlock_write_copy),
 * so a racing copy is never a data race; nothing here relies on x86 order.
 * The counter is 64 bits wide, so a reader paused across 2^32 writes still
 * sees a different count; the kernel API's unsigned values are its low half.
 *
 * The lock word holds its holder's token: 64 random bits per thread (new
 * in a fork's child), so "is this lock mine?" never rests on a thread id.
 * A holder that dies (killed process, exited thread) never wedges the
 * lock, whatever PID namespace anyone lives in: the next taker hears
 * EOWNERDEAD (through a robust mutex, the beacon, that only the holder
 * touches: docs/implementation.md, "Owner identity and death").
 *
 * Waiting never burns a core for long: a waiter spins briefly with a CPU
 * pause hint, then yields, then sleeps on a futex (not _PRIVATE, so a
 * seqlock_t in memory shared between processes works).  Writers sleep on
 * the holder's beacon, where its unlock wakes one and the kernel wakes one
 * the moment the holder dies; readers sleep on the count, where a
 * section's end wakes them only if one announced itself, and look for a
 * dead writer every SEQLOCK_READER_NAP_MS.
 *
 * Signals stand in for interrupts: the _irq, _irqsave and _bh variants block
 * every maskable signal for the calling thread for the section and restore
 * the previous mask afterwards.  User space has no bottom halves; its only
 * asynchronous context is a signal handler, so _bh is an alias for _irq.
 * Readers may run in a signal handler: their paths make async-signal-safe
 * calls only (atomics, futex, sched_yield, write, abort).  Writers may not
 * (pthread mutexes are not async-signal-safe): a handler that reads data a
 * thread writes needs that thread's writers to use the _irq variants.  A
 * reader in a handler that interrupted its own thread's write section could
 * never see an even count: read_seqbegin() detects this and aborts with a
 * message rather than spin forever (seqlock_read_begin_timed() reports the
 * same case as EDEADLK instead).
 *
 * The kernel's names are kept so that ported code compiles unchanged.  The
 * seqlock_* extensions add timeouts, error reporting, dead-owner recovery,
 * fork repair for process-private locks, and the word-wise copy helpers.
 * Build: cc -Isrc/libseqlock prog.c with every .c file of src/libseqlock,
 *        -lpthread (src/libseqlock/README.md)
 */
#ifndef SEQLOCK_H
#define SEQLOCK_H

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
#error "seqlock.h is C11: include it from C"
#endif

#if defined(__GNUC__) || defined(__clang__)
#define SEQLOCK_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SEQLOCK_LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define SEQLOCK_UNLIKELY(x) (x)
#define SEQLOCK_LIKELY(x) (x)
#endif

/* A latch's count (see "latches" below): its lowest bit picks the copy
 * of the data that readers use. */
typedef struct {
    _Atomic uint64_t sequence;
} seqcount_latch_t;

#define SEQCNT_LATCH_ZERO(name) {.sequence = 0}

/* Bytes between two words that must not share a cache line: a line, and
 * the line x86's adjacent-line prefetcher fetches with it (arm64 cores
 * with 128-byte lines, Apple's, have one line of this size). */
#define SEQLOCK_LINE 128

/* The seqlock.  Its count is a latch count too: a write section (lock:
 * odd, close: even) switches the latch's readers between two copies with
 * the latch's fences, so data kept in two copies under a seqlock can be
 * read by latch readers that never wait (seqlock_latch()).
 *
 * The count has SEQLOCK_LINE bytes to itself and the sleepers'
 * announcement: a reader loads the count twice a read, and a writer stores
 * it twice a section, so it must not share a line with the words a writer
 * writes several times a section (the lock word, its beacon, the owner
 * record), or every section moves the readers' line back and forth once
 * per such store instead of twice. */
typedef struct seqlock {
    seqcount_latch_t seqcount;  /* even: stable; odd: a write is open */
    _Atomic uint64_t wake_from; /* highest count a reader sleeps on */
    unsigned char count_line[SEQLOCK_LINE - 16];
    _Atomic uint64_t holder;    /* the lock word: the holder's token */
    _Atomic uint64_t starving;  /* token of a writer waiting too long */
    _Atomic uint64_t gaps;      /* +1 as each holder enters a gap */
    _Atomic uint32_t ready;     /* SEQLOCK_READY once the beacon is set up */
    _Atomic uint32_t abandoned; /* an open section nobody can finish */
    pthread_mutex_t beacon;     /* robust, process-shared: the holder's */
    /* Who holds the lock word, as it wrote just after winning it, so that
     * a waiter of its PID namespace that finds it in a gap, or its beacon
     * marked dead, can tell a live holder from a dead one (owner.c).
     * The token is written last (0 while being written). */
    struct seqlock_owner {
        _Atomic uint64_t token;   /* the holder's token */
        _Atomic uint64_t pid_ns;  /* its PID namespace's inode; 1: unknown */
        _Atomic uint64_t started; /* its thread's start (ticks since boot) */
        _Atomic uint32_t tid;     /* its thread's id in that namespace */
        _Atomic uint32_t reserved;
    } owner;
} seqlock_t;

/* The layout of seqlock_t is an ABI: a seqlock_t in shared memory is read
 * by every process that maps it, built perhaps from another checkout.  Each
 * field's offset is pinned here (the beacon's size is the C library's, so
 * the owner record follows it at the next 8-byte boundary), and
 * SEQLOCK_LAYOUT_HASH(seqlock_t) folds every offset and the size into one
 * number that record.h stores in a record's header: two builds whose
 * layouts differ refuse each other's records.  A change here is a new
 * record version (RECORD_VERSION in record.h). */
#define SEQLOCK_OWNER_OFFSET \
    ((SEQLOCK_LINE + 32 + sizeof(pthread_mutex_t) + 7) / 8 * 8)
static_assert(offsetof(seqlock_t, seqcount) == 0, "seqlock_t ABI");
static_assert(offsetof(seqlock_t, wake_from) == 8, "seqlock_t ABI");
static_assert(offsetof(seqlock_t, holder) == SEQLOCK_LINE, "seqlock_t ABI");
static_assert(offsetof(seqlock_t, starving) == SEQLOCK_LINE + 8,
              "seqlock_t ABI");
static_assert(offsetof(seqlock_t, gaps) == SEQLOCK_LINE + 16, "seqlock_t ABI");
static_assert(offsetof(seqlock_t, ready) == SEQLOCK_LINE + 24, "seqlock_t ABI");
static_assert(offsetof(seqlock_t, abandoned) == SEQLOCK_LINE + 28,
              "seqlock_t ABI");
static_assert(offsetof(seqlock_t, beacon) == SEQLOCK_LINE + 32,
              "seqlock_t ABI");
static_assert(offsetof(seqlock_t, owner) == SEQLOCK_OWNER_OFFSET,
              "seqlock_t ABI");
static_assert(offsetof(seqlock_t, owner.token) == SEQLOCK_OWNER_OFFSET,
              "seqlock_t ABI");
static_assert(offsetof(seqlock_t, owner.pid_ns) == SEQLOCK_OWNER_OFFSET + 8,
              "seqlock_t ABI");
static_assert(offsetof(seqlock_t, owner.started) == SEQLOCK_OWNER_OFFSET + 16,
              "seqlock_t ABI");
static_assert(offsetof(seqlock_t, owner.tid) == SEQLOCK_OWNER_OFFSET + 24,
              "seqlock_t ABI");
static_assert(offsetof(seqlock_t, owner.reserved) == SEQLOCK_OWNER_OFFSET + 28,
              "seqlock_t ABI");
static_assert(sizeof(seqlock_t) == SEQLOCK_OWNER_OFFSET + 32, "seqlock_t ABI");

/* FNV-1a over 32-bit values, as a constant expression. */
#define SEQLOCK_FNV_(hash, value) \
    ((uint32_t)(((uint32_t)(hash) ^ (uint32_t)(value)) * 16777619u))
/* One number for the layout of a type with seqlock_t's field names: its
 * size, every field's offset and the beacon's size, in declaration order.
 * A type whose fields are regrouped at the same size hashes differently. */
#define SEQLOCK_LAYOUT_HASH(type) \
    SEQLOCK_FNV_(SEQLOCK_FNV_(SEQLOCK_FNV_(SEQLOCK_FNV_(SEQLOCK_FNV_( \
    SEQLOCK_FNV_(SEQLOCK_FNV_(SEQLOCK_FNV_(SEQLOCK_FNV_(SEQLOCK_FNV_( \
    SEQLOCK_FNV_(SEQLOCK_FNV_(SEQLOCK_FNV_(SEQLOCK_FNV_(SEQLOCK_FNV_( \
        2166136261u, sizeof(type)), \
        offsetof(type, seqcount)), offsetof(type, wake_from)), \
        offsetof(type, holder)), offsetof(type, starving)), \
        offsetof(type, gaps)), offsetof(type, ready)), \
        offsetof(type, abandoned)), offsetof(type, beacon)), \
        sizeof(((type *)0)->beacon)), offsetof(type, owner.token)), \
        offsetof(type, owner.pid_ns)), offsetof(type, owner.started)), \
        offsetof(type, owner.tid)), offsetof(type, owner.reserved))

/* A static initialiser for a process-private lock: the beacon is set up by
 * the first writer (seqlock_init() does it at once; use that for memory
 * shared between processes). */
#define SEQLOCK_UNLOCKED {.seqcount = SEQCNT_LATCH_ZERO(seqcount)}
#define SEQLOCK_READY 0x59444552u /* "REDY" */

/* Counts and data words are 64-bit atomics, which must be lock-free: a
 * reader in a signal handler must never wait for a lock inside the C
 * library that the thread it interrupted holds. */
#if ATOMIC_LLONG_LOCK_FREE != 2
#error "seqlock.h needs lock-free 64-bit atomics"
#endif

/* One word of protected data. */
typedef uint64_t seqlock_word_value_t;
typedef _Atomic seqlock_word_value_t seqlock_word_t;
#define SEQLOCK_WORD_SIZE (sizeof(seqlock_word_value_t))
/* Number of words that hold nbytes of data. */
#define SEQLOCK_WORDS(nbytes) \
    (((nbytes) + SEQLOCK_WORD_SIZE - 1) / SEQLOCK_WORD_SIZE)

/* ---- initialisation ---- */

/**
 * seqlock_init - make *sl an unlocked seqlock with sequence 0
 * Sets up the beacon (a robust, process-shared mutex).  Not safe against concurrent
 * users: call before sharing the lock.  Returns 0, or the error of
 * pthread_mutex_init() (the lock is then unusable).
 */
int seqlock_init(seqlock_t *sl);

/**
 * seqlock_check - 0 if *sl's words are those of a set-up lock (ready, its
 * beacon of the kind seqlock_init() makes), else EINVAL.  For a lock in
 * memory other processes may write: a snapshot, as they may rewrite it
 * at any moment after; the lock's functions check what they use again.
 */
int seqlock_check(const seqlock_t *sl);

/**
 * seqlock_destroy - release what seqlock_init() set up
 * The lock must be free, and nobody may use it again.
 */
void seqlock_destroy(seqlock_t *sl);

/* ---- identity ---- */

/**
 * seqlock_self - the calling thread's token: nonzero, 64 random bits
 * Stable for the thread's life; a fork's child gets a new one.  Tokens
 * are compared across processes and PID namespaces, where thread ids are
 * not identities.  A thread's first call sets up fork handling (not
 * async-signal-safe); readers' paths never make it.
 */
uint64_t seqlock_self(void);

/* ---- the lock word (lock.c) ---- */

/**
 * seqlock_lock_excl_timed - take the lock word, leaving the sequence alone
 * timeout_ns < 0 waits for ever, 0 only tries.  Returns 0; ETIMEDOUT;
 * EDEADLK if the caller already holds it (also through another mapping of
 * its memory: the lock word holds the caller's token); ENOLCK if the caller holds
 * SEQLOCK_MAX_HELD locks already (the kernel watches a dead thread's
 * robust list only so far); EOWNERDEAD if its holder died or abandoned its
 * section (seqlock_abandon()): the caller now holds it, and the sequence
 * is odd if a write section was left open (repair the data, then
 * seqlock_close_section()); EINVAL if the lock's words hold no valid
 * state (corrupted: a beacon of another kind, a garbage `ready`, or one
 * that says a used lock is being set up) or are stuck: for a second in a
 * state that only a thread they name can end, in a few instructions,
 * while /proc does not show that thread held up (stopped, or preempted)
 * ("Stuck locks" in lock.c); ENOTRECOVERABLE or another pthread error if
 * the beacon is broken.  Never waits past timeout_ns, not even for a lock
 * another thread is setting up (SEQLOCK_UNLOCKED), and with no timeout
 * waits for a live (or held-up) holder only, never for good on forged
 * words.  The lock word's acquire orders the caller's accesses after the
 * last holder's release.
 */
int seqlock_lock_excl_timed(seqlock_t *sl, int64_t timeout_ns);

/**
 * seqlock_open_section - open a write section on the lock word the caller
 * holds (seqlock_lock_excl_timed()): the count becomes odd, a latch switch
 * (seqlock_latch()) whose release fences order the last holder's stores
 * before it and it before the caller's data stores.  A dead holder's
 * section (odd already) is adopted as it stands.  The count the section
 * opened at is kept in the calling thread's own memory: closing it stores
 * that count + 2 whatever the shared word holds by then.  0, EPERM if the
 * caller does not hold the lock word, EINVAL if its section is open.
 */
int seqlock_open_section(seqlock_t *sl);

/**
 * seqlock_write_lock_timed - take the lock word and open a write section
 * As seqlock_lock_excl_timed(); on 0 and on EOWNERDEAD the sequence is odd
 * afterwards (a dead holder's section is adopted: its data may be half
 * written) and the release fence orders the odd count before the caller's
 * data stores.
 */
int seqlock_write_lock_timed(seqlock_t *sl, int64_t timeout_ns);

/**
 * seqlock_close_section - end the caller's write section, keeping the lock
 * The release store of the even count publishes the data stores; readers
 * asleep on the count are woken.  The caller must hold the lock word and
 * a section: its own (seqlock_open_section()), or a dead holder's it took
 * over (the count odd when it took the lock).  The even count stored is
 * the section's opening count + 2, from the caller's own memory: a count
 * rewritten meanwhile by another process cannot make the caller's close
 * fail or leave the section open.  Returns 0, EPERM (not the holder) or
 * EINVAL (no section is open).
 */
int seqlock_close_section(seqlock_t *sl);

/* How many locks one thread may hold at once: the kernel walks at most
 * 2048 entries of a dead thread's robust list, which other robust mutexes
 * share; a lock beyond them would outlive its dead holder unnoticed. */
#define SEQLOCK_MAX_HELD 1024

/**
 * seqlock_abandon - release the lock word leaving its open section open
 * For a taker (EOWNERDEAD) that cannot repair a dead writer's data (a
 * SeqLock's Python objects): the section stays odd and is marked, so
 * readers go on hearing EOWNERDEAD and the next writer takes it with
 * EOWNERDEAD, as from the dead writer.  Returns 0, EPERM (not the holder)
 * or EINVAL (no section is open).
 */
int seqlock_abandon(seqlock_t *sl);

/**
 * seqlock_ask_turn - ask writers for a turn: takers keep off the lock
 * word, when they find it free, for up to 5 ms while a turn is asked (the
 * fairness a writer that has slept 1 ms gets), then let the request lapse.
 * For a reader that must finish in a write storm without ever taking the
 * lock: a latch reader whose copies the storm keeps overlapping gets a
 * window with no section opening.  Writes the lock's `starving` word only
 * (a compare-and-swap from 0), never its mutex.  seqlock_drop_turn()
 * withdraws the request (taking the word does too).
 */
void seqlock_ask_turn(seqlock_t *sl);
void seqlock_drop_turn(seqlock_t *sl);

/**
 * seqlock_unlock - release the lock word the caller holds
 * Closes an open write section first (seqlock_close_section()).  The
 * lock word's release orders the caller's accesses before the next holder's.
 * Returns 0 or EPERM (the caller does not hold it); or ENOTRECOVERABLE:
 * the beacon's words were rewritten during the section beyond what the
 * caller can put back, and the C library refused to release it, so it may
 * still be linked into the calling thread's robust list: the lock's memory
 * must then never be freed or unmapped (the caller no longer holds the
 * lock either way).
 */
int seqlock_unlock(seqlock_t *sl);

/* ---- deadlines (parking.c) ---- */

#define SEQLOCK_NS_PER_SEC 1000000000LL

/**
 * seqlock_deadline - the CLOCK_MONOTONIC time timeout_ns from now, in ns
 * -1 (no deadline) for timeout_ns < 0; INT64_MAX if the sum would
 * overflow.  For callers that wait in slices, each with the time left.
 */
int64_t seqlock_deadline(int64_t timeout_ns);

/**
 * seqlock_time_left - ns until deadline: -1 for none (deadline < 0), 0
 * once it has passed.  Async-signal-safe.
 */
int64_t seqlock_time_left(int64_t deadline);

/* ---- readers' slow path (read.c) ---- */

/**
 * seqlock_read_begin_timed - wait until the sequence is even
 * timeout_ns < 0 waits for ever, 0 only looks.  Returns 0 with *seq set;
 * ETIMEDOUT; EINTR (a signal handler ran while asleep); EDEADLK (the
 * caller holds the lock word: a handler interrupted its own section); or
 * EOWNERDEAD: the writer died inside its section (take the lock with
 * seqlock_write_lock_timed() or seqlock_lock_excl_timed() to repair it).
 * Async-signal-safe.  A dead writer is seen within SEQLOCK_READER_NAP_MS
 * of sleeping, through the kernel's FUTEX_OWNER_DIED mark on the beacon
 * word (glibc); with another C library a dead holder is not seen.
 */
int seqlock_read_begin_timed(const seqlock_t *sl, int64_t timeout_ns,
                             uint64_t *seq);
#define SEQLOCK_READER_NAP_MS 10

/**
 * seqlock_owner_died - nonzero if the lock word's holder died holding it
 * (the kernel marked it FUTEX_OWNER_DIED) or a taker abandoned the dead
 * holder's section, and no writer has taken it since.  Relaxed loads;
 * async-signal-safe.  Where the C library's beacon's word cannot be read
 * (only glibc's layout is known), only an abandoned section is seen.
 */
int seqlock_owner_died(const seqlock_t *sl);

/* Spin, yield, then sleep while the count is odd; the bottom of
 * read_seqbegin().  Aborts on EDEADLK and EOWNERDEAD. */
uint64_t seqlock_read_wait_(const seqlock_t *sl);

/* ---- readers that wait for news (read.c) ---- */

/**
 * seqlock_wait_for_change - sleep until a write section has ended since seq
 * Returns 0 once the count is even and differs from seq (at once if it
 * already is), with *now set to it: the state *now names is committed and
 * newer than seq's.  Else ETIMEDOUT (timeout_ns passed; 0 only looks,
 * < 0 waits for ever), ECANCELED (*cancel became nonzero: see
 * seqlock_wake_waiters()), EINTR (a signal handler ran while asleep),
 * EDEADLK (the caller holds the lock word: no one else can write) or
 * EOWNERDEAD (a section is open and its writer died or it was abandoned:
 * as seqlock_read_begin_timed(); seen at the latest at the next nap's
 * end).
 * The waiter sleeps on the low half of the count, a futex that works
 * across processes, after announcing itself in wake_from; a section's end
 * wakes sleepers only if one announced itself for it, so a write costs
 * no system call while nobody waits.  The announcement and the section's
 * end each store then load across a seq_cst fence: either the writer sees
 * the announcement or the waiter sees the new count.  A writer that died
 * between its count's store and its wake-up leaves sleepers to their nap
 * (SEQLOCK_WAITER_NAP_MS).  Writes no data; async-signal-safe.
 */
int seqlock_wait_for_change(const seqlock_t *sl, uint64_t seq,
                            int64_t timeout_ns, const _Atomic uint32_t *cancel,
                            uint64_t *now);

/**
 * seqlock_wait_for_change_flags - seqlock_wait_for_change() with flags:
 * SEQLOCK_WAIT_READ_ONLY: write nothing to the lock, so that it may sit in
 *   memory the caller can only read; writers cannot know of such a waiter
 *   and wake it, so it looks at the count at least every
 *   SEQLOCK_POLL_NAP_MS (sooner after a recent change: the nap doubles
 *   from SEQLOCK_POLL_FIRST_NAP_US).
 * SEQLOCK_WAIT_THROUGH_DEATH: a section whose writer died is not reported
 *   (no EOWNERDEAD): the wait goes on until someone repairs and closes it,
 *   or the timeout.
 * SEQLOCK_WAIT_LONG_NAPS: with a cancel flag, nap SEQLOCK_WAITER_NAP_MS
 *   rather than SEQLOCK_CANCELLABLE_NAP_MS: an idle waiter looks once a
 *   second, and a cancel that races its falling asleep is seen within
 *   that (one that finds it asleep ends it at once, as always).
 * SEQLOCK_WAIT_WAKE_RETURNS: a wake-up that finds the count unchanged
 *   (seqlock_wake_waiters(), or another process's) returns EINTR, so that
 *   the caller can look at flags of its own and call again.  A waker that
 *   needs the wait to end must wake again until it has: a wake-up that
 *   lands between the waiter's last look and its sleep finds nobody.
 */
int seqlock_wait_for_change_flags(const seqlock_t *sl, uint64_t seq,
                                  int64_t timeout_ns,
                                  const _Atomic uint32_t *cancel,
                                  unsigned flags, uint64_t *now);
#define SEQLOCK_WAIT_READ_ONLY 1u
#define SEQLOCK_WAIT_THROUGH_DEATH 2u
#define SEQLOCK_WAIT_LONG_NAPS 4u
#define SEQLOCK_WAIT_WAKE_RETURNS 8u
#define SEQLOCK_POLL_NAP_MS 5
#define SEQLOCK_POLL_FIRST_NAP_US 50
#define SEQLOCK_WAITER_NAP_MS 1000
/* The nap of a wait with a cancel flag: a cancel that races the waiter's
 * falling asleep is seen within it (its wake-up found nobody asleep). */
#define SEQLOCK_CANCELLABLE_NAP_MS 50

/**
 * seqlock_wake_waiters - make every thread asleep on the count look again
 * For cancelling a wait: set its *cancel, then call this.  Sleepers that
 * find nothing changed sleep again.  A cancel that races the waiter's
 * falling asleep is seen within SEQLOCK_CANCELLABLE_NAP_MS.
 */
void seqlock_wake_waiters(const seqlock_t *sl);
/* Block all maskable signals for this thread; returns the previous nesting
 * depth, to pass back to seqlock_irq_restore_().  Only the outermost level
 * saves and restores the thread's mask (kept in thread-local storage). */
unsigned long seqlock_irq_save_(void);
void seqlock_irq_restore_(unsigned long depth);
/* Fatal misuse: write a message to stderr and abort (async-signal-safe). */
void seqlock_die_(const char *what);

/* ---- fork() and process-private locks (fork.c) ---- */

/**
 * struct seqlock_private - a lock in process-private memory, repaired in
 * a fork's child.  After fork() only the forking thread exists in the
 * child: the child's copy of a lock another thread held would stay held
 * for ever.  So, in the child and before fork() returns, every tracked
 * lock held by the forking thread stays held by it (under its new token:
 * its section goes on), and one held by any other thread is taken from
 * it: undo(arg) repairs its data (whether or not a section was open: the
 * count tells) and the section, if open, is closed; without undo, an open
 * section is abandoned (seqlock_abandon()); the lock is released.  Never track a lock in memory shared with
 * other processes: there the holder is a live thread of another process.
 */
typedef struct seqlock_private {
    seqlock_t *lock;
    void (*undo)(void *arg); /* may be NULL: the section closes as is */
    void *arg;
    struct seqlock_private *prev, *next;
} seqlock_private_t;

/* Start or stop tracking; p must stay valid and unmoved in between. */
void seqlock_track_private(seqlock_private_t *p, seqlock_t *sl,
                           void (*undo)(void *arg), void *arg);
void seqlock_untrack_private(seqlock_private_t *p);

/* ---- readers ---- */

/**
 * seqlock_read_try_begin - start a read section without waiting
 * Returns: nonzero with *seq set if no writer is active; 0 otherwise.  The
 * acquire load orders the caller's data loads after it.
 */
static inline int
seqlock_read_try_begin(const seqlock_t *sl, uint64_t *seq)
{
    *seq = atomic_load_explicit(&sl->seqcount.sequence, memory_order_acquire);
    return !(*seq & 1u);
}

/**
 * seqlock_read_retry - end a read section begun with a 64-bit count
 * Returns: nonzero if a write overlapped the section (the copy may be torn
 * and must be retried).  The acquire fence orders the caller's data loads
 * before the re-load of the counter.
 */
static inline int
seqlock_read_retry(const seqlock_t *sl, uint64_t start)
{
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&sl->seqcount.sequence, memory_order_relaxed) != start;
}

/**
 * read_seqbegin - start a read-side critical section
 * Returns: an even sequence value (the count's low 32 bits) to pass to
 * read_seqretry().  Waits (spin, yield, sleep) while a writer is active.
 * The acquire load orders the caller's data loads after it.
 */
static inline unsigned
read_seqbegin(const seqlock_t *sl)
{
    uint64_t seq;
    if (SEQLOCK_UNLIKELY(!seqlock_read_try_begin(sl, &seq))) {
        seq = seqlock_read_wait_(sl);
    }
    return (unsigned)seq;
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
    return (unsigned)atomic_load_explicit(&sl->seqcount.sequence, memory_order_relaxed)
           != start;
}

/**
 * seqlock_read_copy - copy protected data out, one relaxed load per word
 * Call between read_seqbegin() and read_seqretry(); dst is private memory.
 * A concurrent writer may make the copy torn, never a data race.
 */
/* Bytes [skip, skip + take) of w as memory holds it, stored at out: byte
 * by byte from the value, so that no word is put in memory for a
 * memcpy() (a local whose address is taken costs every caller that
 * inlines this a stack canary). */
static inline void
seqlock_word_bytes_(unsigned char *out, seqlock_word_value_t w, size_t skip,
                    size_t take)
{
    for (size_t k = 0; k < take; k++) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        out[k] = (unsigned char)(w >> (8 * (SEQLOCK_WORD_SIZE - 1 - skip - k)));
#else
        out[k] = (unsigned char)(w >> (8 * (skip + k)));
#endif
    }
}

static inline void
seqlock_read_copy(void *dst, const seqlock_word_t *src, size_t nbytes)
{
    unsigned char *out = (unsigned char *)dst;
    seqlock_word_t *in = (seqlock_word_t *)src;
    size_t whole = nbytes / SEQLOCK_WORD_SIZE;
    /* Up to 8 whole words (a record of a few numbers) straight, each at
     * its index, entered at the count by a jump table: a loop's own steps
     * would be most of such a copy's instructions. */
#define SEQLOCK_COPY_WORD_(k)                                                \
    do {                                                                    \
        seqlock_word_value_t w_ = atomic_load_explicit(&in[k],              \
                                                       memory_order_relaxed); \
        memcpy(out + (k) * SEQLOCK_WORD_SIZE, &w_, SEQLOCK_WORD_SIZE);      \
    } while (0)
    switch (whole) {
    default:
        for (size_t i = 0; i < whole; i++) {
            SEQLOCK_COPY_WORD_(i);
        }
        break;
    case 8:
        SEQLOCK_COPY_WORD_(7);
        /* fall through */
    case 7:
        SEQLOCK_COPY_WORD_(6);
        /* fall through */
    case 6:
        SEQLOCK_COPY_WORD_(5);
        /* fall through */
    case 5:
        SEQLOCK_COPY_WORD_(4);
        /* fall through */
    case 4:
        SEQLOCK_COPY_WORD_(3);
        /* fall through */
    case 3:
        SEQLOCK_COPY_WORD_(2);
        /* fall through */
    case 2:
        SEQLOCK_COPY_WORD_(1);
        /* fall through */
    case 1:
        SEQLOCK_COPY_WORD_(0);
        /* fall through */
    case 0:
        break;
    }
#undef SEQLOCK_COPY_WORD_
    in += whole;
    out += whole * SEQLOCK_WORD_SIZE;
    size_t tail = nbytes % SEQLOCK_WORD_SIZE;
    if (tail) {
        seqlock_word_bytes_(out, atomic_load_explicit(in, memory_order_relaxed),
                            0, tail);
    }
}

/* ---- writers (the kernel's API) ---- */

/**
 * write_tryseqlock - take the write lock if it is free
 * Returns: nonzero if taken (the sequence is now odd), 0 if another writer
 * holds it or the caller does.  Never waits.  A lock whose holder died is
 * taken over: its section stays open and the data may be half written.
 */
static inline int
write_tryseqlock(seqlock_t *sl)
{
    int err = seqlock_write_lock_timed(sl, 0);
    return err == 0 || err == EOWNERDEAD;
}

/**
 * write_seqlock - take the write lock, waiting for other writers
 * Afterwards the sequence is odd and the caller may store protected data.
 * Aborts if the caller already holds it (a recursive write would deadlock),
 * or the lock's words are corrupted or stuck (EINVAL), or its mutex is
 * broken: seqlock_write_lock_timed() returns those.  A lock whose holder
 * died is taken over silently: use seqlock_write_lock_timed() to be told
 * (EOWNERDEAD).
 */
static inline void
write_seqlock(seqlock_t *sl)
{
    int err = seqlock_write_lock_timed(sl, -1);
    if (SEQLOCK_UNLIKELY(err != 0 && err != EOWNERDEAD)) {
        seqlock_die_(err == EDEADLK
                         ? "write_seqlock: the calling thread already holds "
                           "this seqlock"
                         : "write_seqlock: the lock's words are corrupted "
                           "or its beacon is broken");
    }
}

/**
 * write_sequnlock - end a write section and release the lock
 * The release store of the even count publishes the data stores to readers
 * whose acquire load sees it; sleeping readers are woken.  Aborts if the
 * caller holds no write section of this lock.
 */
static inline void
write_sequnlock(seqlock_t *sl)
{
    if (SEQLOCK_UNLIKELY(seqlock_close_section(sl) != 0
                         || seqlock_unlock(sl) != 0)) {
        seqlock_die_("write_sequnlock: the calling thread holds no write "
                     "section of this seqlock");
    }
}

/**
 * read_seqlock_excl - take the lock word as a reader, without touching the
 * sequence: writers are kept out, lock-free readers are not disturbed.
 * For a reader that must finish (read_seqbegin_or_lock's locking pass).
 * Aborts if the caller already holds the lock, or it is corrupted, stuck
 * or broken (as write_seqlock()).  If the holder died inside
 * a write section, that section is closed as it stands: use
 * seqlock_lock_excl_timed() to be told and repair the data first.
 */
static inline void
read_seqlock_excl(seqlock_t *sl)
{
    int err = seqlock_lock_excl_timed(sl, -1);
    if (err == EOWNERDEAD) {
        uint64_t seq = atomic_load_explicit(&sl->seqcount.sequence,
                                            memory_order_relaxed);
        if (seq & 1u) {
            (void)seqlock_close_section(sl);
        }
    }
    else if (SEQLOCK_UNLIKELY(err != 0)) {
        seqlock_die_(err == EDEADLK
                         ? "read_seqlock_excl: the calling thread already "
                           "holds this seqlock"
                         : "read_seqlock_excl: the lock's words are "
                           "corrupted or its beacon is broken");
    }
}

/**
 * read_sequnlock_excl - release the lock word taken by read_seqlock_excl
 * The lock word's release orders the section before the next holder's
 * acquire.  Aborts if the caller does not hold it.
 */
static inline void
read_sequnlock_excl(seqlock_t *sl)
{
    if (SEQLOCK_UNLIKELY(seqlock_unlock(sl) != 0)) {
        seqlock_die_("read_sequnlock_excl: the calling thread does not "
                     "hold this seqlock");
    }
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
static inline uint64_t
seqlock_sequence(const seqlock_t *sl)
{
    return atomic_load_explicit(&sl->seqcount.sequence, memory_order_relaxed);
}

/**
 * seqlock_is_locked - nonzero if some thread holds the lock word (or held
 * it when it died, or its section was abandoned, until a writer takes it
 * over).  A racy snapshot.
 */
static inline int
seqlock_is_locked(const seqlock_t *sl)
{
    return atomic_load_explicit(&sl->holder, memory_order_relaxed) != 0
           || atomic_load_explicit(&sl->abandoned, memory_order_relaxed);
}

/**
 * seqlock_held - what the calling thread holds of sl: SEQLOCK_HOLDS_NOTHING,
 * SEQLOCK_HOLDS_WORD (the lock word alone: a reader's locking pass) or
 * SEQLOCK_HOLDS_SECTION (a write section it opened or adopted).  Exact:
 * the answer comes from the thread's own record of what it took, never
 * from the lock's words, which any process that maps the lock may rewrite.
 */
enum {
    SEQLOCK_HOLDS_NOTHING = 0,
    SEQLOCK_HOLDS_WORD = 1,
    SEQLOCK_HOLDS_SECTION = 2,
};
int seqlock_held(const seqlock_t *sl);

/** seqlock_held_by_me - nonzero if the calling thread holds the lock word */
static inline int
seqlock_held_by_me(const seqlock_t *sl)
{
    return seqlock_held(sl) != SEQLOCK_HOLDS_NOTHING;
}

/* ---- latches: readers that never wait (Linux's seqcount_latch_t) ---- */

/*
 * A latch keeps two copies of the data, data[0] and data[1], and a count
 * whose lowest bit says which copy readers use: the writer (serialised by
 * the caller, e.g. by a seqlock's lock word) only ever modifies the copy
 * readers have been sent away from, so a reader always finds a complete
 * copy and never waits, even for a writer that stopped or died:
 *
 *     write_seqcount_latch_begin(&latch);    readers -> data[1]
 *     modify(data[0]);
 *     write_seqcount_latch(&latch);          readers -> data[0]
 *     modify(data[1]);
 *     write_seqcount_latch_end(&latch);
 *
 *     do {
 *         seq = read_seqcount_latch(&latch);
 *         copy(data[seq & 1]);
 *     } while (read_seqcount_latch_retry(&latch, seq));
 *
 * A reader retries only when the writer switched copies under it.  The
 * count is odd while data[0] is being modified.  Memory order: each switch
 * is a release fence, the increment, a release fence.  The first orders the
 * stores to the copy readers are sent to before the increment (a reader
 * whose acquire load sees the new count sees them); the second orders the
 * increment before the stores to the copy readers were sent from (a reader
 * whose copy saw any of those stores sees the new count on its re-check,
 * after its acquire fence).  Copies go through seqlock_word_t atomics.
 */

/** seqcount_latch_init - a latch whose readers use data[0] */
static inline void
seqcount_latch_init(seqcount_latch_t *s)
{
    atomic_init(&s->sequence, 0);
}

/**
 * raw_read_seqcount_latch - the count; (count & 1) picks the copy to read
 * The acquire load orders the caller's loads of that copy after it (the
 * kernel relies on the dependent load; C11 needs acquire).
 */
static inline unsigned
raw_read_seqcount_latch(const seqcount_latch_t *s)
{
    return (unsigned)atomic_load_explicit(&s->sequence, memory_order_acquire);
}

/** read_seqcount_latch - as raw_read_seqcount_latch() */
static inline unsigned
read_seqcount_latch(const seqcount_latch_t *s)
{
    return raw_read_seqcount_latch(s);
}

/**
 * raw_read_seqcount_latch_retry - end a latch read
 * Returns: nonzero if the writer switched copies since start (the copy may
 * be torn: read again).  The acquire fence orders the caller's loads of the
 * copy before the re-load of the count.
 */
static inline int
raw_read_seqcount_latch_retry(const seqcount_latch_t *s, unsigned start)
{
    atomic_thread_fence(memory_order_acquire);
    return (unsigned)atomic_load_explicit(&s->sequence, memory_order_relaxed)
           != start;
}

/** read_seqcount_latch_retry - as raw_read_seqcount_latch_retry() */
static inline int
read_seqcount_latch_retry(const seqcount_latch_t *s, unsigned start)
{
    return raw_read_seqcount_latch_retry(s, start);
}

/* The same with the whole 64-bit count, for a reader that may pause
 * across 2^32 switches. */
static inline uint64_t
seqcount_latch_read64(const seqcount_latch_t *s)
{
    return atomic_load_explicit(&s->sequence, memory_order_acquire);
}

static inline int
seqcount_latch_retry64(const seqcount_latch_t *s, uint64_t start)
{
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&s->sequence, memory_order_relaxed) != start;
}

/**
 * raw_write_seqcount_latch - send readers to the other copy
 * The caller serialises writers.  Release fence, increment, release fence:
 * see above.
 */
static inline void
raw_write_seqcount_latch(seqcount_latch_t *s)
{
    atomic_thread_fence(memory_order_release);
    uint64_t seq = atomic_load_explicit(&s->sequence, memory_order_relaxed);
    atomic_store_explicit(&s->sequence, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

/** write_seqcount_latch_begin - send readers to data[1] before modifying
 * data[0] (the count becomes odd) */
static inline void
write_seqcount_latch_begin(seqcount_latch_t *s)
{
    raw_write_seqcount_latch(s);
}

/** write_seqcount_latch - send readers back to data[0] before modifying
 * data[1] (the count becomes even) */
static inline void
write_seqcount_latch(seqcount_latch_t *s)
{
    raw_write_seqcount_latch(s);
}

/** write_seqcount_latch_end - end the update (the kernel's sanitizer hook;
 * nothing to do here) */
static inline void
write_seqcount_latch_end(seqcount_latch_t *s)
{
    (void)s;
}

/**
 * seqlock_latch - a seqlock's count, as a latch
 * Write sections of sl switch the latch's readers between two copies: when
 * seqlock_write_lock_timed() opens one (odd), to data[1]; when
 * seqlock_close_section() ends it (even), back to data[0].  So a writer
 * that modifies data[0] inside its section and data[1] after closing it
 * (before seqlock_unlock()) leaves readers of the latch a complete copy
 * at every moment, however long it stays inside, or if it dies there.
 */
static inline const seqcount_latch_t *
seqlock_latch(const seqlock_t *sl)
{
    return &sl->seqcount;
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
