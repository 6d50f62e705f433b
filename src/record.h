/*
 * record.h - a seqlock-protected record of plain words that can live in
 * memory shared between processes, with an undo copy so that a writer that
 * dies inside a write section costs nothing but that write.  No Python.
 *
 * Memory layout (offsets in bytes; everything 8-byte aligned):
 *
 *     0    record_header (RECORD_HEADER_SIZE bytes): magic, version, the
 *          data and layout sizes, the lock ABI, the undo state and a
 *          recovery count on the first cache line; the seqlock_t (a robust
 *          process-shared mutex inside) from the second, padded to 64
 *     H    the layout descriptor: layout_bytes of text naming every field
 *          ("x:d;y:d;v:16d"), padded to 64
 *     D    data: SEQLOCK_WORDS(data_bytes) words, readers copy from here
 *     D+W  undo: the same number of words, a copy of the data as the last
 *          complete write left it
 *
 * Who writes what: the lock's holder writes data, undo and undo_state; the
 * creator writes everything once before publishing magic (release store);
 * readers write nothing.
 *
 * A write section: take the lock; record_save_undo(); change the data;
 * record_section_done(); release the lock.  If the holder dies inside it,
 * the kernel marks the lock's mutex (robust futex list) and the next
 * thread to take the lock gets EOWNERDEAD and calls record_recover(),
 * which puts back the undo copy if it was complete (if it was not, the
 * data were not yet touched).  Readers therefore only ever see complete
 * writes.  Recovery reads what a dead thread stored: the kernel marks the
 * mutex word on that thread's way out, after all its stores, and the
 * taker's acquire of the marked word orders its reads after that mark.
 */
#ifndef SEQLOCK_RECORD_H
#define SEQLOCK_RECORD_H

#include "seqlock.h"

#include <assert.h>

#define RECORD_MAGIC 0x52514553u /* "SEQR" little-endian */
#define RECORD_VERSION 2u /* 1: seqlock_py 0.x with a thread-id lock word */
#define RECORD_ALIGN 64u

enum record_undo_state {
    UNDO_IDLE = 0,   /* no write section in progress */
    UNDO_SAVING = 1, /* copying data to undo: data untouched so far */
    UNDO_SAVED = 2,  /* undo holds the last complete write */
};

/* Which lock layout the creator compiled in: processes sharing a record
 * must agree on the C library's pthread_mutex_t and the word size. */
#if defined(__GLIBC__)
#define RECORD_LIBC 1u
#elif defined(__linux__)
#define RECORD_LIBC 2u /* musl and other Linux C libraries */
#else
#define RECORD_LIBC 3u
#endif
#define RECORD_LOCK_ABI \
    ((uint32_t)(sizeof(seqlock_t) << 16 | sizeof(void *) << 8 | RECORD_LIBC))

typedef struct record_header {
    _Atomic uint32_t magic; /* RECORD_MAGIC once initialised */
    uint32_t version;       /* RECORD_VERSION: both at the same offsets in
                               every version, so attach() can name it */
    uint32_t data_bytes;
    uint32_t layout_bytes;
    uint32_t lock_abi;      /* RECORD_LOCK_ABI of the creator */
    _Atomic uint32_t undo_state;
    _Atomic uint32_t recoveries; /* write sections undone after a death */
    uint32_t reserved[9];
    /* Its own cache line on: writers' lock traffic stays off the line
     * above, which readers load once at attach(). */
    seqlock_t lock;
} record_header;

#define RECORD_HEADER_SIZE \
    ((sizeof(record_header) + RECORD_ALIGN - 1) / RECORD_ALIGN * RECORD_ALIGN)
static_assert(offsetof(record_header, lock) == 64,
              "the lock starts the header's second cache line");

static inline size_t
record_round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

static inline size_t
record_data_offset(size_t layout_bytes)
{
    return RECORD_HEADER_SIZE + record_round_up(layout_bytes, RECORD_ALIGN);
}

/** record_size - bytes of memory a record with this layout occupies */
static inline size_t
record_size(size_t layout_bytes, size_t data_bytes)
{
    return record_data_offset(layout_bytes)
           + 2 * SEQLOCK_WORDS(data_bytes) * SEQLOCK_WORD_SIZE;
}

static inline seqlock_word_t *
record_data(record_header *h)
{
    return (seqlock_word_t *)((char *)h + record_data_offset(h->layout_bytes));
}

static inline seqlock_word_t *
record_undo(record_header *h)
{
    return record_data(h) + SEQLOCK_WORDS(h->data_bytes);
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
    atomic_init(&h->undo_state, UNDO_IDLE);
    atomic_init(&h->recoveries, 0);
    int err = seqlock_init(&h->lock);
    if (err != 0) {
        return err;
    }
    memcpy((char *)h + RECORD_HEADER_SIZE, layout, layout_bytes);
    atomic_store_explicit(&h->magic, RECORD_MAGIC, memory_order_release);
    return 0;
}

enum record_mismatch {
    RECORD_MATCHES = 0,
    RECORD_NO_MAGIC = 1,       /* no record here (or not yet created) */
    RECORD_OTHER_VERSION = 2,  /* h->version names the creator's */
    RECORD_OTHER_LOCK_ABI = 3, /* another C library or word size */
    RECORD_OTHER_LAYOUT = 4,   /* other fields */
    RECORD_TOO_SMALL = 5,      /* the memory ends before the record */
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
    while (n) {
        size_t word = offset / SEQLOCK_WORD_SIZE;
        size_t skip = offset % SEQLOCK_WORD_SIZE;
        size_t take = SEQLOCK_WORD_SIZE - skip < n ? SEQLOCK_WORD_SIZE - skip
                                                   : n;
        seqlock_word_value_t w = atomic_load_explicit(
            (seqlock_word_t *)&data[word], memory_order_relaxed);
        memcpy(out, (unsigned char *)&w + skip, take);
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

/* ---- write sections (the caller holds h->lock) ---- */

/**
 * record_save_undo - keep a copy of the data before changing them
 * Call right after taking the lock.  The release fence before UNDO_SAVED
 * orders the copy before the state that says it is complete.
 */
static inline void
record_save_undo(record_header *h)
{
    atomic_store_explicit(&h->undo_state, UNDO_SAVING, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    record_copy_words(record_undo(h), record_data(h),
                      SEQLOCK_WORDS(h->data_bytes));
    atomic_store_explicit(&h->undo_state, UNDO_SAVED, memory_order_release);
}

/**
 * record_rollback - put the data back as record_save_undo() found them
 * For a write section that failed half-way; the lock stays held.
 */
static inline void
record_rollback(record_header *h)
{
    if (atomic_load_explicit(&h->undo_state, memory_order_acquire)
        == UNDO_SAVED) {
        record_copy_words(record_data(h), record_undo(h),
                          SEQLOCK_WORDS(h->data_bytes));
    }
}

/**
 * record_recover - undo a section whose writer is gone, and count it
 * For the thread that took the lock over (EOWNERDEAD) or a fork's child
 * repairing a private record; the lock stays held.  Returns 1 if a copy
 * was put back, 0 if the section had not begun changing the data (its
 * writer died while saving the undo copy, or held the lock only to read).
 */
static inline int
record_recover(record_header *h)
{
    int undone = atomic_load_explicit(&h->undo_state, memory_order_acquire)
                 == UNDO_SAVED;
    record_rollback(h);
    atomic_store_explicit(&h->undo_state, UNDO_IDLE, memory_order_relaxed);
    if (undone) {
        atomic_fetch_add_explicit(&h->recoveries, 1, memory_order_relaxed);
    }
    return undone;
}

/** record_section_done - the section's changes stand: forget the undo
 * copy (call before the section closes; the lock stays held) */
static inline void
record_section_done(record_header *h)
{
    atomic_store_explicit(&h->undo_state, UNDO_IDLE, memory_order_relaxed);
}

#endif /* SEQLOCK_RECORD_H */
