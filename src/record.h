/*
 * record.h - a seqlock-protected record of plain words that can live in
 * memory shared between processes, with an undo copy so that a writer that
 * dies inside a write section costs nothing but that write.  No Python.
 *
 * Memory layout (offsets in bytes; everything 8-byte aligned):
 *
 *     0    record_header (64 bytes): magic, version, the seqlock_t, the
 *          undo state, a recovery count, the data and layout sizes
 *     64   the layout descriptor: layout_bytes of text naming every field
 *          ("x:d;y:d;v:16d"), padded to 64
 *     D    data: SEQLOCK_WORDS(data_bytes) words, readers copy from here
 *     D+W  undo: the same number of words, a copy of the data as the last
 *          complete write left it
 *
 * Who writes what: the lock owner writes data, undo and undo_state; the
 * creator writes everything once before publishing magic (release store);
 * readers write nothing.
 *
 * A write section: take the lock; record_save_undo(); change the data;
 * record_end_write() (which releases the lock).  If the owner dies inside
 * it, the next thread to take the lock gets EOWNERDEAD and calls
 * record_recover(), which puts back the undo copy if it was complete (if it
 * was not, the data were not yet touched).  Readers therefore only ever see
 * complete writes.  Recovery reads what a dead process stored: it relies on
 * those stores having reached memory, which the process's exit (kernel
 * teardown, many barriers, and the ~20 ms liveness period) ensures in
 * practice though C11 alone does not promise it.
 */
#ifndef SEQLOCK_RECORD_H
#define SEQLOCK_RECORD_H

#include "seqlock.h"

#include <assert.h>

#define RECORD_MAGIC 0x52514553u /* "SEQR" little-endian */
#define RECORD_VERSION 1u
#define RECORD_ALIGN 64u

enum record_undo_state {
    UNDO_IDLE = 0,   /* no write section in progress */
    UNDO_SAVING = 1, /* copying data to undo: data untouched so far */
    UNDO_SAVED = 2,  /* undo holds the last complete write */
};

typedef struct record_header {
    _Atomic uint32_t magic; /* RECORD_MAGIC once initialised */
    uint32_t version;
    seqlock_t lock;
    _Atomic uint32_t undo_state;
    _Atomic uint32_t recoveries; /* write sections undone after a death */
    uint32_t data_bytes;
    uint32_t layout_bytes;
    uint32_t reserved[6];
} record_header;

static_assert(sizeof(record_header) == 64, "record_header is 64 bytes");

static inline size_t
record_round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

static inline size_t
record_data_offset(size_t layout_bytes)
{
    return sizeof(record_header) + record_round_up(layout_bytes, RECORD_ALIGN);
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
    return (const char *)h + sizeof(record_header);
}

/**
 * record_init - lay out a zeroed record in memory of record_size() bytes
 * Not safe against concurrent users; the release store of the magic
 * publishes the header to attach()ers whose acquire load sees it.
 */
static inline void
record_init(record_header *h, const char *layout, uint32_t layout_bytes,
            uint32_t data_bytes)
{
    atomic_store_explicit(&h->magic, 0, memory_order_relaxed);
    memset((char *)h + sizeof h->magic, 0,
           record_size(layout_bytes, data_bytes) - sizeof h->magic);
    h->version = RECORD_VERSION;
    seqlock_init(&h->lock);
    atomic_init(&h->undo_state, UNDO_IDLE);
    atomic_init(&h->recoveries, 0);
    h->data_bytes = data_bytes;
    h->layout_bytes = layout_bytes;
    memcpy((char *)h + sizeof(record_header), layout, layout_bytes);
    atomic_store_explicit(&h->magic, RECORD_MAGIC, memory_order_release);
}

/**
 * record_matches - does memory of `size` bytes hold a record of this layout?
 * Returns: 0 if so; else which check failed, for the error message:
 * 1 no magic, 2 other version, 3 other layout or sizes.
 */
static inline int
record_matches(const record_header *h, size_t size, const char *layout,
               uint32_t layout_bytes, uint32_t data_bytes)
{
    if (size < sizeof(record_header)
        || atomic_load_explicit(&((record_header *)h)->magic,
                                memory_order_acquire) != RECORD_MAGIC) {
        return 1;
    }
    if (h->version != RECORD_VERSION) {
        return 2;
    }
    if (h->layout_bytes != layout_bytes || h->data_bytes != data_bytes
        || size < record_size(layout_bytes, data_bytes)
        || memcmp(record_layout_text(h), layout, layout_bytes) != 0) {
        return 3;
    }
    return 0;
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
 * record_recover - after taking the lock with EOWNERDEAD, undo the dead
 * owner's half-done write and count it.  The lock stays held.
 */
static inline void
record_recover(record_header *h)
{
    record_rollback(h);
    atomic_store_explicit(&h->undo_state, UNDO_IDLE, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->recoveries, 1, memory_order_relaxed);
}

/** record_end_write - close the write section and release the lock */
static inline void
record_end_write(record_header *h)
{
    atomic_store_explicit(&h->undo_state, UNDO_IDLE, memory_order_relaxed);
    write_sequnlock(&h->lock);
}

#endif /* SEQLOCK_RECORD_H */
