/*
 * harness.c - the C tests' shared helpers (declared, and described, in
 * harness.h) and the runner: main() runs the tests every test_*.c file
 * registered, in link order, and ends with "N passed, M failed, K skipped".
 */
#include "harness.h"

/* ---- the tiny harness ---- */

int current_test_failed;
int current_test_skipped;
char *skip_reason;

int64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

double
us_of(int64_t ns)
{
    return (double)ns / US;
}

void
sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * MS};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int
poll_until(int (*cond)(void *), void *arg)
{
    int64_t give_up = now_ns() + GIVE_UP_NS;
    while (!cond(arg)) {
        if (now_ns() > give_up) {
            return 0;
        }
        sleep_ms(1);
    }
    return 1;
}

/* ---- counting allocations made by signal handlers ---- */

_Thread_local volatile sig_atomic_t in_handler;
atomic_long handler_allocations;

static void
note_allocation(void)
{
    if (in_handler) {
        atomic_fetch_add(&handler_allocations, 1);
    }
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
/* The sanitizer's runtime owns malloc; it calls these hooks on every
 * allocation and release (sanitizer/allocator_interface.h). */
int __sanitizer_install_malloc_and_free_hooks(
    void (*malloc_hook)(const volatile void *, size_t),
    void (*free_hook)(const volatile void *));

static void
on_malloc(const volatile void *p, size_t n)
{
    (void)p;
    (void)n;
    note_allocation();
}

static void
on_free(const volatile void *p)
{
    (void)p;
    note_allocation();
}

void
count_allocations(void)
{
    (void)__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}
#elif defined(__GLIBC__)
/* Interpose glibc's allocator: each call is counted, then passed on to
 * glibc's own entry points. */
void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void __libc_free(void *p);

void *
malloc(size_t n)
{
    note_allocation();
    return __libc_malloc(n);
}

void *
calloc(size_t n, size_t size)
{
    note_allocation();
    return __libc_calloc(n, size);
}

void *
realloc(void *p, size_t n)
{
    note_allocation();
    return __libc_realloc(p, n);
}

void
free(void *p)
{
    note_allocation();
    __libc_free(p);
}

void
count_allocations(void)
{
}
#else
void
count_allocations(void)
{
}
#endif

/* ---- helper threads ---- */

static void *
holder_main(void *arg)
{
    struct holder *h = arg;
    if (h->excl) {
        read_seqlock_excl(h->sl);
    }
    else {
        write_seqlock(h->sl);
    }
    atomic_store(&h->token, seqlock_self());
    atomic_store(&h->held, 1);
    int64_t until = h->hold_ns ? now_ns() + h->hold_ns : INT64_MAX;
    while (!atomic_load(&h->release) && now_ns() < until) {
        sleep_ms(1);
    }
    /* Stamped before the unlock, so a waiter's finish time is later. */
    atomic_store(&h->unlocked_at_ns, now_ns());
    if (h->excl) {
        read_sequnlock_excl(h->sl);
    }
    else {
        write_sequnlock(h->sl);
    }
    return NULL;
}

static int
holder_has_lock(void *arg)
{
    return atomic_load(&((struct holder *)arg)->held);
}

int
holder_run(struct holder *h)
{
    if (pthread_create(&h->thread, NULL, holder_main, h) != 0) {
        return 0;
    }
    return poll_until(holder_has_lock, h);
}

int
holder_start(struct holder *h, seqlock_t *sl)
{
    memset(h, 0, sizeof *h);
    h->sl = sl;
    return holder_run(h);
}

void
holder_release(struct holder *h)
{
    atomic_store(&h->release, 1);
    pthread_join(h->thread, NULL);
}

void *
timed_writer_main(void *arg)
{
    struct waiter *w = arg;
    while (w->go != NULL && atomic_load(w->go) == 0) {
    }
    w->err = seqlock_write_lock_timed(w->sl, GIVE_UP_NS);
    atomic_store(&w->done_at_ns, now_ns());
    w->seq = seqlock_sequence(w->sl);
    w->held_by_me = seqlock_held_by_me(w->sl);
    if (w->err == 0 || w->err == EOWNERDEAD) {
        write_sequnlock(w->sl);
    }
    return NULL;
}

void *
reader_waiter_main(void *arg)
{
    struct waiter *w = arg;
    w->seq = read_seqbegin(w->sl);
    atomic_store(&w->done_at_ns, now_ns());
    return NULL;
}

int
start_waiter(struct waiter *w, void *(*main_fn)(void *))
{
    return pthread_create(&w->thread, NULL, main_fn, w) == 0;
}

/* The count's low half, where readers sleep (as parking.h's low_half()). */
static _Atomic uint32_t *
count_low_half(seqlock_t *sl)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return (_Atomic uint32_t *)((char *)&sl->seqcount.sequence + 4);
#else
    return (_Atomic uint32_t *)&sl->seqcount.sequence;
#endif
}

static void *
sleeper_main(void *arg)
{
    struct sleeper *s = arg;
    seqlock_t *sl = s->sl;
    uint64_t seq = seqlock_sequence(sl);
    uint64_t cur = atomic_load(&sl->wake_from);
    while (cur < seq && !atomic_compare_exchange_weak(&sl->wake_from, &cur,
                                                      seq)) {
    }
    atomic_thread_fence(memory_order_seq_cst);
    int64_t give_up = now_ns() + GIVE_UP_NS;
    while ((seq & 1u) && seqlock_sequence(sl) == seq) {
        int64_t left = give_up - now_ns();
        if (left <= 0) {
            break;
        }
        struct timespec ts = {(time_t)(left / SEC), (long)(left % SEC)};
        (void)syscall(SYS_futex, count_low_half(sl), FUTEX_WAIT,
                      (uint32_t)seq, &ts, NULL, 0);
    }
    atomic_store(&s->done_at_ns, now_ns());
    return NULL;
}

int
reader_is_asleep(void *arg)
{
    seqlock_t *sl = arg;
    uint64_t seq = seqlock_sequence(sl);
    return (seq & 1u) && atomic_load(&sl->wake_from) >= seq;
}

int
writer_is_asleep(void *arg)
{
#if defined(__GLIBC__)
    seqlock_t *sl = arg;
    return (__atomic_load_n(&sl->beacon.__data.__lock, __ATOMIC_RELAXED)
            & FUTEX_WAITERS) != 0;
#else
    (void)arg;
    sleep_ms(100);
    return 1;
#endif
}

int
await_asleep(int (*is_asleep)(void *), seqlock_t *sl)
{
    int asleep = poll_until(is_asleep, sl);
    sleep_ms(20);
    return asleep;
}

int
sleeper_start(struct sleeper *s, seqlock_t *sl)
{
    memset(s, 0, sizeof *s);
    s->sl = sl;
    s->started = pthread_create(&s->thread, NULL, sleeper_main, s) == 0;
    return s->started && await_asleep(reader_is_asleep, sl);
}

void
sleeper_join(struct sleeper *s)
{
    if (s->started) {
        pthread_join(s->thread, NULL);
    }
}

/* ---- child processes ---- */

int
run_in_child(void (*fn)(void), struct child_result *out)
{
    int pipefd[2];
    memset(out, 0, sizeof *out);
    if (pipe(pipefd) != 0) {
        return 0;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        return 0;
    }
    if (pid == 0) {
        close(pipefd[0]);
        dup2(pipefd[1], STDERR_FILENO);
        alarm(10);
        fn();
        _exit(0);
    }
    close(pipefd[1]);
    size_t used = 0;
    ssize_t n;
    while ((n = read(pipefd[0], out->stderr_text + used,
                     sizeof out->stderr_text - 1 - used)) > 0) {
        used += (size_t)n;
    }
    close(pipefd[0]);
    return waitpid(pid, &out->status, 0) == pid;
}

int
exit_code_of(int status)
{
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

_Noreturn void
run_body(void (*body)(void *), void *arg)
{
    current_test_failed = current_test_skipped = 0;
    body(arg);
    fflush(NULL);
    _exit(current_test_skipped ? SKIPPED_EXIT : current_test_failed);
}

pid_t
start_child(void (*body)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(CHILD_GUARD_S);
        run_body(body, arg);
    }
    return pid;
}

int
reap(pid_t pid)
{
    return pid > 0 && waitpid(pid, NULL, 0) == pid;
}

int
kill_child(pid_t pid)
{
    return pid > 0 && kill(pid, SIGKILL) == 0 && reap(pid);
}

int
child_passed(pid_t pid)
{
    int status;
    if (pid <= 0 || waitpid(pid, &status, 0) != pid) {
        return 0;
    }
    int code = exit_code_of(status);
    if (code == SKIPPED_EXIT) {
        current_test_skipped = 1;
        return 1;
    }
    if (code != 0) {
        fprintf(stderr, "child process exited %d\n", code);
    }
    return code == 0;
}

void
idle_until_killed(void *arg)
{
    (void)arg;
    for (;;) {
        pause();
    }
}

/* ---- memory shared between processes ---- */

struct shared_record *
shared_record_new(void)
{
    struct shared_record *rec = mmap(NULL, sizeof *rec,
                                     PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (rec == MAP_FAILED) {
        return NULL;
    }
    if (seqlock_init(&rec->lock) != 0) {
        munmap(rec, sizeof *rec);
        return NULL;
    }
    return rec;
}

void
shared_record_free(struct shared_record *rec)
{
    if (rec != NULL) {
        munmap(rec, sizeof *rec);
    }
}

void
step_to(struct shared_record *rec, int step)
{
    atomic_store(&rec->step, step);
}

struct step_goal {
    struct shared_record *rec;
    int step;
};

static int
step_reached(void *arg)
{
    struct step_goal *g = arg;
    return atomic_load(&g->rec->step) >= g->step;
}

int
await_step(struct shared_record *rec, int step)
{
    struct step_goal goal = {rec, step};
    return poll_until(step_reached, &goal);
}

pid_t
child_dies_holding(struct shared_record *rec, enum hold_kind how, int sig)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (how == LOCKING_PASS) {
            read_seqlock_excl(&rec->lock);
        }
        else {
            uint64_t half = 1;
            write_seqlock(&rec->lock);
            seqlock_write_copy(rec->data, &half, sizeof half);
        }
        if (sig != 0) {
            kill(getpid(), sig);
        }
        _exit(0);
    }
    siginfo_t info;
    if (pid < 0 || waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT) != 0) {
        return -1;
    }
    return pid;
}

struct shared_record *
record_left_locked_by_dead_child(enum hold_kind how)
{
    struct shared_record *rec = shared_record_new();
    if (rec != NULL && !reap(child_dies_holding(rec, how, 0))) {
        shared_record_free(rec);
        return NULL;
    }
    return rec;
}

/* ---- signal masks ---- */

sigset_t
current_mask(void)
{
    sigset_t cur;
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    return cur;
}


/* ==== runner ==== */

/* Each file's table, in the order the files' constructors ran. */
static struct test_group *first_group;
static struct test_group **last_group = &first_group;

void
register_tests(struct test_group *group)
{
    group->next = NULL;
    *last_group = group;
    last_group = &group->next;
}

enum verdict { PASSED, FAILED, SKIPPED };

/* Run t (or skip it), print its line, restore the mask it started with. */
static enum verdict
run_test(const struct test *t, int skip_fork_signal, int robust_list_err,
         const sigset_t *initial_mask)
{
    current_test_failed = current_test_skipped = 0;
    if (skip_fork_signal && (t->kind & FORKS_OR_SIGNALS)) {
        snprintf(skip_reason, SKIP_REASON_SIZE, "--skip-fork-signal");
        current_test_skipped = 1;
    }
    else if (robust_list_err != 0 && (t->kind & ROBUST_LIST)) {
        snprintf(skip_reason, SKIP_REASON_SIZE, "%s",
                 ROBUST_LIST_MISSING_REASON);
        current_test_skipped = 1;
    }
    else {
        t->fn();
        pthread_sigmask(SIG_SETMASK, initial_mask, NULL);
    }
    if (current_test_failed) {
        printf("FAIL %s\n", t->name);
        return FAILED;
    }
    if (current_test_skipped) {
        printf("skip %s: %s\n", t->name, skip_reason);
        return SKIPPED;
    }
    printf("ok %s\n", t->name);
    return PASSED;
}

static void
usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [--skip-fork-signal] [name-substring]\n",
            argv0);
    exit(2);
}

int
main(int argc, char **argv)
{
    int skip_fork_signal = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--skip-fork-signal") == 0) {
            skip_fork_signal = 1;
        } else if (argv[i][0] == '-' || only != NULL) {
            usage(argv[0]);
        } else {
            only = argv[i];
        }
    }

    setvbuf(stdout, NULL, _IOLBF, 0);
    skip_reason = mmap(NULL, SKIP_REASON_SIZE, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (skip_reason == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    count_allocations();
    sigset_t initial_mask = current_mask();
    int robust_list_err = robust_list_missing();
    int counts[3] = {0}; /* of each verdict */
    for (const struct test_group *g = first_group; g != NULL; g = g->next) {
        for (size_t i = 0; i < g->count; i++) {
            const struct test *t = &g->tests[i];
            if (only != NULL && strstr(t->name, only) == NULL) {
                continue;
            }
            counts[run_test(t, skip_fork_signal, robust_list_err,
                            &initial_mask)]++;
        }
    }
    printf("%d passed, %d failed, %d skipped\n", counts[PASSED],
           counts[FAILED], counts[SKIPPED]);
    return counts[FAILED] ? 1 : 0;
}

/* ---- a record of one field ---- */

static const char one_field_layout[] = "x:q";

record_header *
one_field_record(size_t *size)
{
    *size = record_size(sizeof one_field_layout - 1, 8);
    record_header *h = aligned_alloc(64, record_round_up(*size, 64));
    if (h != NULL
        && record_init(h, one_field_layout, sizeof one_field_layout - 1, 8)
               != 0) {
        free(h);
        h = NULL;
    }
    return h;
}

int
one_field_record_matches(const record_header *h, size_t size)
{
    return record_matches(h, size, one_field_layout,
                          sizeof one_field_layout - 1, 8);
}
