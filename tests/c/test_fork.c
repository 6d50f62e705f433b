/*
 * test_fork.c - seqlock.h's locks across fork(): a process-private lock
 * tracked with seqlock_track_private() stays the forking thread's in the
 * child, another thread's section or locking pass is undone and released
 * there, tracking twice is harmless, and an untracked shared lock stays
 * with the parent's holder.
 */
#include "harness.h"

/* ==== fork and process-private locks ==== */

/* A process-private lock tracked for fork repair; its undo counts, and
 * notes whether a section was open when it was called. */
struct tracked {
    seqlock_t lock;
    seqlock_private_t entry;
    int undos;
    int undo_saw_a_section;
};

static void
count_undo(void *arg)
{
    struct tracked *t = arg;
    t->undos++;
    t->undo_saw_a_section = (int)(seqlock_sequence(&t->lock) & 1u);
}

static void
track(struct tracked *t)
{
    seqlock_track_private(&t->entry, &t->lock, count_undo, t);
}

/* Fork, with body(t) run in the child while the lock is as the caller
 * left it; then untrack t in the parent.  Nonzero if the child passed. */
static int
child_of_fork_passes(void (*body)(void *), struct tracked *t)
{
    pid_t child = start_child(body, t);
    seqlock_untrack_private(&t->entry);
    return child_passed(child);
}

static void
forking_threads_section_goes_on(void *arg)
{
    struct tracked *t = arg;
    CHECK(seqlock_held_by_me(&t->lock));
    CHECK(seqlock_sequence(&t->lock) == 1);
    write_sequnlock(&t->lock); /* aborts if the child lost the lock */
    CHECK(seqlock_sequence(&t->lock) == 2);
    CHECK(!seqlock_is_locked(&t->lock));
    CHECK(t->undos == 0);
}

static void
test_fork_leaves_the_forking_threads_lock_held_by_it_in_the_child(void)
{
    static struct tracked t = {.lock = SEQLOCK_UNLOCKED};
    track(&t);
    write_seqlock(&t.lock);
    int passed = child_of_fork_passes(forking_threads_section_goes_on, &t);
    write_sequnlock(&t.lock);
    CHECK(passed);
}

static void
other_threads_section_was_undone(void *arg)
{
    struct tracked *t = arg;
    CHECK(t->undos == 1);
    CHECK(seqlock_sequence(&t->lock) == 2);
    CHECK(!seqlock_is_locked(&t->lock));
    CHECK(write_tryseqlock(&t->lock));
    write_sequnlock(&t->lock);
}

static void
test_fork_undoes_and_releases_another_threads_section_in_the_child(void)
{
    static struct tracked t = {.lock = SEQLOCK_UNLOCKED};
    struct holder h;
    CHECK(holder_start(&h, &t.lock));
    track(&t);
    int passed = child_of_fork_passes(other_threads_section_was_undone, &t);
    holder_release(&h);
    CHECK(passed);
}

static void
other_threads_locking_pass_was_released(void *arg)
{
    struct tracked *t = arg;
    CHECK(t->undos == 1 && !t->undo_saw_a_section);
    CHECK(seqlock_sequence(&t->lock) == 0);
    CHECK(!seqlock_is_locked(&t->lock));
}

static void
test_fork_releases_another_threads_locking_pass_after_its_repair(void)
{
    static struct tracked t = {.lock = SEQLOCK_UNLOCKED};
    struct holder h = {.sl = &t.lock, .excl = 1};
    CHECK(holder_run(&h));
    track(&t);
    int passed = child_of_fork_passes(other_threads_locking_pass_was_released,
                                      &t);
    holder_release(&h);
    CHECK(passed);
}

static void
new_thread_waits_for_forking_threads_section(void *arg)
{
    struct tracked *t = arg;
    struct waiter r = {.sl = &t->lock};
    CHECK(start_waiter(&r, reader_waiter_main));
    sleep_ms(100);
    int waiting_still = atomic_load(&r.done_at_ns) == 0;
    int64_t unlocked_at = now_ns();
    write_sequnlock(&t->lock);
    pthread_join(r.thread, NULL);
    CHECK(waiting_still);
    CHECK(r.seq == 2);
    CHECK(atomic_load(&r.done_at_ns) >= unlocked_at);
}

static void
test_thread_started_in_the_child_waits_for_the_forking_threads_section(void)
{
    static struct tracked t = {.lock = SEQLOCK_UNLOCKED};
    track(&t);
    write_seqlock(&t.lock);
    int passed =
        child_of_fork_passes(new_thread_waits_for_forking_threads_section, &t);
    write_sequnlock(&t.lock);
    CHECK(passed);
}

static void
twice_tracked_locks_repaired_once(void *arg)
{
    struct tracked *t = arg; /* t[0]: the forking thread's; t[1]: not */
    CHECK(seqlock_held_by_me(&t[0].lock));
    write_sequnlock(&t[0].lock);
    CHECK(t[0].undos == 0);
    CHECK(t[1].undos == 1);
    CHECK(seqlock_sequence(&t[1].lock) == 2);
    CHECK(!seqlock_is_locked(&t[1].lock));
}

static void
test_tracking_a_lock_twice_is_harmless(void)
{
    static struct tracked t[2] = {{.lock = SEQLOCK_UNLOCKED},
                                  {.lock = SEQLOCK_UNLOCKED}};
    static seqlock_private_t again[2];
    struct holder h;
    CHECK(holder_start(&h, &t[1].lock));
    for (int i = 0; i < 2; i++) {
        track(&t[i]);
        seqlock_track_private(&again[i], &t[i].lock, count_undo, &t[i]);
    }
    write_seqlock(&t[0].lock);
    pid_t child = start_child(twice_tracked_locks_repaired_once, t);
    for (int i = 0; i < 2; i++) {
        seqlock_untrack_private(&t[i].entry);
        seqlock_untrack_private(&again[i]);
    }
    write_sequnlock(&t[0].lock);
    holder_release(&h);
    CHECK(child_passed(child));
}

static void
shared_lock_stays_held(void *arg)
{
    struct shared_record *rec = arg;
    CHECK(!seqlock_held_by_me(&rec->lock));
    CHECK(seqlock_write_lock_timed(&rec->lock, 100 * MS) == ETIMEDOUT);
}

static void
test_fork_leaves_an_untracked_shared_lock_held_by_the_parents_thread(void)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    struct holder h;
    int held = holder_start(&h, &rec->lock);
    int passed = held && child_passed(start_child(shared_lock_stays_held,
                                                  rec));
    if (held) {
        holder_release(&h);
    }
    uint64_t after = seqlock_sequence(&rec->lock);
    shared_record_free(rec);
    CHECK(held);
    CHECK(passed);
    CHECK(after == 2);
}

/* ---- registration ---- */

static const struct test tests[] = {
    TEST(test_fork_leaves_the_forking_threads_lock_held_by_it_in_the_child,
         FORKS_OR_SIGNALS),
    TEST(test_fork_undoes_and_releases_another_threads_section_in_the_child,
         FORKS_OR_SIGNALS),
    TEST(test_fork_releases_another_threads_locking_pass_after_its_repair,
         FORKS_OR_SIGNALS),
    TEST(test_thread_started_in_the_child_waits_for_the_forking_threads_section,
         FORKS_OR_SIGNALS),
    TEST(test_tracking_a_lock_twice_is_harmless, FORKS_OR_SIGNALS),
    TEST(test_fork_leaves_an_untracked_shared_lock_held_by_the_parents_thread,
         FORKS_OR_SIGNALS),
};
REGISTER_TESTS(tests)
