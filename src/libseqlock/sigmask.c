/*
 * sigmask.c - the _irq, _irqsave and _bh variants' signal masks: every
 * maskable signal blocked for the calling thread from the outermost
 * save to its restore (signals stand in for interrupts in user space).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "seqlock.h"

#include <signal.h>

static _Thread_local unsigned long irq_depth;
static _Thread_local sigset_t irq_saved_mask;

unsigned long
seqlock_irq_save_(void)
{
    unsigned long depth = irq_depth;
    if (depth == 0) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &irq_saved_mask);
    }
    irq_depth = depth + 1;
    return depth;
}

void
seqlock_irq_restore_(unsigned long depth)
{
    irq_depth = depth;
    if (depth == 0) {
        pthread_sigmask(SIG_SETMASK, &irq_saved_mask, NULL);
    }
}

unsigned long
seqlock_irq_depth_(void)
{
    return irq_depth;
}
