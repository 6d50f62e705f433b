/*
 * open_memory.h - the memory of every record and ring this process has
 * open, so that a call copying into a caller's buffer (read_into(),
 * read_last(out=)) can refuse one that lies over any of them
 * (open_memory.c).  No Python.
 *
 * Written when a record or ring is bound to memory and when it lets the
 * memory go; read by every copy into a caller's buffer.  So it is read the
 * way a seqlock is (seqlock.h): a sequence word, even while the set is
 * stable, around ranges read without a lock and without writing shared
 * memory, retried if the word moved.  Readers keep scaling with threads,
 * and most answer from the hull of all ranges alone (a buffer of numpy's
 * own is nowhere near a shared mapping).
 *
 * Virtual addresses only: another mapping of the same pages (a second
 * mmap() of the file, another process's mapping) cannot be told from
 * here.
 */
#ifndef SEQLOCK_PY_OPEN_MEMORY_H
#define SEQLOCK_PY_OPEN_MEMORY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Add [memory, memory + len) under key (the object's own address, unique
 * while it lives).  0, or ENOMEM with nothing added. */
int open_memory_add(const void *key, const void *memory, size_t len);

/* Remove key's range; nothing if key has none (removing twice is safe). */
void open_memory_remove(const void *key);

/* Nonzero if [p, p + len) overlaps the range of any key added and not yet
 * removed when the call began.  Never blocks, writes nothing shared. */
int open_memory_overlaps(const void *p, size_t len);

/* The set's sequence word (open_memory.c), for open_memory_version(). */
extern _Atomic unsigned long long open_memory_sequence_;

/* A number that changes whenever a range is added or removed: a caller
 * that checked a buffer with open_memory_overlaps() need not check it again
 * while this stays the same (odd while a change is made: never equal to
 * the version of a finished check).  One load, writes nothing; inline, as
 * a bound reader makes it per call. */
static inline unsigned long long
open_memory_version(void)
{
    return atomic_load_explicit(&open_memory_sequence_, memory_order_acquire);
}

/* The last range the calling thread found clear of every open range
 * (open_memory_overlaps() stores it), with the version of the set it was
 * checked against.  Thread-local, so that readers keep writing nothing
 * shared; initial-exec, as in_use_mine_ (in_use.h). */
typedef struct {
    uintptr_t lo, hi;
    unsigned long long version;
} open_memory_clear;
extern _Thread_local open_memory_clear open_memory_clear_
    __attribute__((tls_model("initial-exec")));

/* open_memory_overlaps() for a copy made per call into a buffer that is
 * usually the same: while the set's version stands, a range inside the
 * one this thread last found clear is clear too (the set is the same
 * set), which one load and three compares tell.  A heap buffer often lies
 * inside the hull of the open ranges, where open_memory_overlaps() walks
 * the table. */
static inline int
open_memory_overlaps_cached(const void *p, size_t len)
{
    const open_memory_clear *c = &open_memory_clear_;
    uintptr_t lo = (uintptr_t)p;
    if (open_memory_version() == c->version && lo >= c->lo && lo <= c->hi
        && len <= c->hi - lo) {
        return 0;
    }
    return open_memory_overlaps(p, len);
}

#endif /* SEQLOCK_PY_OPEN_MEMORY_H */
