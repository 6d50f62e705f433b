/*
 * record_form.h - the validators' record: word[i] = a + i*K for i <
 * RECORD_WORDS, so every word follows from the first and a copy mixing two
 * writes breaks the form.  Shared by stress.c, latch_stress.c,
 * ring_stress.c and harness.h, which set RECORD_WORDS before including
 * it.
 */
#ifndef RECORD_FORM_H
#define RECORD_FORM_H

#include <stdint.h>

#define K 0x9e3779b97f4a7c15ULL /* any odd constant; sums wrap mod 2^64 */

static inline void
make_record(uint64_t out[RECORD_WORDS], uint64_t a)
{
    for (int i = 0; i < RECORD_WORDS; i++) {
        out[i] = a + (uint64_t)i * K;
    }
}

static inline int
well_formed(const uint64_t r[RECORD_WORDS])
{
    for (int i = 1; i < RECORD_WORDS; i++) {
        if (r[i] != r[0] + (uint64_t)i * K) {
            return 0;
        }
    }
    return 1;
}

#endif /* RECORD_FORM_H */
