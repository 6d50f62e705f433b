/*
 * test_untrusted.c - a lock in memory other processes may rewrite: what a
 * holder believes rests on its own memory, not on the lock's words; glibc
 * is never handed a beacon of another kind (seqlock_check(),
 * record_matches()); no rewrite makes a call spin or wait past its
 * timeout, and no wait of any length rests on a forged word (a stuck
 * lock is EINVAL, a live or held-up holder is waited for); a read-only
 * waiter writes nothing (seqlock_wait_for_change_flags()).
 */
#include "harness.h"
#include "record.h"

/* ==== a lock in memory other processes may rewrite ==== */

/* Any process that maps a lock may write its words at any moment.  What
 * the holder believes comes from its own memory; glibc is never handed a
 * beacon of another kind; no rewrite makes a call wait past its timeout. */

static void
test_what_a_thread_holds_does_not_rest_on_the_holder_word(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    CHECK(seqlock_write_lock_timed(&sl, 0) == 0);
    atomic_store(&sl.holder, 0x1234); /* another process's scribble */
    int held = seqlock_held(&sl);
    int closed = seqlock_close_section(&sl);
    int unlocked = seqlock_unlock(&sl);
    int later = seqlock_lock_excl_timed(&sl, GIVE_UP_NS); /* a gap, then */
    if (later == 0 || later == EOWNERDEAD) {
        seqlock_unlock(&sl);
    }
    CHECK(held == SEQLOCK_HOLDS_SECTION);
    CHECK(closed == 0 && unlocked == 0);
    CHECK(later == 0);
}

static void
test_another_threads_lock_is_not_mine_whatever_the_holder_word_says(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    atomic_store(&sl.holder, seqlock_self()); /* as if ours */
    int held = seqlock_held(&sl);
    int closed = seqlock_close_section(&sl);
    int unlocked = seqlock_unlock(&sl);
    CHECK(held == SEQLOCK_HOLDS_NOTHING);
    CHECK(closed == EPERM && unlocked == EPERM);
}

static void
test_a_section_closes_at_its_opening_count_plus_2_whatever_the_count_says(
    void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    atomic_store(&sl.seqcount.sequence, 10);
    CHECK(seqlock_write_lock_timed(&sl, 0) == 0);
    atomic_store(&sl.seqcount.sequence, 4); /* flipped even mid-section */
    int closed = seqlock_close_section(&sl);
    uint64_t after = seqlock_sequence(&sl);
    int unlocked = seqlock_unlock(&sl);
    CHECK(closed == 0 && unlocked == 0);
    CHECK(after == 12);
}

static void
test_a_beacon_of_another_kind_is_einval_not_handed_to_glibc(void)
{
    /* glibc asserts on a priority-protect kind (0x40): SIGABRT */
    static const int kinds[] = {0x40, 0xc0, 0x20, 0, 0x12345678};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        seqlock_t sl;
        CHECK(seqlock_init(&sl) == 0);
        int good = seqlock_check(&sl);
        sl.beacon.__data.__kind = kinds[i];
        int checked = seqlock_check(&sl);
        int tried = seqlock_lock_excl_timed(&sl, 0);
        int waited = seqlock_lock_excl_timed(&sl, 20 * MS);
        CHECK(good == 0 && checked == EINVAL);
        CHECK(tried == EINVAL && waited == EINVAL);
    }
}

/* 1 if the calling thread's robust list (the kernel's view) links the
 * beacon of sl. */
static int
robust_list_links(const seqlock_t *sl)
{
    struct robust_list_head *head;
    size_t len;
    if (syscall(SYS_get_robust_list, 0, &head, &len) != 0) {
        return -1;
    }
    const struct robust_list *entry = head->list.next;
    for (int n = 0; entry != &head->list && n < 4096; n++) {
        if ((const char *)entry + head->futex_offset
            == (const char *)&sl->beacon.__data.__lock) {
            return 1;
        }
        entry = entry->next;
    }
    return 0;
}

static void
test_a_beacon_word_rewritten_during_a_section_is_still_released(void)
{
    /* glibc refuses (EPERM) to unlock a mutex whose word names another
     * thread, and leaves it on the robust list, where the kernel and the
     * next robust mutex would follow it into memory since freed. */
    seqlock_t *sl = malloc(sizeof *sl);
    CHECK(sl != NULL && seqlock_init(sl) == 0);
    CHECK(seqlock_write_lock_timed(sl, 0) == 0);
    int linked = robust_list_links(sl);
    __atomic_fetch_add(&sl->beacon.__data.__lock, 1, __ATOMIC_RELAXED);
    sl->beacon.__data.__owner += 7;
    int unlocked = seqlock_unlock(sl);
    int still_linked = robust_list_links(sl);
    free(sl);
    CHECK(linked == 1);
    CHECK(unlocked == 0);
    CHECK(still_linked == 0);
}

static void
test_a_ready_word_rewritten_never_makes_a_taker_spin(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    atomic_store(&sl.ready, 1); /* "being set up by a first taker" */
    int64_t t0 = now_ns();
    int tried = seqlock_lock_excl_timed(&sl, 0);
    int waited = seqlock_lock_excl_timed(&sl, 20 * MS);
    int64_t took = now_ns() - t0;
    atomic_store(&sl.ready, 0xdeadbeef);
    int garbage = seqlock_lock_excl_timed(&sl, -1);
    CHECK(tried == ETIMEDOUT && waited == ETIMEDOUT);
    CHECK(took < PROMPTLY_NS);
    CHECK(garbage == EINVAL);
}

/* ---- stuck locks: no wait rests on a forged word (lock.c) ---- */

/* A thread id nobody has (in this PID namespace). */
static uint32_t
unused_tid(void)
{
    for (uint32_t tid = 12345;; tid++) {
        char path[32];
        snprintf(path, sizeof path, "/proc/%u", (unsigned)tid);
        if (access(path, F_OK) != 0) {
            return tid;
        }
    }
}

static void
set_beacon_word(seqlock_t *sl, uint32_t word)
{
    __atomic_store_n(&sl->beacon.__data.__lock, (int)word, __ATOMIC_RELAXED);
}

static void
test_a_used_lock_whose_ready_word_says_initialising_is_einval(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    write_seqlock(&sl);
    write_sequnlock(&sl);
    atomic_store(&sl.ready, 1); /* a first taker's, on a used lock */
    int64_t t0 = now_ns();
    int tried = seqlock_lock_excl_timed(&sl, 0);
    int waited = seqlock_lock_excl_timed(&sl, GIVE_UP_NS);
    int64_t took = now_ns() - t0;
    CHECK(tried == EINVAL && waited == EINVAL);
    CHECK(took < PROMPTLY_NS); /* at once: nobody sets a used lock up */
}

static void
test_a_free_word_under_a_beacon_forged_held_is_einval_not_waited_for(void)
{
    /* One 4-byte write: the beacon "held" by a thread nobody has, the
     * word free.  A try leaves the word alone; a wait ends in EINVAL once
     * that has lasted its bound, and leaves the words as it found them. */
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    write_seqlock(&sl);
    write_sequnlock(&sl);
    uint64_t gaps = atomic_load(&sl.gaps);
    set_beacon_word(&sl, unused_tid());
    int tried = seqlock_lock_excl_timed(&sl, 0);
    int64_t t0 = now_ns();
    int waited = seqlock_write_lock_timed(&sl, GIVE_UP_NS);
    int64_t took = now_ns() - t0;
    uint64_t holder = atomic_load(&sl.holder);
    uint64_t gaps_after = atomic_load(&sl.gaps);
    set_beacon_word(&sl, 0);
    int later = seqlock_write_lock_timed(&sl, 0);
    if (later == 0) {
        write_sequnlock(&sl);
    }
    CHECK(tried == ETIMEDOUT);
    CHECK(waited == EINVAL && took < GIVE_UP_NS);
    CHECK(holder == 0 && gaps_after == gaps);
    CHECK(later == 0);
}

static void
test_a_gap_whose_live_holder_sleeps_is_einval_and_the_holder_goes_on(void)
{
    /* A live holder's beacon word zeroed mid-section: a gap whose holder
     * /proc says is alive, and asleep (not in a gap's instructions).  The
     * waiter is told the lock is corrupted, takes nothing from the holder,
     * which closes its section and releases. */
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    struct holder h;
    CHECK(holder_start(&h, &sl));
    set_beacon_word(&sl, 0);
    int waited = seqlock_write_lock_timed(&sl, GIVE_UP_NS);
    uint64_t seq = seqlock_sequence(&sl);
    holder_release(&h);
    int later = seqlock_write_lock_timed(&sl, 0);
    if (later == 0) {
        write_sequnlock(&sl);
    }
    CHECK(waited == EINVAL);
    CHECK(seq & 1u); /* the holder's section, still open */
    CHECK(later == 0 && seqlock_sequence(&sl) == seq + 3);
}

static void
test_a_live_holder_is_waited_for_however_long_it_holds(void)
{
    /* Held well past the stuck bound (1 s), by a thread asleep in its
     * section: waited for, never called corrupt. */
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    struct holder h;
    memset(&h, 0, sizeof h);
    h.sl = &sl;
    h.hold_ns = 1500 * MS;
    CHECK(holder_run(&h));
    int waited = seqlock_write_lock_timed(&sl, GIVE_UP_NS);
    int64_t unlocked_at = atomic_load(&h.unlocked_at_ns);
    if (waited == 0) {
        write_sequnlock(&sl);
    }
    pthread_join(h.thread, NULL);
    CHECK(waited == 0);
    CHECK(unlocked_at != 0);
}

static void
test_a_beacon_whose_dead_holder_was_unmarked_is_einval(void)
{
    /* A holder died in its section (the kernel marked its beacon); a
     * co-tenant writes the dead thread's id back over the mark: the lock
     * "held" by a thread /proc says is gone. */
    struct shared_record *rec = record_left_locked_by_dead_child(
        WRITE_SECTION);
    CHECK(rec != NULL);
    uint32_t tid = atomic_load(&rec->lock.owner.tid);
    set_beacon_word(&rec->lock, tid);
    int waited = seqlock_write_lock_timed(&rec->lock, GIVE_UP_NS);
    if (waited == 0 || waited == EOWNERDEAD) {
        write_sequnlock(&rec->lock);
    }
    shared_record_free(rec);
    CHECK(tid != 0);
    CHECK(waited == EINVAL);
}

static void
test_a_beacon_forged_to_name_a_stopped_thread_is_waited_for(void)
{
    /* The one thread that could end "word free, beacon held" is stopped
     * (SIGSTOP): held up, as an honest taker may be, so it is waited for
     * (here, to the timeout), not called corrupt. */
    seqlock_t *sl = mmap(NULL, sizeof *sl, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sl != MAP_FAILED);
    pid_t pid = start_child(idle_until_killed, NULL);
    int status = 0;
    int stopped = pid > 0 && kill(pid, SIGSTOP) == 0
                  && waitpid(pid, &status, WUNTRACED) == pid
                  && WIFSTOPPED(status);
    int err = -1;
    if (stopped && seqlock_init(sl) == 0) {
        set_beacon_word(sl, (uint32_t)pid);
        err = seqlock_lock_excl_timed(sl, 1500 * MS);
        if (err == 0 || err == EOWNERDEAD) {
            seqlock_unlock(sl);
        }
    }
    kill_child(pid);
    munmap(sl, sizeof *sl);
    CHECK(stopped);
    CHECK(err == ETIMEDOUT);
}

static void
test_a_wait_through_death_is_not_told_eownerdead(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    atomic_store(&sl.seqcount.sequence, 5);
    atomic_store(&sl.abandoned, 1);
    uint64_t now = 0;
    int told = seqlock_wait_for_change_flags(&sl, 4, 0, NULL, 0, &now);
    int through = seqlock_wait_for_change_flags(
        &sl, 4, 20 * MS, NULL, SEQLOCK_WAIT_THROUGH_DEATH, &now);
    CHECK(told == EOWNERDEAD);
    CHECK(through == ETIMEDOUT);
}

struct read_only_waiter {
    const seqlock_t *sl;
    int err;
    uint64_t now;
};

static void *
read_only_waiter_main(void *arg)
{
    struct read_only_waiter *w = arg;
    w->err = seqlock_wait_for_change_flags(
        w->sl, 0, GIVE_UP_NS, NULL,
        SEQLOCK_WAIT_READ_ONLY | SEQLOCK_WAIT_THROUGH_DEATH, &w->now);
    return NULL;
}

static void
test_a_read_only_waiter_writes_nothing_and_sees_the_news(void)
{
    /* One page mapped twice: writable for the writer, read-only for the
     * waiter, which would die of SIGSEGV if it wrote (announced itself). */
    int fd = memfd_create("seqlock-read-only", 0);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, 4096) == 0);
    seqlock_t *rw = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                         0);
    const seqlock_t *ro = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(rw != MAP_FAILED && ro != MAP_FAILED);
    CHECK(seqlock_init(rw) == 0);
    uint64_t wake_from = atomic_load(&rw->wake_from);
    struct read_only_waiter w = {ro, -1, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, read_only_waiter_main, &w) == 0);
    sleep_ms(30);
    write_seqlock(rw);
    write_sequnlock(rw);
    pthread_join(t, NULL);
    uint64_t announced = atomic_load(&rw->wake_from);
    munmap(rw, 4096);
    munmap((void *)ro, 4096);
    CHECK(w.err == 0 && w.now == 2);
    CHECK(announced == wake_from); /* nothing written */
}

static void
test_record_matches_refuses_a_beacon_of_another_kind(void)
{
    size_t size;
    record_header *h = one_field_record(&size);
    CHECK(h != NULL);
    int good = one_field_record_matches(h, size);
    h->lock.beacon.__data.__kind = 0x40;
    int bad = one_field_record_matches(h, size);
    free(h);
    CHECK(good == RECORD_MATCHES);
    CHECK(bad == RECORD_BROKEN_LOCK);
}

/* ---- registration ---- */

static const struct test tests[] = {
    TEST(test_what_a_thread_holds_does_not_rest_on_the_holder_word, PLAIN),
    TEST(test_another_threads_lock_is_not_mine_whatever_the_holder_word_says,
         PLAIN),
    TEST(test_a_section_closes_at_its_opening_count_plus_2_whatever_the_count_says,
         PLAIN),
    TEST(test_a_beacon_of_another_kind_is_einval_not_handed_to_glibc, PLAIN),
    TEST(test_a_beacon_word_rewritten_during_a_section_is_still_released,
         ROBUST_LIST),
    TEST(test_a_ready_word_rewritten_never_makes_a_taker_spin, PLAIN),
    TEST(test_a_used_lock_whose_ready_word_says_initialising_is_einval,
         PLAIN),
    TEST(test_a_free_word_under_a_beacon_forged_held_is_einval_not_waited_for,
         PLAIN),
    TEST(test_a_gap_whose_live_holder_sleeps_is_einval_and_the_holder_goes_on,
         PLAIN),
    TEST(test_a_live_holder_is_waited_for_however_long_it_holds, PLAIN),
    TEST(test_a_beacon_whose_dead_holder_was_unmarked_is_einval,
         FORKS_OR_SIGNALS),
    TEST(test_a_beacon_forged_to_name_a_stopped_thread_is_waited_for,
         FORKS_OR_SIGNALS),
    TEST(test_a_wait_through_death_is_not_told_eownerdead, PLAIN),
    TEST(test_a_read_only_waiter_writes_nothing_and_sees_the_news, PLAIN),
    TEST(test_record_matches_refuses_a_beacon_of_another_kind, PLAIN),
};
REGISTER_TESTS(tests)
