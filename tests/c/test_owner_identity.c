/*
 * test_owner_identity.c - how seqlock.h tells a live holder from a dead
 * one: a live writer in another PID namespace is never taken over (nor by
 * a waiter with its thread id killed while asleep), a dead one is seen
 * dead though its pid was reused (an earlier core compared thread ids
 * across namespaces and after reuse), and a holder found in a gap of its
 * lock (its lock word taken, its beacon not yet) is taken over at once
 * when dead in our PID namespace, never while alive, and after the gap
 * timeout from another.
 */
#include "harness.h"

/* ==== PID namespaces and PID reuse ==== */

/* Start body(arg) as pid 1 of a new PID namespace.  A process that
 * unshares CLONE_NEWPID stays where it is and only its next child starts
 * the new namespace, so this goes through an intermediate child in ours,
 * which waits for the body and exits as it did: pass its pid, returned
 * here, to child_passed().  If the intermediate dies (its own hang guard),
 * the kernel kills the namespace's init (PR_SET_PDEATHSIG) and with it the
 * whole namespace.  As an init, the body ignores its own default-action
 * signals: an abort() there ends in SIGSEGV (exit 139).  Returns -1 with
 * the test marked skipped if namespaces are not permitted here (EPERM,
 * EINVAL), or failed otherwise. */
static pid_t
start_in_new_pid_namespace(void (*body)(void *), void *arg)
{
    int pipefd[2];
    if (pipe(pipefd) != 0) {
        current_test_failed = 1;
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
        alarm(CHILD_GUARD_S);
        int err = unshare(CLONE_NEWPID) == 0 ? 0 : errno;
        pid_t init = err ? -1 : fork();
        if (init == 0) {
            close(pipefd[1]);
            (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
            run_body(body, arg);
        }
        if (init < 0 && err == 0) {
            err = errno;
        }
        ssize_t ignored = write(pipefd[1], &err, sizeof err);
        (void)ignored;
        int status = 0;
        if (err != 0) {
            _exit(0); /* the parent reads why from the pipe */
        }
        _exit(waitpid(init, &status, 0) == init ? exit_code_of(status) : 1);
    }
    close(pipefd[1]);
    int err = -1;
    ssize_t got = pid > 0 ? read(pipefd[0], &err, sizeof err) : -1;
    close(pipefd[0]);
    if (got == (ssize_t)sizeof err && err == 0) {
        return pid;
    }
    reap(pid);
    if (got == (ssize_t)sizeof err && (err == EPERM || err == EINVAL)) {
        snprintf(skip_reason, SKIP_REASON_SIZE,
                 "unshare(CLONE_NEWPID): %s", strerror(err));
        current_test_skipped = 1;
    }
    else {
        fprintf(stderr, "no new PID namespace: %s\n",
                got == (ssize_t)sizeof err ? strerror(err) : "no answer");
        current_test_failed = 1;
    }
    return -1;
}

/* Make this PID namespace's next new process get pid `pid`.  Returns 0 or
 * an errno (ns_last_pid needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE). */
static int
next_pid_will_be(pid_t pid)
{
    int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
    if (fd < 0) {
        return errno;
    }
    char text[16];
    int n = snprintf(text, sizeof text, "%d", (int)pid - 1);
    int err = write(fd, text, (size_t)n) == n ? 0 : errno;
    close(fd);
    return err;
}

static void
write_record(struct shared_record *rec, uint64_t a, int slowly)
{
    for (int i = 0; i < WORDS; i++) {
        uint64_t word = a + (uint64_t)i * K;
        seqlock_write_copy(&rec->data[i], &word, sizeof word);
        if (slowly && i == WORDS / 2) {
            sleep_ms(1); /* half written: readers must wait or retry */
        }
    }
}

/* In a new PID namespace: take rec's lock (step 1) and keep it until
 * step 2. */
static void
hold_until_step_2(void *arg)
{
    struct shared_record *rec = arg;
    CHECK(getpid() == 1);
    write_seqlock(&rec->lock);
    step_to(rec, 1);
    int told = await_step(rec, 2);
    write_sequnlock(&rec->lock);
    CHECK(told);
}

static void
test_writer_in_another_pid_namespace_is_not_taken_over(void)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    pid_t ns = start_in_new_pid_namespace(hold_until_step_2, rec);
    if (ns < 0) {
        shared_record_free(rec);
        return;
    }
    uint64_t seq;
    int held = await_step(rec, 1);
    int as_writer = seqlock_write_lock_timed(&rec->lock, 200 * MS);
    int as_reader = seqlock_read_begin_timed(&rec->lock, 200 * MS, &seq);
    step_to(rec, 2);
    int passed = child_passed(ns);
    uint64_t after = seqlock_sequence(&rec->lock);
    shared_record_free(rec);
    CHECK(held);
    CHECK(as_writer == ETIMEDOUT);
    CHECK(as_reader == ETIMEDOUT);
    CHECK(passed);
    CHECK(after == 2); /* only the holder's own section, closed by it */
}

/* In a new PID namespace, while a writer in ours is slow inside its
 * sections: read until step 2; no accepted snapshot may be torn. */
static void
read_until_step_2(void *arg)
{
    struct shared_record *rec = arg;
    long reads = 0, retries = 0, torn = 0;
    step_to(rec, 1);
    while (atomic_load(&rec->step) < 2) {
        uint64_t snap[WORDS];
        unsigned seq;
        for (;;) {
            seq = read_seqbegin(&rec->lock);
            seqlock_read_copy(snap, rec->data, sizeof snap);
            if (!read_seqretry(&rec->lock, seq)) {
                break;
            }
            retries++;
        }
        reads++;
        torn += !well_formed(snap);
    }
    printf("  reader in its own PID namespace: %ld snapshots, %ld retries, "
           "%ld torn\n", reads, retries, torn);
    CHECK(torn == 0);
    CHECK(reads > 0);
}

static void
test_reader_in_another_pid_namespace_accepts_no_torn_snapshot(void)
{
    enum { SECTIONS = 100 };
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    write_record(rec, 0, 0);
    pid_t ns = start_in_new_pid_namespace(read_until_step_2, rec);
    if (ns < 0) {
        shared_record_free(rec);
        return;
    }
    int reading = await_step(rec, 1);
    for (uint64_t a = 1; reading && a <= SECTIONS; a++) {
        write_seqlock(&rec->lock);
        write_record(rec, a, 1);
        write_sequnlock(&rec->lock);
        sleep_ms(1);
    }
    step_to(rec, 2);
    int passed = child_passed(ns);
    shared_record_free(rec);
    CHECK(reading);
    CHECK(passed);
}

/* Pid 1 of a second PID namespace, while pid 1 of the first holds the
 * lock: its thread id is the holder's, its token is not. */
static void
try_to_take_the_other_pid_1s_lock(void *arg)
{
    struct shared_record *rec = arg;
    CHECK(getpid() == 1);
    int held = await_step(rec, 1);
    int mine = seqlock_held_by_me(&rec->lock);
    int err = seqlock_write_lock_timed(&rec->lock, 200 * MS);
    step_to(rec, 2);
    CHECK(held);
    CHECK(!mine);
    CHECK(err == ETIMEDOUT);
}

static void
try_to_unlock_the_other_pid_1s_lock(void *arg)
{
    struct shared_record *rec = arg;
    CHECK(getpid() == 1);
    int held = await_step(rec, 1);
    int closed = seqlock_close_section(&rec->lock);
    int unlocked = seqlock_unlock(&rec->lock);
    uint64_t seq = seqlock_sequence(&rec->lock);
    step_to(rec, 2);
    CHECK(held);
    CHECK(closed == EPERM);
    CHECK(unlocked == EPERM);
    CHECK(seq == 1);
}

/* Run pid 1 of one new namespace holding rec's lock against pid 1 of
 * another running body. */
static void
pid_1_against_pid_1(void (*body)(void *))
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    pid_t holder = start_in_new_pid_namespace(hold_until_step_2, rec);
    pid_t other = holder < 0 ? -1 : start_in_new_pid_namespace(body, rec);
    if (other < 0) {
        step_to(rec, 2);
        reap(holder);
        shared_record_free(rec);
        return;
    }
    int other_passed = child_passed(other);
    int holder_passed = child_passed(holder);
    shared_record_free(rec);
    CHECK(other_passed);
    CHECK(holder_passed);
}

static void
test_pid_1_of_another_namespace_does_not_take_pid_1s_lock(void)
{
    pid_1_against_pid_1(try_to_take_the_other_pid_1s_lock);
}

static void
test_pid_1_of_another_namespace_cannot_unlock_pid_1s_lock(void)
{
    pid_1_against_pid_1(try_to_unlock_the_other_pid_1s_lock);
}

/* As pid 1 of a new namespace, sleep waiting for the other pid 1's lock
 * until killed. */
static void
wait_for_the_other_pid_1s_lock(void *arg)
{
    struct shared_record *rec = arg;
    CHECK(getpid() == 1);
    CHECK(await_step(rec, 1));
    (void)seqlock_write_lock_timed(&rec->lock, GIVE_UP_NS);
}

/* The kernel marks a robust mutex dead when a thread dies with it as its
 * pending lock operation and the word holds the thread's own id: a waiter
 * asleep inside pthread_mutex_lock() is such a thread, and pid 1 of one
 * namespace has pid 1 of another's id.  Writers never sleep there. */
static void
test_waiter_with_the_holders_id_killed_asleep_leaves_the_lock_alive(void)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    pid_t holder = start_in_new_pid_namespace(hold_until_step_2, rec);
    pid_t waiter = holder < 0 ? -1
                              : start_in_new_pid_namespace(
                                    wait_for_the_other_pid_1s_lock, rec);
    if (waiter < 0) {
        step_to(rec, 2);
        if (holder >= 0) {
            reap(holder);
        }
        shared_record_free(rec);
        return;
    }
    int asleep = await_asleep(writer_is_asleep, &rec->lock);
    kill_child(waiter);
    sleep_ms(200); /* its pid 1 dies of the parent's death signal */
    int marked_dead = seqlock_owner_died(&rec->lock);
    int err = seqlock_write_lock_timed(&rec->lock, 200 * MS);
    if (err == 0 || err == EOWNERDEAD) {
        write_sequnlock(&rec->lock);
    }
    step_to(rec, 2);
    int holder_passed = child_passed(holder);
    shared_record_free(rec);
    CHECK(asleep);
    CHECK(!marked_dead);
    CHECK(err == ETIMEDOUT);
    CHECK(holder_passed);
}

/* As pid 1 of a new namespace: a writer (pid 2) is killed holding the
 * lock and reaped; its pid goes to an unrelated live process; only then do
 * a reader and a writer come, and both hear EOWNERDEAD at once. */
static void
reuse_a_dead_writers_pid(void *arg)
{
    struct shared_record *rec = arg;
    pid_t dead = child_dies_holding(rec, WRITE_SECTION, SIGKILL);
    CHECK(reap(dead));
    int err = next_pid_will_be(dead);
    if (err != 0) {
        SKIP("cannot write /proc/sys/kernel/ns_last_pid: %s", strerror(err));
    }
    pid_t reuser = start_child(idle_until_killed, NULL);
    if (reuser != dead) {
        kill_child(reuser);
        SKIP("the new process got pid %d, not the dead writer's %d",
             (int)reuser, (int)dead);
    }
    uint64_t seq;
    int64_t start = now_ns();
    int as_reader = seqlock_read_begin_timed(&rec->lock, GIVE_UP_NS, &seq);
    int64_t reader_took = now_ns() - start;
    start = now_ns();
    int as_writer = seqlock_write_lock_timed(&rec->lock, GIVE_UP_NS);
    int64_t writer_took = now_ns() - start;
    int reuser_alive = kill(reuser, 0) == 0;
    kill_child(reuser);
    printf("  dead writer's pid %d reused: reader told EOWNERDEAD in %.1f "
           "us, writer in %.1f us\n", (int)dead, us_of(reader_took),
           us_of(writer_took));
    CHECK(reuser_alive);
    CHECK(as_reader == EOWNERDEAD);
    CHECK(reader_took < PROMPTLY_NS);
    CHECK(as_writer == EOWNERDEAD);
    CHECK(writer_took < PROMPTLY_NS);
    CHECK(seqlock_sequence(&rec->lock) == 1);
    write_sequnlock(&rec->lock);
}

static void
test_dead_writer_whose_pid_was_reused_is_still_seen_dead(void)
{
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    pid_t ns = start_in_new_pid_namespace(reuse_a_dead_writers_pid, rec);
    int passed = ns < 0 || child_passed(ns);
    shared_record_free(rec);
    CHECK(passed);
}

/* ==== the gaps: a holder between its lock word and its beacon ==== */

/* Make sl look held by `token` in a gap: the word set, the beacon free
 * (as between a holder's compare-and-swap and its beacon). */
static void
enter_a_gap_as(seqlock_t *sl, uint64_t token)
{
    atomic_store(&sl->holder, token);
    atomic_fetch_add(&sl->gaps, 1);
}

static void
test_a_holder_gone_in_its_gap_is_taken_over_after_the_gap_timeout(void)
{
    /* Nothing to repair (a gap's holder opened no section): taken, not
     * taken over. */
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    enter_a_gap_as(&sl, 42);
    int early = seqlock_lock_excl_timed(&sl, 0); /* starts watching */
    int later = seqlock_lock_excl_timed(&sl, GIVE_UP_NS);
    if (later == EOWNERDEAD || later == 0) {
        seqlock_unlock(&sl);
    }
    CHECK(early == ETIMEDOUT);
    CHECK(later == 0);
    CHECK(seqlock_sequence(&sl) == 0);
}

static void
test_a_gap_that_leaves_the_count_odd_is_taken_over_for_repair(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    atomic_store(&sl.seqcount.sequence, 7); /* as no live holder leaves it */
    enter_a_gap_as(&sl, 42);
    int err = seqlock_lock_excl_timed(&sl, GIVE_UP_NS);
    if (err == EOWNERDEAD || err == 0) {
        seqlock_close_section(&sl);
        seqlock_unlock(&sl);
    }
    CHECK(err == EOWNERDEAD);
    CHECK(seqlock_sequence(&sl) == 8);
}

static void
test_a_holder_seen_in_two_different_gaps_is_not_taken_for_gone(void)
{
    /* One holder's consecutive sections pass through gaps of their own: a
     * waiter that saw it in one gap and, longer than the gap timeout
     * later, in another must not add the two up (once, a live writer lost
     * its lock that way). */
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    enter_a_gap_as(&sl, 42);
    int first = seqlock_lock_excl_timed(&sl, 0); /* starts watching */
    sleep_ms(5);
    enter_a_gap_as(&sl, 42); /* its next section's gap */
    int second = seqlock_lock_excl_timed(&sl, 0);
    if (second == EOWNERDEAD || second == 0) {
        seqlock_unlock(&sl);
    }
    CHECK(first == ETIMEDOUT);
    CHECK(second == ETIMEDOUT);
}

/* A holder found in a gap (word held, beacon free): if it recorded that it
 * lives in our PID namespace, /proc tells whether it is alive; a dead one
 * is taken over at once, a live one never (it is preempted or stopped in
 * its gap, or its beacon's word was rewritten: it will finish); one of
 * another namespace, or whose record is not its own, after 100 ms. */
static uint64_t
our_pid_namespace(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* /proc/self/task/<tid>/stat's start time (field 22) of thread tid. */
static uint64_t
thread_started_at(pid_t tid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    for (int field = 2; p != NULL && field < 22; field++) {
        p = strchr(p + 1, ' ');
    }
    return p == NULL ? 0 : strtoull(p + 1, NULL, 10);
}

static void
enter_a_gap_of(seqlock_t *sl, uint64_t token, uint64_t pid_ns, pid_t tid,
               uint64_t started)
{
    atomic_store(&sl->owner.token, 0);
    atomic_store(&sl->owner.pid_ns, pid_ns);
    atomic_store(&sl->owner.started, started);
    atomic_store(&sl->owner.tid, (uint32_t)tid);
    atomic_store(&sl->owner.token, token);
    enter_a_gap_as(sl, token);
}

static void
test_a_dead_gap_holder_of_our_namespace_is_taken_over_at_once(void)
{
    uint64_t ns = our_pid_namespace();
    if (ns == 0) {
        SKIP("/proc/self/ns/pid cannot be read here");
    }
    pid_t child = fork();
    if (child == 0) {
        _exit(0);
    }
    CHECK(child > 0);
    uint64_t started = thread_started_at(child); /* a zombie's, till reaped */
    CHECK(reap(child));
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    enter_a_gap_of(&sl, 41, ns, child, started);
    int64_t t0 = now_ns();
    int err = seqlock_lock_excl_timed(&sl, 50 * MS);
    int64_t took = now_ns() - t0;
    if (err == 0 || err == EOWNERDEAD) {
        seqlock_unlock(&sl);
    }
    printf("  gap of a dead holder of our namespace taken over after %.1f "
           "us\n", us_of(took));
    CHECK(err == 0);
}

static void
test_a_live_gap_holder_of_our_namespace_is_never_taken_over(void)
{
    uint64_t ns = our_pid_namespace();
    if (ns == 0) {
        SKIP("/proc/self/ns/pid cannot be read here");
    }
    pid_t me = (pid_t)syscall(SYS_gettid);
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    enter_a_gap_of(&sl, 42, ns, me, thread_started_at(me));
    int err = seqlock_lock_excl_timed(&sl, 150 * MS); /* past GAP_NS */
    if (err == 0 || err == EOWNERDEAD) {
        seqlock_unlock(&sl);
    }
    CHECK(err == ETIMEDOUT);
}

static void
test_a_gap_holder_of_another_namespace_is_taken_over_after_the_gap_timeout(
    void)
{
    uint64_t ns = our_pid_namespace();
    pid_t me = (pid_t)syscall(SYS_gettid);
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    enter_a_gap_of(&sl, 43, ns + 1, me, thread_started_at(me));
    int early = seqlock_lock_excl_timed(&sl, 50 * MS);
    if (early == 0 || early == EOWNERDEAD) {
        /* (a thread descheduled past GAP_NS on a loaded machine) */
        seqlock_unlock(&sl); /* leave nothing held to the next test */
    }
    int later = early == ETIMEDOUT ? seqlock_lock_excl_timed(&sl, GIVE_UP_NS)
                                   : ETIMEDOUT;
    if (later == 0 || later == EOWNERDEAD) {
        seqlock_unlock(&sl);
    }
    CHECK(early == ETIMEDOUT);
    CHECK(later == 0);
}

static void
test_a_holder_records_who_it_is_when_it_takes_the_word(void)
{
    uint64_t ns = our_pid_namespace();
    if (ns == 0) {
        SKIP("/proc/self/ns/pid cannot be read here");
    }
    pid_t me = (pid_t)syscall(SYS_gettid);
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    CHECK(seqlock_lock_excl_timed(&sl, 0) == 0);
    struct seqlock_owner o;
    memcpy(&o, &sl.owner, sizeof o);
    seqlock_unlock(&sl);
    CHECK(atomic_load(&o.token) == seqlock_self());
    CHECK(atomic_load(&o.pid_ns) == ns);
    CHECK(atomic_load(&o.tid) == (uint32_t)me);
    CHECK(atomic_load(&o.started) == thread_started_at(me));
}

static void
test_a_forks_child_records_itself_not_its_parents_thread(void)
{
    /* After fork() the child's only thread has another id and start time:
     * a record naming the parent's would make a waiter think the child,
     * dead in a gap, alive (the parent's thread lives on). */
    uint64_t ns = our_pid_namespace();
    if (ns == 0) {
        SKIP("/proc/self/ns/pid cannot be read here");
    }
    struct shared_record *rec = shared_record_new();
    CHECK(rec != NULL);
    CHECK(seqlock_lock_excl_timed(&rec->lock, 0) == 0); /* the parent's */
    seqlock_unlock(&rec->lock);
    pid_t child = fork();
    if (child == 0) {
        int ok = seqlock_lock_excl_timed(&rec->lock, GIVE_UP_NS) == 0;
        if (ok) {
            seqlock_unlock(&rec->lock);
        }
        _exit(ok ? 0 : 1);
    }
    CHECK(child > 0);
    CHECK(child_passed(child));
    uint32_t recorded = atomic_load(&rec->lock.owner.tid);
    shared_record_free(rec);
    CHECK(recorded == (uint32_t)child);
}

static void *
hold_for_a_while(void *arg)
{
    seqlock_t *sl = arg;
    if (seqlock_write_lock_timed(sl, 0) != 0) {
        return NULL;
    }
    sleep_ms(300);
    seqlock_close_section(sl);
    seqlock_unlock(sl);
    return NULL;
}

static void
test_an_owner_died_bit_written_into_a_live_holders_beacon_is_no_death(void)
{
    /* The kernel's mark clears the dead thread's id from the word; a word
     * with the bit and an id is another process's scribble: glibc would
     * hand the live holder's beacon to the next taker. */
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, hold_for_a_while, &sl) == 0);
    while (!seqlock_is_locked(&sl)) {
        sched_yield();
    }
    sleep_ms(20);
    __atomic_fetch_or(&sl.beacon.__data.__lock, FUTEX_OWNER_DIED,
                      __ATOMIC_RELAXED);
    int died = seqlock_owner_died(&sl);
    int err = seqlock_lock_excl_timed(&sl, 50 * MS);
    if (err == 0 || err == EOWNERDEAD) {
        seqlock_unlock(&sl);
    }
    pthread_join(t, NULL);
    int after = seqlock_write_lock_timed(&sl, GIVE_UP_NS);
    if (after == 0 || after == EOWNERDEAD) {
        write_sequnlock(&sl);
    }
    CHECK(!died);
    CHECK(err == ETIMEDOUT);
    CHECK(after == 0);
}

static void
test_a_ready_word_zeroed_on_a_used_lock_never_remakes_its_beacon(void)
{
    seqlock_t sl;
    CHECK(seqlock_init(&sl) == 0);
    write_seqlock(&sl);
    write_sequnlock(&sl);
    atomic_store(&sl.ready, 0);
    int err = seqlock_lock_excl_timed(&sl, 0);
    CHECK(err == EINVAL);
}

/* ---- registration ---- */

static const struct test tests[] = {
    TEST(test_writer_in_another_pid_namespace_is_not_taken_over,
         FORKS_OR_SIGNALS),
    TEST(test_reader_in_another_pid_namespace_accepts_no_torn_snapshot,
         FORKS_OR_SIGNALS),
    TEST(test_a_holder_gone_in_its_gap_is_taken_over_after_the_gap_timeout,
         PLAIN),
    TEST(test_a_gap_that_leaves_the_count_odd_is_taken_over_for_repair, PLAIN),
    TEST(test_a_holder_seen_in_two_different_gaps_is_not_taken_for_gone,
         PLAIN),
    TEST(test_a_dead_gap_holder_of_our_namespace_is_taken_over_at_once,
         FORKS_OR_SIGNALS),
    TEST(test_a_live_gap_holder_of_our_namespace_is_never_taken_over, PLAIN),
    TEST(test_a_gap_holder_of_another_namespace_is_taken_over_after_the_gap_timeout,
         PLAIN),
    TEST(test_a_holder_records_who_it_is_when_it_takes_the_word, PLAIN),
    TEST(test_a_forks_child_records_itself_not_its_parents_thread,
         FORKS_OR_SIGNALS),
    TEST(test_an_owner_died_bit_written_into_a_live_holders_beacon_is_no_death,
         PLAIN),
    TEST(test_a_ready_word_zeroed_on_a_used_lock_never_remakes_its_beacon,
         PLAIN),
    TEST(test_waiter_with_the_holders_id_killed_asleep_leaves_the_lock_alive,
         FORKS_OR_SIGNALS),
    TEST(test_pid_1_of_another_namespace_does_not_take_pid_1s_lock,
         FORKS_OR_SIGNALS),
    TEST(test_pid_1_of_another_namespace_cannot_unlock_pid_1s_lock,
         FORKS_OR_SIGNALS),
    TEST(test_dead_writer_whose_pid_was_reused_is_still_seen_dead,
         FORKS_OR_SIGNALS | ROBUST_LIST),
};
REGISTER_TESTS(tests)
