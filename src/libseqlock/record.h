/*
 * record.h - a record of plain words kept as a latch under a seqlock, in
 * memory that may be shared between processes: readers never wait, not
 * even for a writer that stopped or died inside its section.  No Python.
 *
 * Memory layout (offsets in bytes; everything 8-byte aligned):
 *
 *     0    record_header (RECORD_HEADER_SIZE bytes): magic, version, the
 *          data and layout sizes, the lock ABI and a recovery count on the
 *          first cache line; the seqlock_t from the second: its count,
 *          alone with the sleepers' announcement on SEQLOCK_LINE bytes,
 *          then the lock word, a robust process-shared mutex and the
 *          owner record; padded to 64
 *     H    the layout descriptor: layout_bytes of text naming every field
 *          ("x:d;y:d;v:16d"), padded to 64
 *     C0   copy 0: SEQLOCK_WORDS(data_bytes) words, from the next multiple
 *          of SEQLOCK_LINE, padded to a multiple of SEQLOCK_LINE
 *     C1   copy 1: the same
 *
 * Each copy starts a line of its own (when the memory is SEQLOCK_LINE-
 * aligned, as shared memory is), so the writer bringing copy 1 up to date
 * after a section does not move the line readers are copying copy 0 from.
 *
 * The seqlock's count is a latch count (seqlock_latch()): while no section
 * is open (even) readers copy copy 0; while one is (odd) they copy copy 1,
 * which holds the last committed state.  A write section:
 *
 *     take the lock word (seqlock_lock_excl_timed)
 *     seqlock_open_section()      odd: readers move to copy 1
 *     change copy 0               (record_abort() puts it back from copy 1)
 *     seqlock_close_section()     even: readers move to copy 0, the new state
 *     record_finish()             copy 1 <- copy 0
 *     seqlock_unlock()
 *
 * so the section's changes become visible together when it closes, and at
 * every moment readers have a complete copy.  If the holder dies, the next
 * taker (EOWNERDEAD), before anything else, calls record_repair(): inside
 * a section (odd) copy 0 is put back from copy 1 and the section counted in
 * `recoveries`; after one (even) copy 1 is brought up to date.  Readers
 * never notice.  Repair reads what a dead thread stored: the kernel marks
 * the mutex word on that thread's way out, after all its stores, and the
 * taker's acquire of the marked word orders its reads after that mark.
 *
 * Who writes what: the lock's holder writes the copies and the count; the
 * creator writes everything once before publishing magic (release store);
 * readers write nothing.
 *
 * The memory is untrusted: any process that maps it may write any byte at
 * any moment.  So a process's idea of the record's geometry is its own
 * (record_view, from the layout it asked for, checked once against the
 * header by record_matches()), and nothing here reads a size or an offset
 * from the shared memory again; a count picks one of two copies by its
 * lowest bit.  Rewritten words can make readers see wrong numbers, never
 * read or write outside the record.
 */
#ifndef SEQLOCK_RECORD_H
#define SEQLOCK_RECORD_H

#include "seqlock.h"

#include <assert.h>

#define RECORD_MAGIC 0x52514553u /* "SEQR" little-endian */
/* magic while record_lay_out_over() lays a record out, holding its lock:
 * attach() finds no record, create() an existing one */
#define RECORD_LAYING_OUT 0x6F514553u /* "SEQo" */
/* 1: a thread-id lock word; 2: a robust mutex and an undo copy; 3: a latch;
 * 4: the lock records its holder's PID namespace; 5: lock_abi hashes every
 * offset of seqlock_t; 6: the count on a line of its own, each copy on
 * lines of its own.  A new layout of the header, of the copies or of
 * seqlock_t is a new version: the static_asserts below and in seqlock.h
 * pin version 6's. */
#define RECORD_VERSION 6u
#define RECORD_ALIGN 64u

/* Which lock layout the creator compiled in: processes sharing a record
 * must agree on the C library's pthread_mutex_t, the word size and every
 * offset of seqlock_t (SEQLOCK_LAYOUT_HASH). */
#if defined(__GLIBC__)
#define RECORD_LIBC 1u
#elif defined(__linux__)
#define RECORD_LIBC 2u /* musl and other Linux C libraries */
#else
#define RECORD_LIBC 3u
#endif
#define RECORD_LOCK_ABI \
    SEQLOCK_FNV_(SEQLOCK_FNV_(SEQLOCK_LAYOUT_HASH(seqlock_t), sizeof(void *)), \
                 RECORD_LIBC)

typedef struct record_header {
    _Atomic uint32_t magic; /* RECORD_MAGIC once initialised */
    uint32_t version;       /* RECORD_VERSION: both at the same offsets in
                               every version, so attach() can name it */
    uint32_t data_bytes;
    uint32_t layout_bytes;
    uint32_t lock_abi;      /* RECORD_LOCK_ABI of the creator */
    _Atomic uint32_t recoveries; /* sections discarded: their writer died */
    uint32_t reserved[10];
    /* Its own cache line on: the count readers load, then the writers'
     * lock word; the line above is read once, at attach(). */
    seqlock_t lock;
} record_header;

#define RECORD_HEADER_SIZE \
    ((sizeof(record_header) + RECORD_ALIGN - 1) / RECORD_ALIGN * RECORD_ALIGN)
static_assert(offsetof(record_header, lock) == 64,
              "the lock starts the header's second cache line");
static_assert(offsetof(record_header, magic) == 0
                  && offsetof(record_header, version) == 4,
              "every version has its magic and version words here");
static_assert(offsetof(record_header, data_bytes) == 8
                  && offsetof(record_header, layout_bytes) == 12
                  && offsetof(record_header, lock_abi) == 16
                  && offsetof(record_header, recoveries) == 20,
              "record_header ABI (version 6)");
static_assert(RECORD_HEADER_SIZE == 320, "record_header ABI (version 6)");
static_assert(RECORD_VERSION == 6u,
              "a new version: update the layout asserts here and in seqlock.h");

static inline size_t
record_round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

static inline size_t
record_data_offset(size_t layout_bytes)
{
    return record_round_up(
        RECORD_HEADER_SIZE + record_round_up(layout_bytes, RECORD_ALIGN),
        SEQLOCK_LINE);
}

/* Words from the start of copy 0 to the start of copy 1. */
static inline size_t
record_copy_stride(size_t data_bytes)
{
    return record_round_up(SEQLOCK_WORDS(data_bytes),
                           SEQLOCK_LINE / SEQLOCK_WORD_SIZE);
}

/** record_size - bytes of memory a record with this layout occupies */
static inline size_t
record_size(size_t layout_bytes, size_t data_bytes)
{
    return record_data_offset(layout_bytes)
           + 2 * record_copy_stride(data_bytes) * SEQLOCK_WORD_SIZE;
}

/**
 * struct record_view - one process's view of a record: where its lock and
 * copies are and how many bytes each copy holds.  Made from the geometry
 * the caller laid out or checked (record_init(), record_matches()) and
 * kept in the caller's own memory: never re-read from the shared header.
 */
typedef struct record_view {
    record_header *header;
    seqlock_t *lock;
    seqlock_word_t *copy[2];
    size_t data_bytes;
    size_t words; /* SEQLOCK_WORDS(data_bytes) */
} record_view;

/** record_view_of - the view of a record of this geometry at memory */
static inline record_view
record_view_of(void *memory, size_t layout_bytes, size_t data_bytes)
{
    record_header *h = (record_header *)memory;
    seqlock_word_t *copy0 =
        (seqlock_word_t *)((char *)h + record_data_offset(layout_bytes));
    record_view v = {h, &h->lock,
                     {copy0, copy0 + record_copy_stride(data_bytes)},
                     data_bytes, SEQLOCK_WORDS(data_bytes)};
    return v;
}

/** record_copy - copy 0 (the one writers change) or copy 1 */
static inline seqlock_word_t *
record_copy(const record_view *v, unsigned which)
{
    return v->copy[which & 1u];
}

static inline const char *
record_layout_text(const record_header *h)
{
    return (const char *)h + RECORD_HEADER_SIZE;
}

/**
 * record_init - lay out a zeroed record in memory of record_size() bytes
 * Not safe against concurrent users; the release store of the magic
 * publishes the header to attach()ers whose acquire load sees it.
 * Returns 0, or seqlock_init()'s error (the memory is then no record).
 */
static inline int
record_init(record_header *h, const char *layout, uint32_t layout_bytes,
            uint32_t data_bytes)
{
    atomic_store_explicit(&h->magic, 0, memory_order_relaxed);
    memset((char *)h + sizeof h->magic, 0,
           record_size(layout_bytes, data_bytes) - sizeof h->magic);
    h->version = RECORD_VERSION;
    h->data_bytes = data_bytes;
    h->layout_bytes = layout_bytes;
    h->lock_abi = RECORD_LOCK_ABI;
    atomic_init(&h->recoveries, 0);
    int err = seqlock_init(&h->lock);
    if (err != 0) {
        return err;
    }
    memcpy((char *)h + RECORD_HEADER_SIZE, layout, layout_bytes);
    atomic_store_explicit(&h->magic, RECORD_MAGIC, memory_order_release);
    return 0;
}

/* Zero n words others may be reading (relaxed stores, as copies are
 * written). */
static inline void
record_zero_words(seqlock_word_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        atomic_store_explicit(&w[i], 0, memory_order_relaxed);
    }
}

/* Where records before version 6 (and rings before version 2) kept their
 * lock word: their seqlock_t, at 64, began with the count, wake_from, then
 * the word. */
#define RECORD_V5_HOLDER_OFFSET 80u

/**
 * record_holder_of_version - the lock word of a record or ring that this
 * build cannot lock (another version or lock ABI, or a broken lock),
 * which a layer-out must not lay a new lock over while it is held.
 * older: the header's version word (read once) is older than this
 * build's; lock_abi: its lock ABI (read once).  Only a block older by
 * both keeps it where older versions did: the lock ABI hashes every
 * offset of seqlock_t, which version 6 moved, so a block whose lock ABI
 * is ours has this version's seqlock_t whatever its version word says
 * (a stray write there must not send the look into padding, and a new
 * lock over a held one).  A newer version's is looked for here too.
 */
static inline uint64_t
record_holder_of_version(const record_header *h, int older,
                         uint32_t lock_abi)
{
    older = older && lock_abi != RECORD_LOCK_ABI;
    const _Atomic uint64_t *word =
        older ? (const _Atomic uint64_t *)((const char *)h
                                           + RECORD_V5_HOLDER_OFFSET)
              : &h->lock.holder;
    return atomic_load_explicit((_Atomic uint64_t *)word,
                                memory_order_acquire);
}

/**
 * record_lay_out_over - lay a record out, as record_init() does, over
 * memory of record_size() bytes that may hold a record in use
 * (create(overwrite=True)): a lock this library can take is taken first,
 * without waiting, and held while the rest is laid out, so no writer is
 * inside it meanwhile, and given back after (never re-initialised under
 * its waiters).  magic is RECORD_LAYING_OUT meanwhile (an attach() finds
 * no record, a create() one in use; a layer-out that dies leaves it: the
 * next create(overwrite=True) takes its lock over), and
 * readers of a record of this geometry read its last state until the
 * zeroes are committed as one section.  A lock this library cannot take
 * (another version or lock ABI, or words not a set-up lock's) is laid out
 * anew, unless its word says it is held.
 * Returns 0, EBUSY (its lock is held: by another thread, or this one),
 * EINVAL (the lock's words are corrupted) or seqlock_init()'s error.
 */
static inline int
record_lay_out_over(record_header *h, const char *layout,
                    uint32_t layout_bytes, uint32_t data_bytes)
{
    uint32_t version = h->version, lock_abi = h->lock_abi; /* read once */
    if (version != RECORD_VERSION || lock_abi != RECORD_LOCK_ABI
        || seqlock_check(&h->lock) != 0) {
        if (record_holder_of_version(h, version < RECORD_VERSION, lock_abi)
            != 0) {
            return EBUSY;
        }
        return record_init(h, layout, layout_bytes, data_bytes);
    }
    int err = seqlock_lock_excl_timed(&h->lock, 0);
    if (err != 0 && err != EOWNERDEAD) {
        return err == ETIMEDOUT || err == EDEADLK ? EBUSY : err;
    }
    atomic_store_explicit(&h->magic, RECORD_LAYING_OUT, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* before the rest */
    record_view v = record_view_of(h, layout_bytes, data_bytes);
    (void)seqlock_open_section(&h->lock); /* readers: copy 1 */
    /* version and lock_abi stay (ours): a layer-out that dies here
     * leaves a lock the next one can take over */
    memset((char *)h + offsetof(record_header, recoveries), 0,
           offsetof(record_header, lock)
               - offsetof(record_header, recoveries));
    h->data_bytes = data_bytes;
    h->layout_bytes = layout_bytes;
    char *after_lock = (char *)(&h->lock + 1);
    memset(after_lock, 0, (size_t)((char *)v.copy[0] - after_lock));
    memcpy((char *)h + RECORD_HEADER_SIZE, layout, layout_bytes);
    record_zero_words(v.copy[0], v.words);
    (void)seqlock_close_section(&h->lock); /* readers: copy 0, zeroed */
    record_zero_words(v.copy[1], v.words);
    atomic_store_explicit(&h->magic, RECORD_MAGIC, memory_order_release);
    (void)seqlock_unlock(&h->lock);
    return 0;
}

enum record_mismatch {
    RECORD_MATCHES = 0,
    RECORD_NO_MAGIC = 1,       /* no record here (or not yet created) */
    RECORD_OTHER_VERSION = 2,  /* h->version names the creator's */
    RECORD_OTHER_LOCK_ABI = 3, /* another C library, word size or layout */
    RECORD_OTHER_LAYOUT = 4,   /* other fields */
    RECORD_TOO_SMALL = 5,      /* the memory ends before the record */
    RECORD_BROKEN_LOCK = 6,    /* the lock word was never set up, or is
                                  overwritten */
};

/**
 * record_matches - does memory of `size` bytes hold a record of this layout?
 * Returns: RECORD_MATCHES, or which check failed, for the error message.
 * Reads nothing past size.
 */
static inline enum record_mismatch
record_matches(const record_header *h, size_t size, const char *layout,
               uint32_t layout_bytes, uint32_t data_bytes)
{
    if (size < 2 * sizeof(uint32_t)
        || atomic_load_explicit(&((record_header *)h)->magic,
                                memory_order_acquire) != RECORD_MAGIC) {
        return RECORD_NO_MAGIC;
    }
    if (h->version != RECORD_VERSION) {
        return RECORD_OTHER_VERSION;
    }
    if (size < RECORD_HEADER_SIZE + layout_bytes) {
        return RECORD_TOO_SMALL;
    }
    if (h->lock_abi != RECORD_LOCK_ABI) {
        return RECORD_OTHER_LOCK_ABI;
    }
    if (seqlock_check(&h->lock) != 0) {
        return RECORD_BROKEN_LOCK;
    }
    if (h->layout_bytes != layout_bytes || h->data_bytes != data_bytes
        || memcmp(record_layout_text(h), layout, layout_bytes) != 0) {
        return RECORD_OTHER_LAYOUT;
    }
    if (size < record_size(layout_bytes, data_bytes)) {
        return RECORD_TOO_SMALL;
    }
    return RECORD_MATCHES;
}

/* ---- byte ranges of the data, for fields that do not fill whole words ---- */

/** record_load_bytes - relaxed-atomic copy of data bytes [offset, +n) */
static inline void
record_load_bytes(void *dst, const seqlock_word_t *data, size_t offset,
                  size_t n)
{
    unsigned char *out = (unsigned char *)dst;
    if (offset % SEQLOCK_WORD_SIZE == 0) { /* a field's usual start */
        seqlock_read_copy(dst, data + offset / SEQLOCK_WORD_SIZE, n);
        return;
    }
    while (n) {
        size_t word = offset / SEQLOCK_WORD_SIZE;
        size_t skip = offset % SEQLOCK_WORD_SIZE;
        size_t take = SEQLOCK_WORD_SIZE - skip < n ? SEQLOCK_WORD_SIZE - skip
                                                   : n;
        seqlock_word_bytes_(out,
                            atomic_load_explicit((seqlock_word_t *)&data[word],
                                                 memory_order_relaxed),
                            skip, take);
        out += take;
        offset += take;
        n -= take;
    }
}

/** record_store_bytes - store data bytes [offset, +n); lock owner only */
static inline void
record_store_bytes(seqlock_word_t *data, size_t offset, const void *src,
                   size_t n)
{
    const unsigned char *in = (const unsigned char *)src;
    if (offset % SEQLOCK_WORD_SIZE == 0) { /* whole words first */
        size_t first = offset / SEQLOCK_WORD_SIZE;
        size_t whole = n / SEQLOCK_WORD_SIZE;
        for (size_t i = 0; i < whole; i++) {
            seqlock_word_value_t w;
            memcpy(&w, in + i * SEQLOCK_WORD_SIZE, SEQLOCK_WORD_SIZE);
            atomic_store_explicit(&data[first + i], w, memory_order_relaxed);
        }
        in += whole * SEQLOCK_WORD_SIZE;
        offset += whole * SEQLOCK_WORD_SIZE;
        n -= whole * SEQLOCK_WORD_SIZE;
    }
    while (n) {
        size_t word = offset / SEQLOCK_WORD_SIZE;
        size_t skip = offset % SEQLOCK_WORD_SIZE;
        size_t take = SEQLOCK_WORD_SIZE - skip < n ? SEQLOCK_WORD_SIZE - skip
                                                   : n;
        seqlock_word_value_t w = atomic_load_explicit(&data[word],
                                                      memory_order_relaxed);
        memcpy((unsigned char *)&w + skip, in, take);
        atomic_store_explicit(&data[word], w, memory_order_relaxed);
        in += take;
        offset += take;
        n -= take;
    }
}

static inline void
record_copy_words(seqlock_word_t *dst, seqlock_word_t *src, size_t words)
{
    for (size_t i = 0; i < words; i++) {
        atomic_store_explicit(
            &dst[i], atomic_load_explicit(&src[i], memory_order_relaxed),
            memory_order_relaxed);
    }
}

/* ---- readers ---- */

/**
 * record_read_copy - the copy a latch reader whose count is seq copies
 * (seqlock_latch(v->lock)): copy 1 while a section is open, else copy 0.
 */
static inline const seqlock_word_t *
record_read_copy(const record_view *v, uint64_t seq)
{
    return record_copy(v, (unsigned)(seq & 1u));
}

/**
 * record_try_read - one latch read pass: copy data bytes [offset, +n) of
 * the copy the count names into dst (private memory); nonzero if no
 * writer switched copies meanwhile (the copy is whole), with *seq the
 * count it was taken at (odd while a section was open: the state before
 * it).  Never waits and writes nothing shared.  The caller keeps
 * offset + n <= v->data_bytes.
 */
static inline int
record_try_read(const record_view *v, void *dst, size_t offset, size_t n,
                uint64_t *seq)
{
    *seq = seqcount_latch_read64(seqlock_latch(v->lock));
    record_load_bytes(dst, record_read_copy(v, *seq), offset, n);
    return !seqcount_latch_retry64(seqlock_latch(v->lock), *seq);
}

/* ---- writers (the caller holds h->lock's lock word) ---- */

static inline void
record_copy_over(const record_view *v, unsigned to, unsigned from)
{
    record_copy_words(record_copy(v, to), record_copy(v, from), v->words);
}

/**
 * record_abort - discard the open section's changes: copy 0 <- copy 1,
 * the committed state readers have been reading.  The section stays open.
 */
static inline void
record_abort(const record_view *v)
{
    record_copy_over(v, 0, 1);
}

/**
 * record_finish - after seqlock_close_section() (readers now copy copy 0,
 * the new state), bring copy 1 up to date; then release the lock.
 */
static inline void
record_finish(const record_view *v)
{
    record_copy_over(v, 1, 0);
}

/**
 * record_repair - make the copies whole after taking the lock from a
 * holder that died (EOWNERDEAD), or from a thread a fork left behind
 * Call before opening or closing a section.  Inside a section (odd), copy
 * 0 may be half changed: put it back and count the discarded section; the
 * section stays open (the caller adopts or closes it).  After one (even),
 * the holder may have died bringing copy 1 up to date: finish that.
 * Returns 1 if a section's changes were discarded (the count was odd:
 * the caller adopts or closes the section; the count is read once here).
 */
static inline int
record_repair(const record_view *v)
{
    if (!(seqlock_sequence(v->lock) & 1u)) {
        record_finish(v);
        return 0;
    }
    record_abort(v);
    atomic_fetch_add_explicit(&v->header->recoveries, 1,
                              memory_order_relaxed);
    return 1;
}

/* ---- the write protocol (the caller holds h->lock's lock word) ---- */

/**
 * record_open_section - open a write section on the record: its writes go
 * to copy 0 while readers read copy 1.  took_over: the lock word was taken
 * from a holder that died (EOWNERDEAD), so the copies are repaired first
 * (a section it left half written is discarded, and this one adopts it).
 */
static inline void
record_open_section(const record_view *v, int took_over)
{
    if (took_over) {
        (void)record_repair(v);
    }
    (void)seqlock_open_section(v->lock);
}

/**
 * record_close_section - close the write section: its changes stand, or
 * (rollback) copy 0 is put back as the section found it.  The count's step
 * switches readers to copy 0 and wakes sleepers; then copy 1 catches up.
 * The caller then gives back the lock word.
 */
static inline void
record_close_section(const record_view *v, int rollback)
{
    if (rollback) {
        record_abort(v);
    }
    (void)seqlock_close_section(v->lock);
    record_finish(v);
}

/**
 * record_close_dead_section - holding the lock word without a section (a
 * locking pass) taken from a holder that died: discard and close the
 * section it left open, if any, so readers see the last committed state.
 */
static inline void
record_close_dead_section(const record_view *v)
{
    if (record_repair(v)) {
        (void)seqlock_close_section(v->lock);
    }
}

#endif /* SEQLOCK_RECORD_H */
