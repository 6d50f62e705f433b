/*
 * test_signal_masks.c - seqlock.h's signal-masking variants (the _irqsave,
 * _irq and _bh writers and readers): every maskable signal blocked inside,
 * the caller's mask restored exactly after, a handler that reads data an
 * _irq writer protects; and misuse that must abort rather than hang (a
 * handler reading its own thread's write section, a recursive lock, an
 * unlock without the lock or without a section).
 */
#include "harness.h"

/* ==== signal-masking variants ==== */

/* The real-time signals this thread can block: SIGRTMIN..SIGRTMAX (glibc
 * reserves the two below SIGRTMIN for itself), less any the system keeps
 * (qemu-user keeps the last two for its own use): what a full mask, once
 * set, holds. */
static sigset_t
blockable_signals(void)
{
    sigset_t all, old, applied;
    sigfillset(&all);
    sigemptyset(&applied);
    if (pthread_sigmask(SIG_SETMASK, &all, &old) == 0) {
        pthread_sigmask(SIG_SETMASK, &old, &applied);
    }
    return applied;
}

/* Every signal a thread can block: 1..31 but KILL and STOP, and the
 * real-time ones blockable_signals() finds. */
static int
all_maskable_blocked(const sigset_t *set)
{
    for (int sig = 1; sig < 32; sig++) {
        if (sig != SIGKILL && sig != SIGSTOP && !sigismember(set, sig)) {
            return 0;
        }
    }
    sigset_t blockable = blockable_signals();
    /* Every system keeps SIGRTMIN blockable: if the probe found it not,
     * it failed, and the loop below would check nothing. */
    if (!sigismember(&blockable, SIGRTMIN)) {
        return 0;
    }
    for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++) {
        if (sigismember(&blockable, sig) && !sigismember(set, sig)) {
            return 0;
        }
    }
    return 1;
}

static int
same_mask(const sigset_t *a, const sigset_t *b)
{
    for (int sig = 1; sig < NSIG; sig++) {
        if (sigismember(a, sig) != sigismember(b, sig)) {
            return 0;
        }
    }
    return 1;
}

/* The mask the irq tests start from: SIGUSR2 already blocked, so that
 * "restored exactly" means it stays blocked, not merely that the rest are
 * unblocked.  The runner restores the test-free mask after each test. */
static sigset_t
mask_with_sigusr2_blocked(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_SETMASK, &set, NULL);
    return current_mask();
}

static void
test_write_seqlock_irqsave_blocks_signals_and_restores_mask(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    unsigned long flags;
    write_seqlock_irqsave(&sl, flags);
    sigset_t inside = current_mask();
    uint64_t seq = seqlock_sequence(&sl);
    write_sequnlock_irqrestore(&sl, flags);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&inside));
    CHECK(seq == 1);
    CHECK(same_mask(&after, &before));
    CHECK(sigismember(&after, SIGUSR2));
    CHECK(seqlock_sequence(&sl) == 2);
}

static void
test_write_seqlock_irq_blocks_signals_and_restores_mask(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    write_seqlock_irq(&sl);
    sigset_t inside = current_mask();
    uint64_t seq = seqlock_sequence(&sl);
    write_sequnlock_irq(&sl);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&inside));
    CHECK(seq == 1);
    CHECK(same_mask(&after, &before));
    CHECK(seqlock_sequence(&sl) == 2);
}

static void
test_write_seqlock_bh_blocks_signals_and_restores_mask(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    write_seqlock_bh(&sl);
    sigset_t inside = current_mask();
    uint64_t seq = seqlock_sequence(&sl);
    write_sequnlock_bh(&sl);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&inside));
    CHECK(seq == 1);
    CHECK(same_mask(&after, &before));
    CHECK(seqlock_sequence(&sl) == 2);
}

static void
test_read_seqbegin_irqsave_blocks_signals_and_restores_mask(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    unsigned long flags;
    unsigned seq = read_seqbegin_irqsave(&sl, flags);
    sigset_t inside = current_mask();
    int retry = read_seqretry_irqrestore(&sl, seq, flags);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&inside));
    CHECK(seq == 0);
    CHECK(retry == 0);
    CHECK(same_mask(&after, &before));
}

static void
test_read_seqbegin_irq_blocks_signals_and_restores_mask(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    unsigned seq = read_seqbegin_irq(&sl);
    sigset_t inside = current_mask();
    int retry = read_seqretry_irq(&sl, seq);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&inside));
    CHECK(retry == 0);
    CHECK(same_mask(&after, &before));
}

static void
test_read_seqbegin_bh_blocks_signals_and_restores_mask(void)
{
    seqlock_t sl = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    unsigned seq = read_seqbegin_bh(&sl);
    sigset_t inside = current_mask();
    int retry = read_seqretry_bh(&sl, seq);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&inside));
    CHECK(retry == 0);
    CHECK(same_mask(&after, &before));
}

static void
test_read_seqretry_irqrestore_reports_intervening_write(void)
{
    /* The restoring forms still pass read_seqretry()'s answer through. */
    seqlock_t sl = SEQLOCK_UNLOCKED;
    unsigned long flags;
    unsigned seq = read_seqbegin_irqsave(&sl, flags);
    write_seqlock(&sl);
    write_sequnlock(&sl);
    CHECK(read_seqretry_irqrestore(&sl, seq, flags) != 0);
    seq = read_seqbegin_irq(&sl);
    write_seqlock(&sl);
    write_sequnlock(&sl);
    CHECK(read_seqretry_irq(&sl, seq) != 0);
}

static void
test_nested_irqsave_restores_mask_only_at_outermost_level(void)
{
    seqlock_t outer = SEQLOCK_UNLOCKED;
    seqlock_t inner = SEQLOCK_UNLOCKED;
    sigset_t before = mask_with_sigusr2_blocked();
    unsigned long outer_flags, inner_flags;
    write_seqlock_irqsave(&outer, outer_flags);
    write_seqlock_irqsave(&inner, inner_flags);
    write_sequnlock_irqrestore(&inner, inner_flags);
    sigset_t between = current_mask();
    write_sequnlock_irqrestore(&outer, outer_flags);
    sigset_t after = current_mask();
    CHECK(all_maskable_blocked(&between)); /* still inside the outer one */
    CHECK(same_mask(&after, &before));
    CHECK(seqlock_irq_depth_() == 0);
}

/* ---- a handler that reads data an _irq writer protects ---- */

static seqlock_t handler_lock = SEQLOCK_UNLOCKED;
static seqlock_word_t handler_data[2];
static volatile sig_atomic_t handler_calls;
static uint64_t handler_snapshot[2];
static unsigned handler_seq;

static void
read_in_handler(int sig)
{
    (void)sig;
    unsigned seq;
    do {
        seq = read_seqbegin(&handler_lock);
        seqlock_read_copy(handler_snapshot, handler_data,
                          sizeof handler_snapshot);
    } while (read_seqretry(&handler_lock, seq));
    handler_seq = seq;
    handler_calls++;
}

static void
test_signal_raised_in_irq_write_section_is_delivered_after_unlock(void)
{
    struct sigaction sa = {.sa_handler = read_in_handler};
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    uint64_t update[2] = {7, 42};
    handler_calls = 0;

    write_seqlock_irq(&handler_lock);
    pthread_kill(pthread_self(), SIGUSR1);
    int ran_inside = handler_calls;
    sigset_t pending;
    sigpending(&pending);
    seqlock_write_copy(handler_data, update, sizeof update);
    write_sequnlock_irq(&handler_lock); /* unblocking delivers it here */
    int ran_after = handler_calls;

    signal(SIGUSR1, SIG_DFL);
    CHECK(ran_inside == 0);
    CHECK(sigismember(&pending, SIGUSR1));
    CHECK(ran_after == 1);
    CHECK(handler_seq == (unsigned)seqlock_sequence(&handler_lock));
    CHECK(handler_snapshot[0] == 7 && handler_snapshot[1] == 42);
}

/* ---- misuse that must abort rather than hang ---- */

static seqlock_t misuse_lock = SEQLOCK_UNLOCKED;

static int
died_of(const struct child_result *r, int sig)
{
    return WIFSIGNALED(r->status) && WTERMSIG(r->status) == sig;
}

/* Aborted (not hung: the guard's SIGALRM) with a message naming what. */
static int
aborted_saying(const struct child_result *r, const char *what)
{
    return died_of(r, SIGABRT) && strstr(r->stderr_text, what) != NULL;
}

/* Run misuse() in a child process: nonzero if it aborted saying what. */
static int
misuse_aborts_saying(void (*misuse)(void), const char *what)
{
    struct child_result r;
    return run_in_child(misuse, &r) && aborted_saying(&r, what);
}

static void
read_own_write_section(int sig)
{
    (void)sig;
    (void)read_seqbegin(&misuse_lock); /* can never see an even count */
}

static void
raise_signal_in_plain_write_section(void)
{
    struct sigaction sa = {.sa_handler = read_own_write_section};
    sigaction(SIGUSR1, &sa, NULL);
    write_seqlock(&misuse_lock);
    pthread_kill(pthread_self(), SIGUSR1);
    write_sequnlock(&misuse_lock);
}

static void
test_handler_reading_its_own_threads_write_section_aborts(void)
{
    CHECK(misuse_aborts_saying(raise_signal_in_plain_write_section,
                               "read_seqbegin"));
}

static void
take_write_lock_twice(void)
{
    write_seqlock(&misuse_lock);
    write_seqlock(&misuse_lock);
}

static void
test_recursive_write_seqlock_aborts(void)
{
    CHECK(misuse_aborts_saying(take_write_lock_twice, "already holds"));
}

static void
write_sequnlock_without_the_lock(void)
{
    write_sequnlock(&misuse_lock);
}

static void
test_write_sequnlock_without_the_lock_aborts(void)
{
    CHECK(misuse_aborts_saying(write_sequnlock_without_the_lock,
                               "write_sequnlock"));
}

static void
write_sequnlock_in_a_locking_pass(void)
{
    read_seqlock_excl(&misuse_lock);
    write_sequnlock(&misuse_lock);
}

static void
test_write_sequnlock_without_a_section_aborts(void)
{
    CHECK(misuse_aborts_saying(write_sequnlock_in_a_locking_pass,
                               "write_sequnlock"));
}

static void
read_sequnlock_excl_without_the_lock(void)
{
    read_sequnlock_excl(&misuse_lock);
}

static void
test_read_sequnlock_excl_without_the_lock_aborts(void)
{
    CHECK(misuse_aborts_saying(read_sequnlock_excl_without_the_lock,
                               "read_sequnlock_excl"));
}

/* ---- registration ---- */

static const struct test tests[] = {
    TEST(test_write_seqlock_irqsave_blocks_signals_and_restores_mask, PLAIN),
    TEST(test_write_seqlock_irq_blocks_signals_and_restores_mask, PLAIN),
    TEST(test_write_seqlock_bh_blocks_signals_and_restores_mask, PLAIN),
    TEST(test_read_seqbegin_irqsave_blocks_signals_and_restores_mask, PLAIN),
    TEST(test_read_seqbegin_irq_blocks_signals_and_restores_mask, PLAIN),
    TEST(test_read_seqbegin_bh_blocks_signals_and_restores_mask, PLAIN),
    TEST(test_read_seqretry_irqrestore_reports_intervening_write, PLAIN),
    TEST(test_nested_irqsave_restores_mask_only_at_outermost_level, PLAIN),
    TEST(test_signal_raised_in_irq_write_section_is_delivered_after_unlock,
         FORKS_OR_SIGNALS),
    TEST(test_handler_reading_its_own_threads_write_section_aborts,
         FORKS_OR_SIGNALS),
    TEST(test_recursive_write_seqlock_aborts, FORKS_OR_SIGNALS),
    TEST(test_write_sequnlock_without_the_lock_aborts, FORKS_OR_SIGNALS),
    TEST(test_write_sequnlock_without_a_section_aborts, FORKS_OR_SIGNALS),
    TEST(test_read_sequnlock_excl_without_the_lock_aborts, FORKS_OR_SIGNALS),
};
REGISTER_TESTS(tests)
