/*
 * example.c - the canonical reader and writer from the top of seqlock.h,
 * compiled and run as is.
 *
 * Build from the repository root:
 *     make -C tests/c test   (or cc -Isrc/libseqlock tests/c/example.c with
 *     every .c file of src/libseqlock, -lpthread)
 */
#include "seqlock.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

struct position {
    uint64_t x, y; /* plain numbers only: no pointers in protected data */
};

static seqlock_t lock = SEQLOCK_UNLOCKED;
static seqlock_word_t shared_words[SEQLOCK_WORDS(sizeof(struct position))];

static void *
writer(void *arg)
{
    (void)arg;
    for (uint64_t i = 1; i <= 100000; i++) {
        struct position update = {i, 2 * i};
        write_seqlock(&lock);
        seqlock_write_copy(shared_words, &update, sizeof update);
        write_sequnlock(&lock);
    }
    return NULL;
}

int
main(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, writer, NULL) != 0) {
        return 1;
    }
    struct position snapshot;
    unsigned long bad = 0;
    do {
        unsigned seq;
        do {
            seq = read_seqbegin(&lock);
            seqlock_read_copy(&snapshot, shared_words, sizeof snapshot);
        } while (read_seqretry(&lock, seq));
        /* Use the copy only now that read_seqretry() accepted it. */
        bad += snapshot.y != 2 * snapshot.x;
    } while (snapshot.x != 100000);
    pthread_join(t, NULL);
    printf("example: last position (%llu, %llu), %lu inconsistent\n",
           (unsigned long long)snapshot.x, (unsigned long long)snapshot.y,
           bad);
    return bad != 0;
}
