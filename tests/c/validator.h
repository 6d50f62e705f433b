/*
 * validator.h - what the validators, stress.c, latch_stress.c and
 * ring_stress.c, share outside their checks: the command line, "[seconds [readers]]" for
 * each of their two phases (defaults: 1 second, 4 readers), and the last
 * line, "N passed, M failed" over those phases (tools/test_summary.py adds
 * these up).
 */
#ifndef VALIDATOR_H
#define VALIDATOR_H

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

/* Print the summary of the two phases, `failed` of which failed; returns
 * main()'s exit status. */
static inline int
validator_summary(int failed)
{
    printf("%d passed, %d failed\n", 2 - failed, failed);
    return failed != 0;
}

#endif /* VALIDATOR_H */
