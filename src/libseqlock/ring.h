/*
 * ring.h - a broadcast ring of entries that share one layout, in memory
 * that may be shared between processes: one writer at a time appends, any
 * number of readers follow, each at its own pace.  A reader never waits
 * for a writer and never slows one: it writes nothing shared (it works on
 * a read-only mapping), and a reader the writers lap is told how many
 * entries it missed, never handed a torn one.  No Python.
 *
 * Memory layout (offsets in bytes; everything 8-byte aligned):
 *
 *     0    ring_header (RING_HEADER_SIZE bytes): magic, version, the entry
 *          and layout sizes, the lock ABI, a recovery count and the
 *          capacity on the first cache line; the seqlock_t (its count on
 *          a line of its own, then the lock word, a robust process-shared
 *          mutex and the owner record) from the second, padded to 64
 *     H    the layout descriptor: layout_bytes of text naming every field
 *          ("x:d;y:d"), padded to 64, as in a record (record.h)
 *     T    the head line: head, the number of entries ever appended (the
 *          sequence number of the next one), from the next multiple of
 *          SEQLOCK_LINE, padded to SEQLOCK_LINE
 *     S    capacity slots, each a stamp word then SEQLOCK_WORDS(entry_bytes)
 *          words of entry data
 *
 * Entry n (n = 0, 1, 2, ...) lives in slot n % capacity.  A slot's stamp is
 * a seqlock of its own that carries the whole 64-bit n, so a stamp never
 * comes back to a value a reader saw (no ABA across laps):
 *
 *     2n + 2   the slot holds entry n, complete
 *     2n + 1   entry n is being written (or its writer died writing it)
 *     0        nothing (a new ring; an append rolled back or discarded)
 *
 * An append (the caller holds the lock word, as for a record):
 *
 *     take the lock word (seqlock_lock_excl_timed)
 *     ring_open_append()     a section (odd count); n = head;
 *                            stamp(n) = 2n+1, release fence
 *     write ring_entry(n)    relaxed word stores (seqlock_write_copy)
 *     ring_close_append()    stamp(n) = 2n+2 (release); head = n+1
 *                            (release); the section closes (even count),
 *                            waking readers asleep in ring_wait()
 *     seqlock_unlock()
 *
 * An entry is delivered once head counts it, and head is stored after the
 * entry's complete stamp.  A writer killed anywhere leaves head either
 * counting its entry (complete: delivered) or not (never delivered: the
 * next writer, told EOWNERDEAD, counts it in `recoveries` if it had begun
 * writing it and appends its own entry under the same n), so sequence
 * numbers stay consecutive and a half-written entry is never delivered.
 *
 * A reader (ring_reader, in the reader's own memory) keeps the sequence
 * number of the next entry it wants and the count of entries it missed.
 * For each entry below head: load the stamp (acquire); if it says
 * "entry n, complete", copy the words (relaxed loads), acquire fence, load
 * the stamp again; the same value: the copy is entry n, whole.  Otherwise
 * the writers lapped the reader (the slot was rewritten before or while it
 * copied): the entry is counted missed.  So every sequence number below
 * head is delivered exactly once, in order, or counted missed exactly once.
 *
 * Who writes what: the lock's holder writes head, the stamps and the
 * entries; the creator writes everything once before publishing magic
 * (release store); readers write nothing.
 *
 * The memory is untrusted: any process that maps it may write any byte at
 * any moment.  A process's idea of the ring's geometry (entry size,
 * capacity) is its own (ring_view, from what it asked for, checked once
 * against the header by ring_matches()), and nothing here reads a size or
 * an offset from the shared memory again: a head or a stamp picks a slot
 * by n % capacity, and a reader looks at most capacity slots per call.
 * Rewritten words can make readers see wrong numbers or count wrong
 * misses, never read or write outside the ring, loop without bound, or
 * wait past their timeout.
 */
#ifndef SEQLOCK_RING_H
#define SEQLOCK_RING_H

#include "record.h"
#include "seqlock.h"

#include <assert.h>
#include <stdint.h>

#define RING_MAGIC 0x42514553u /* "SEQB" little-endian */
/* magic while ring_lay_out_over() lays a ring out, holding its lock */
#define RING_LAYING_OUT 0x6F474E52u
/* 1: the first layout; 2: seqlock_t's count on a line of its own (record
 * version 6), head's line SEQLOCK_LINE bytes.  A new layout of the header,
 * of a slot or of seqlock_t is a new version: the static_asserts below pin
 * version 2's. */
#define RING_VERSION 2u
#define RING_ALIGN 64u
/* The lock's layout: the rule of records (RECORD_LOCK_ABI, record.h). */
#define RING_LOCK_ABI RECORD_LOCK_ABI

typedef struct ring_header {
    _Atomic uint32_t magic; /* RING_MAGIC once initialised */
    uint32_t version;       /* RING_VERSION: both at the same offsets in
                               every version, so attach() can name it */
    uint32_t entry_bytes;
    uint32_t layout_bytes;
    uint32_t lock_abi;      /* RING_LOCK_ABI of the creator */
    _Atomic uint32_t recoveries; /* entries a dead writer left half
                                    written: discarded, never delivered */
    uint64_t capacity;      /* slots */
    uint32_t reserved[8];
    /* Its own cache line on: the count readers sleep on, then the
     * writers' lock word; the line above is read once, at attach(). */
    seqlock_t lock;
} ring_header;

#define RING_HEADER_SIZE \
    ((sizeof(ring_header) + RING_ALIGN - 1) / RING_ALIGN * RING_ALIGN)
static_assert(offsetof(ring_header, lock) == 64,
              "the lock starts the header's second cache line");
static_assert(offsetof(ring_header, magic) == 0
                  && offsetof(ring_header, version) == 4,
              "every version has its magic and version words here");
static_assert(offsetof(ring_header, entry_bytes) == 8
                  && offsetof(ring_header, layout_bytes) == 12
                  && offsetof(ring_header, lock_abi) == 16
                  && offsetof(ring_header, recoveries) == 20
                  && offsetof(ring_header, capacity) == 24,
              "ring_header ABI (version 2)");
static_assert(RING_HEADER_SIZE == 320, "ring_header ABI (version 2)");
static_assert(RING_VERSION == 2u,
              "a new version: update the layout asserts here");

/* The head line: head alone on its cache line, which every reader polls
 * and only the writer's commit stores. */
#define RING_HEAD_LINE SEQLOCK_LINE

static inline size_t
ring_head_offset(size_t layout_bytes)
{
    return record_round_up(
        RING_HEADER_SIZE + record_round_up(layout_bytes, RING_ALIGN),
        RING_HEAD_LINE);
}

static inline size_t
ring_slots_offset(size_t layout_bytes)
{
    return ring_head_offset(layout_bytes) + RING_HEAD_LINE;
}

/* Words of one slot: its stamp, then the entry's words. */
static inline size_t
ring_slot_words(size_t entry_bytes)
{
    return 1 + SEQLOCK_WORDS(entry_bytes);
}

/**
 * ring_size - bytes of memory a ring of this geometry occupies
 * Returns 0 (refuse it) if entry_bytes or capacity is 0, or if the size
 * does not fit in a size_t.
 */
static inline size_t
ring_size(uint32_t layout_bytes, uint32_t entry_bytes, uint64_t capacity)
{
    if (entry_bytes == 0 || capacity == 0) {
        return 0;
    }
    size_t base = ring_slots_offset(layout_bytes);
    size_t slot_bytes = ring_slot_words(entry_bytes) * SEQLOCK_WORD_SIZE;
    if (capacity > (SIZE_MAX - base) / slot_bytes) {
        return 0;
    }
    return base + (size_t)capacity * slot_bytes;
}

/**
 * struct ring_view - one process's view of a ring: where its lock, head
 * and slots are, how many bytes an entry holds and how many slots there
 * are.  Made from the geometry the caller laid out or checked
 * (ring_init(), ring_matches()) and kept in the caller's own memory:
 * never re-read from the shared header.
 */
typedef struct ring_view {
    ring_header *header;
    seqlock_t *lock;
    _Atomic uint64_t *head;
    seqlock_word_t *slots; /* slot i: slots[i * slot_words], the stamp,
                              then the entry's words */
    size_t entry_bytes;
    size_t words;      /* SEQLOCK_WORDS(entry_bytes) */
    size_t slot_words; /* 1 + words */
    uint64_t capacity;
} ring_view;

/**
 * ring_view_of - the view of a ring of this geometry at memory
 * The caller has checked the geometry: ring_size() of it is nonzero and
 * the memory holds that many bytes.
 */
static inline ring_view
ring_view_of(void *memory, uint32_t layout_bytes, uint32_t entry_bytes,
             uint64_t capacity)
{
    char *base = (char *)memory;
    ring_header *h = (ring_header *)memory;
    ring_view v = {
        h,
        &h->lock,
        (_Atomic uint64_t *)(base + ring_head_offset(layout_bytes)),
        (seqlock_word_t *)(base + ring_slots_offset(layout_bytes)),
        entry_bytes,
        SEQLOCK_WORDS(entry_bytes),
        ring_slot_words(entry_bytes),
        capacity,
    };
    return v;
}

static inline const char *
ring_layout_text(const ring_header *h)
{
    return (const char *)h + RING_HEADER_SIZE;
}

/* The slot entry n lives in: its stamp word, then its entry words. */
static inline seqlock_word_t *
ring_slot(const ring_view *v, uint64_t n)
{
    return v->slots + (size_t)(n % v->capacity) * v->slot_words;
}

/** ring_stamp - the stamp of the slot entry n lives in */
static inline seqlock_word_t *
ring_stamp(const ring_view *v, uint64_t n)
{
    return ring_slot(v, n);
}

/**
 * ring_entry - the data words of the slot entry n lives in: the writer of
 * entry n stores them between ring_open_append() and ring_close_append()
 * (seqlock_write_copy(), record_store_bytes()).  The slot still holds
 * entry n - capacity's words (or zeros): write every word.
 */
static inline seqlock_word_t *
ring_entry(const ring_view *v, uint64_t n)
{
    return ring_slot(v, n) + 1;
}

/** ring_head - entries ever appended: the sequence number of the next one
 * (an acquire load: the entries it counts are complete in memory) */
static inline uint64_t
ring_head(const ring_view *v)
{
    return atomic_load_explicit(v->head, memory_order_acquire);
}

/**
 * ring_init - lay out an empty ring in memory of ring_size() bytes
 * Not safe against concurrent users; the release store of the magic
 * publishes the rest to attach()ers whose acquire load sees it.
 * Returns 0, EINVAL (ring_size() of this geometry is 0), or
 * seqlock_init()'s error (the memory is then no ring).
 */
static inline int
ring_init(void *memory, const char *layout, uint32_t layout_bytes,
          uint32_t entry_bytes, uint64_t capacity)
{
    size_t size = ring_size(layout_bytes, entry_bytes, capacity);
    if (size == 0) {
        return EINVAL;
    }
    ring_header *h = (ring_header *)memory;
    atomic_store_explicit(&h->magic, 0, memory_order_relaxed);
    memset((char *)h + sizeof h->magic, 0, size - sizeof h->magic);
    h->version = RING_VERSION;
    h->entry_bytes = entry_bytes;
    h->layout_bytes = layout_bytes;
    h->lock_abi = RING_LOCK_ABI;
    atomic_init(&h->recoveries, 0);
    h->capacity = capacity;
    int err = seqlock_init(&h->lock);
    if (err != 0) {
        return err;
    }
    memcpy((char *)h + RING_HEADER_SIZE, layout, layout_bytes);
    atomic_store_explicit(&h->magic, RING_MAGIC, memory_order_release);
    return 0;
}

/**
 * ring_lay_out_over - lay a ring out, as ring_init() does, over memory of
 * ring_size() bytes that may hold a ring in use (create(overwrite=True)):
 * as record_lay_out_over(), its lock taken without waiting and held while
 * the rest is laid out (magic RING_LAYING_OUT meanwhile: an attach()
 * finds no ring, a create() one in use; no
 * append is inside it), given back after.  Readers see every slot empty
 * and the head gone back (the ring rewound).
 * Returns 0, EBUSY (its lock is held), EINVAL (no geometry, or the lock's
 * words are corrupted) or seqlock_init()'s error.
 */
static inline int
ring_lay_out_over(void *memory, const char *layout, uint32_t layout_bytes,
                  uint32_t entry_bytes, uint64_t capacity)
{
    size_t size = ring_size(layout_bytes, entry_bytes, capacity);
    if (size == 0) {
        return EINVAL;
    }
    ring_header *h = (ring_header *)memory;
    uint32_t version = h->version, lock_abi = h->lock_abi; /* read once */
    if (version != RING_VERSION || lock_abi != RING_LOCK_ABI
        || seqlock_check(&h->lock) != 0) {
        /* its header and lock lie as a record's of the same age */
        if (record_holder_of_version((const record_header *)memory,
                                     version < RING_VERSION, lock_abi)
            != 0) {
            return EBUSY;
        }
        return ring_init(memory, layout, layout_bytes, entry_bytes, capacity);
    }
    int err = seqlock_lock_excl_timed(&h->lock, 0);
    if (err != 0 && err != EOWNERDEAD) {
        return err == ETIMEDOUT || err == EDEADLK ? EBUSY : err;
    }
    atomic_store_explicit(&h->magic, RING_LAYING_OUT, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* before the rest */
    /* version and lock_abi stay (ours), as in record_lay_out_over() */
    memset((char *)h + offsetof(ring_header, recoveries), 0,
           offsetof(ring_header, lock) - offsetof(ring_header, recoveries));
    h->entry_bytes = entry_bytes;
    h->layout_bytes = layout_bytes;
    h->capacity = capacity;
    char *after_lock = (char *)(&h->lock + 1);
    char *head = (char *)memory + ring_head_offset(layout_bytes);
    memset(after_lock, 0, (size_t)(head - after_lock));
    memcpy((char *)h + RING_HEADER_SIZE, layout, layout_bytes);
    /* the head line and the slots: words readers load */
    record_zero_words((seqlock_word_t *)head,
                      (size - (size_t)(head - (char *)memory))
                          / SEQLOCK_WORD_SIZE);
    atomic_store_explicit(&h->magic, RING_MAGIC, memory_order_release);
    (void)seqlock_unlock(&h->lock);
    return 0;
}

enum ring_mismatch {
    RING_MATCHES = 0,
    RING_NO_MAGIC = 1,       /* no ring here (or not yet created) */
    RING_OTHER_VERSION = 2,  /* h->version names the creator's */
    RING_OTHER_LOCK_ABI = 3, /* another C library, word size or layout */
    RING_OTHER_LAYOUT = 4,   /* other fields (or a geometry ring_size()
                                refuses) */
    RING_TOO_SMALL = 5,      /* the memory ends before the ring */
    RING_BROKEN_LOCK = 6,    /* the lock word was never set up, or is
                                overwritten */
    RING_OTHER_CAPACITY = 7, /* as many fields, another number of slots */
};

/**
 * ring_matches - does memory of `size` bytes hold a ring of this geometry?
 * Returns: RING_MATCHES, or which check failed, for the error message.
 * Reads nothing past size.  A snapshot: the caller keeps its own geometry
 * (ring_view_of()) and never reads the header's again.
 */
static inline enum ring_mismatch
ring_matches(const ring_header *h, size_t size, const char *layout,
             uint32_t layout_bytes, uint32_t entry_bytes, uint64_t capacity)
{
    if (size < 2 * sizeof(uint32_t)
        || atomic_load_explicit(&((ring_header *)h)->magic,
                                memory_order_acquire) != RING_MAGIC) {
        return RING_NO_MAGIC;
    }
    if (h->version != RING_VERSION) {
        return RING_OTHER_VERSION;
    }
    if (size < RING_HEADER_SIZE + (size_t)layout_bytes) {
        return RING_TOO_SMALL;
    }
    if (h->lock_abi != RING_LOCK_ABI) {
        return RING_OTHER_LOCK_ABI;
    }
    if (seqlock_check(&h->lock) != 0) {
        return RING_BROKEN_LOCK;
    }
    size_t need = ring_size(layout_bytes, entry_bytes, capacity);
    if (need == 0 || h->layout_bytes != layout_bytes
        || h->entry_bytes != entry_bytes
        || memcmp(ring_layout_text(h), layout, layout_bytes) != 0) {
        return RING_OTHER_LAYOUT;
    }
    if (h->capacity != capacity) {
        return RING_OTHER_CAPACITY;
    }
    if (size < need) {
        return RING_TOO_SMALL;
    }
    return RING_MATCHES;
}

/* ---- writers (the caller holds h->lock's lock word) ---- */

/**
 * ring_repair - after taking the lock word from a holder that died
 * (EOWNERDEAD), or from a thread a fork left behind: before anything else.
 * The count is read once.  Even: the holder died outside a section (its
 * append, if any, is whole and delivered); nothing to do, returns 0.
 * Odd: it died inside an append; returns 1 (the caller adopts the section
 * or closes it).  If it had begun writing entry head (the slot's stamp
 * says entry head, written or being written: head does not count it yet),
 * that entry is discarded: counted in `recoveries`, its stamp set to 0,
 * and the next append writes its own entry under the same number.  One
 * that died after storing head has delivered its entry: nothing is
 * discarded, nothing counted.
 */
static inline int
ring_repair(const ring_view *v)
{
    if (!(seqlock_sequence(v->lock) & 1u)) {
        return 0;
    }
    uint64_t n = atomic_load_explicit(v->head, memory_order_relaxed);
    seqlock_word_t *stamp = ring_stamp(v, n);
    uint64_t s = atomic_load_explicit(stamp, memory_order_relaxed);
    if (s == 2 * n + 1 || s == 2 * n + 2) {
        atomic_store_explicit(stamp, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&v->header->recoveries, 1,
                                  memory_order_relaxed);
    }
    return 1;
}

/**
 * ring_open_append - open an append: *n is the new entry's sequence number
 * (head; only lock holders store it, and the lock word's acquire orders
 * this load after the last holder's store).  took_over: the lock word was
 * taken from a holder that died (EOWNERDEAD): ring_repair() first, and a
 * section it left open is adopted.  The slot's stamp becomes 2n+1 and a
 * release fence orders that store before the caller's stores of the entry
 * (ring_entry()): a reader whose copy of entry n - capacity saw any of
 * them sees the stamp changed on its re-check.  Returns 0, or
 * seqlock_open_section()'s EPERM (the caller does not hold the lock word)
 * or EINVAL (its section is open already).
 */
static inline int
ring_open_append(const ring_view *v, int took_over, uint64_t *n)
{
    if (took_over) {
        (void)ring_repair(v);
    }
    int err = seqlock_open_section(v->lock);
    if (err != 0) {
        return err;
    }
    *n = atomic_load_explicit(v->head, memory_order_relaxed);
    atomic_store_explicit(ring_stamp(v, *n), 2 * *n + 1,
                          memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    return 0;
}

/**
 * ring_close_append - close the append of entry n opened by
 * ring_open_append().  Commit: the stamp's release store of 2n+2 publishes
 * the entry's words to readers whose acquire load sees it; head's release
 * store of n+1 publishes the stamp to readers whose acquire load of head
 * sees it (so they find the entry complete, or overwritten since).
 * Rollback: the stamp becomes 0 and head is unchanged, so entry n is never
 * delivered and the next append reuses n (entry n - capacity, whose words
 * may be half overwritten, is gone either way: readers count it missed).
 * Then the section closes (seqlock_close_section(): the count's step wakes
 * readers asleep in ring_wait()); the caller then gives back the lock
 * word.  Returns 0, or seqlock_close_section()'s error.
 */
static inline int
ring_close_append(const ring_view *v, uint64_t n, int rollback)
{
    seqlock_word_t *stamp = ring_stamp(v, n);
    if (rollback) {
        atomic_store_explicit(stamp, 0, memory_order_relaxed);
    }
    else {
        atomic_store_explicit(stamp, 2 * n + 2, memory_order_release);
        atomic_store_explicit(v->head, n + 1, memory_order_release);
    }
    return seqlock_close_section(v->lock);
}

/**
 * ring_append - append entry (v->entry_bytes bytes of private memory) as
 * one section; *n is its sequence number.  The caller holds the lock word
 * (took_over: taken with EOWNERDEAD) and gives it back after.  Returns 0,
 * or ring_open_append()'s error (nothing appended).
 */
static inline int
ring_append(const ring_view *v, int took_over, const void *entry,
            uint64_t *n)
{
    int err = ring_open_append(v, took_over, n);
    if (err != 0) {
        return err;
    }
    seqlock_write_copy(ring_entry(v, *n), entry, v->entry_bytes);
    return ring_close_append(v, *n, 0);
}

/**
 * ring_close_dead_section - holding the lock word without an append (a
 * locking pass) taken from a holder that died: discard the entry it left
 * half written, if any, and close the section it left open, if any, so
 * that readers asleep on the count are woken.
 */
static inline void
ring_close_dead_section(const ring_view *v)
{
    if (ring_repair(v)) {
        (void)seqlock_close_section(v->lock);
    }
}

/* ---- readers (private state; they write nothing shared) ---- */

/**
 * struct ring_reader - where one reader is: the sequence number of the
 * next entry it wants, and the entries it missed (the writers lapped it:
 * overwritten before it could copy them, or while it did; `overwritten`
 * counts the latter, the per-slot seqlock's retries, and is part of
 * `missed`).  In the reader's own memory; nothing shared.
 */
typedef struct ring_reader {
    uint64_t next;
    uint64_t missed;
    uint64_t overwritten;
} ring_reader;

/**
 * ring_reader_init_last - a reader whose first entry is the newest `count`
 * entries back (at most capacity; 0: it starts after the newest entry,
 * with the next one appended).  One acquire load of head.
 */
static inline void
ring_reader_init_last(ring_reader *r, const ring_view *v, uint64_t count)
{
    uint64_t h = ring_head(v);
    if (count > v->capacity) {
        count = v->capacity;
    }
    r->next = h > count ? h - count : 0;
    r->missed = 0;
    r->overwritten = 0;
}

/**
 * ring_reader_init - a reader that starts after the newest entry (the
 * next one appended is its first), or, from_oldest, at the oldest entry
 * the ring retains (head - capacity, or 0).
 */
static inline void
ring_reader_init(ring_reader *r, const ring_view *v, int from_oldest)
{
    ring_reader_init_last(r, v, from_oldest ? v->capacity : 0);
}

/* What ring_read_next() found. */
enum ring_read {
    RING_NOTHING = 0,  /* no entry after the reader's place, now */
    RING_ENTRY = 1,    /* dst holds entry *seq, whole */
    RING_REWOUND = -1, /* head is below the reader's place: the ring was
                          made anew, or its head overwritten.  The place
                          means nothing in that ring: once head passes it
                          again, a call would hand out the new ring's
                          entries as if they followed.  Keep the rewind
                          (the binding's readers keep raising) and start
                          a new reader. */
};

/**
 * ring_read_below - ring_read_next() below a head the caller loaded with
 * ring_head() and found not below the reader's place (h >= r->next): the
 * reader's next entry below h into dst, its sequence number into *seq
 * Returns RING_ENTRY, or RING_NOTHING once every entry below h was
 * delivered or counted missed.  For a caller that reads several entries
 * after one load of head (a batch stops at the head it saw, so a writer
 * faster than the reader cannot keep it going): each entry is checked
 * as ring_read_next() checks it, and a reader more than capacity behind
 * h skips to h - capacity, so at most capacity slots are looked at per
 * head loaded, however many calls read below it.
 */
static inline int
ring_read_below(ring_reader *r, const ring_view *v, uint64_t h, void *dst,
                uint64_t *seq)
{
    assert(h >= r->next);
    if (h - r->next > v->capacity) {
        r->missed += h - v->capacity - r->next;
        r->next = h - v->capacity;
    }
    while (r->next < h) {
        uint64_t n = r->next++;
        const seqlock_word_t *slot = ring_slot(v, n);
        uint64_t s1 = atomic_load_explicit((seqlock_word_t *)slot,
                                           memory_order_acquire);
        if (s1 == 2 * n + 2) {
            seqlock_read_copy(dst, slot + 1, v->entry_bytes);
            atomic_thread_fence(memory_order_acquire);
            uint64_t s2 = atomic_load_explicit((seqlock_word_t *)slot,
                                               memory_order_relaxed);
            if (s2 == s1) {
                *seq = n;
                return RING_ENTRY;
            }
            r->overwritten++;
        }
        r->missed++;
    }
    return RING_NOTHING;
}

/**
 * ring_read_next - copy the reader's next entry into dst (v->entry_bytes
 * bytes of private memory) and its sequence number into *seq
 * Returns RING_ENTRY; RING_NOTHING once every entry below the head it
 * loaded was delivered or counted missed; RING_REWOUND (nothing read,
 * the reader unchanged: start it anew, ring_reader_init()).
 * Head is loaded once (acquire: the entries it counts have complete
 * stamps in memory).  A reader more than capacity behind skips to
 * head - capacity, counting the skipped entries missed.  Then for each
 * entry n: the stamp (acquire) must say "entry n, complete" (2n+2); the
 * words are copied with relaxed loads; an acquire fence orders them
 * before the stamp's re-load (relaxed), which must be unchanged: if any
 * word copied was stored by a later entry's writer, that writer's release
 * fence after its odd stamp makes the re-load see it.  An entry that
 * fails either check was overwritten: missed, and the next is tried
 * (ring_read_below()).  At most capacity slots are looked at per call;
 * never waits; writes nothing shared.
 */
static inline int
ring_read_next(ring_reader *r, const ring_view *v, void *dst, uint64_t *seq)
{
    uint64_t h = ring_head(v);
    if (h < r->next) {
        return RING_REWOUND;
    }
    return ring_read_below(r, v, h, dst, seq);
}

/**
 * ring_available - nonzero if ring_read_next() would find something: an
 * entry (or a miss) after the reader's place, or a head below it
 * (RING_REWOUND).  One acquire load of head.
 */
static inline int
ring_available(const ring_reader *r, const ring_view *v)
{
    return ring_head(v) != r->next;
}

/**
 * ring_wait - sleep until ring_available() (at once if it already is)
 * Returns 0; or, from seqlock_wait_for_change_flags(): ETIMEDOUT
 * (timeout_ns passed; 0 only looks, < 0 waits for ever), ECANCELED
 * (*cancel became nonzero), EINTR (a signal handler ran while asleep, or
 * with SEQLOCK_WAIT_WAKE_RETURNS a wake-up found nothing new), EDEADLK
 * (the caller holds the lock word: no one else can append).  flags are
 * seqlock_wait_for_change_flags()'s: pass SEQLOCK_WAIT_READ_ONLY for a
 * ring the caller maps read-only (it then polls); a dead writer's open
 * section is always waited through (SEQLOCK_WAIT_THROUGH_DEATH), until
 * the next writer repairs it and appends, or the timeout.
 * The reader loads the count (acquire) before head; an append stores
 * head before its section's end steps the count (release fences): so if
 * head did not count the entry yet, the count loaded is older than that
 * step, and the wait for a change from it ends at the step at the latest.
 * A writer that died after storing head but before that step delivered
 * its entry without waking anyone: the wait sleeps in slices of
 * SEQLOCK_WAITER_NAP_MS and looks at head after each, so such an entry
 * is seen within one.
 * Writes nothing shared with SEQLOCK_WAIT_READ_ONLY; async-signal-safe.
 */
static inline int
ring_wait(const ring_reader *r, const ring_view *v, int64_t timeout_ns,
          const _Atomic uint32_t *cancel, unsigned flags)
{
    int64_t deadline = seqlock_deadline(timeout_ns);
    for (;;) {
        uint64_t c = seqcount_latch_read64(seqlock_latch(v->lock));
        if (ring_available(r, v)) {
            return 0;
        }
        int64_t left = seqlock_time_left(deadline);
        int64_t slice = SEQLOCK_WAITER_NAP_MS * 1000000LL;
        if (left >= 0 && left < slice) {
            slice = left;
        }
        uint64_t now;
        int err = seqlock_wait_for_change_flags(
            v->lock, c & ~(uint64_t)1, slice, cancel,
            flags | SEQLOCK_WAIT_THROUGH_DEATH, &now);
        if (err == ETIMEDOUT && slice != left) {
            continue; /* a slice ended, not the wait: look at head */
        }
        if (err != 0) {
            return err;
        }
    }
}

#endif /* SEQLOCK_RING_H */
