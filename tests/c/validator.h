/*
 * validator.h - what the validators, stress.c, latch_stress.c and
 * ring_stress.c, share outside their checks: the command line,
 * "[seconds [readers]]" for each of their two phases (defaults: 1 second,
 * 4 readers), a phase of killed writers skipped where the kernel keeps no
 * robust futex list (robust_list.h), and the last line, "N passed,
 * M failed, K skipped" over those phases (tools/test_summary.py adds
 * these up).
 */
#ifndef VALIDATOR_H
#define VALIDATOR_H

#include "robust_list.h"

#include <stdio.h>
#include <stdlib.h>

struct validator_args {
    double seconds;
    int readers;
};

/* The run's arguments; on bad ones, print the usage and exit 2. */
static inline struct validator_args
validator_args(int argc, char **argv, int max_readers)
{
    struct validator_args a = {argc > 1 ? atof(argv[1]) : 1.0,
                               argc > 2 ? atoi(argv[2]) : 4};
    if (argc > 3 || a.seconds <= 0 || a.readers < 1
        || a.readers > max_readers) {
        fprintf(stderr, "usage: %s [seconds [readers (1..%d)]]\n", argv[0],
                max_readers);
        exit(2);
    }
    return a;
}

/* 1 (after saying so) if `phase`, which kills writers, cannot run here:
 * without a robust futex list no dead writer is ever seen. */
static inline int
killed_writers_skipped(const char *phase)
{
    int missing = robust_list_missing() != 0;
    if (missing) {
        printf("%s: skipped: %s\n", phase, ROBUST_LIST_MISSING_REASON);
    }
    return missing;
}

/* Print the summary of the two phases, `failed` of which failed and
 * `skipped` were skipped; returns main()'s exit status. */
static inline int
validator_summary(int failed, int skipped)
{
    printf("%d passed, %d failed, %d skipped\n", 2 - failed - skipped,
           failed, skipped);
    return failed != 0;
}

#endif /* VALIDATOR_H */
