"""Fuzz a shared SeqRecord's header and lock words with Hypothesis, for a
bounded time (issue 17: "shared memory is a trust boundary").

Each generated case (tests/fuzz_record.py plays it) is a record layout, a
few word writes into its buffer -- before the roles attach, after they
attach, or rewritten over and over while they run ("during") -- and one to
three roles, each in its own fresh interpreter: readers, writers, waiters.
The promise checked: no crash, no byte written outside the record, no call
past its timeout (a reader's: no wait at all), no hang, no exception but a
clear one.  Under the trust model a writer may crash only while a
co-tenant rewrites its beacon during the run: such crashes are counted
apart ("tolerated") and fail nothing.

Every failing case is shrunk where cheap (writes, then roles, dropped one
at a time while the same role still fails the same way) and saved as JSON
under the corpus directory, which tests/test_fuzz_record.py replays.

    python tests/fuzz_record_driver.py [--seconds 60] [--seed N]
        [--corpus-out DIR] [--no-save] [--no-shrink]

SEQLOCK_FUZZ_SECONDS sets the default budget.  Prints the counts and ends
with one line "1 passed, 0 failed" (or "0 passed, 1 failed"), which
tools/test_summary.py counts; exits 0, or 1 if the promise broke.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzz_record as fr  # noqa: E402
from hypothesis import HealthCheck, Phase, Verbosity, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

U32 = 2**32 - 1
U64 = 2**64 - 1
W, D = fr.FUTEX_WAITERS, fr.FUTEX_OWNER_DIED

# ---- values ----


def _ints(width):
    return st.integers(0, 2 ** (8 * width) - 1)


def _rel(*deltas):
    return st.sampled_from([["add", d] for d in deltas])


def _tid():
    return st.builds(lambda k, bits: ["tid", k, bits],
                     st.integers(-1, 2), st.sampled_from([0, W, D, W | D]))


SMALL32 = [0, 1, 2, 3, 7, 8, 63, 64, 65, 0x90, 0x40, 0x7FFFFF00, 0x7FFFFFFF,
           0x80000000, 0xFFFFFFFF, D, W | D]
SMALL64 = [0, 1, 2, 3, 2**32 - 1, 2**32, 2**63, U64, U64 - 1, 0x7FFFFF00]
POINTERISH = st.integers(0x7F0000000000, 0x7FFFFFFFFFFF).map(lambda p: p & ~7)

GENERIC = {
    4: st.one_of(st.sampled_from(SMALL32), _ints(4), _rel(-1, 1, 64),
                 st.sampled_from([["xor", 1], ["or", W], ["or", D]])),
    8: st.one_of(st.sampled_from(SMALL64), _ints(8), _rel(-2, -1, 1, 2),
                 st.sampled_from([["xor", 1]]), POINTERISH),
    1: _ints(1),
}

SPECIFIC = {
    "data_bytes": st.one_of(st.sampled_from([0, 1, 8, 16, 0x7FFFFF00, U32]),
                            _rel(-64, -8, 8, 64, 4096), _ints(4)),
    "layout_bytes": st.one_of(st.sampled_from([0, 1, 64, 0x7FFFFF00, U32]),
                              _rel(-64, -1, 1, 64, 4096), _ints(4)),
    "sequence": st.one_of(_rel(-1, 1, 2, -2), st.sampled_from(
        [0, 1, U64, 2**63, 2**63 + 1, 0x7FFFFF00, ["xor", 1]]), _ints(8)),
    "ready": st.one_of(st.sampled_from([0, 1, fr.SEQLOCK_READY ^ 1, U32, 2]), _ints(4)),
    "abandoned": st.one_of(st.sampled_from([0, 1, U32]), _ints(4)),
    "holder": st.one_of(st.sampled_from([0, 1, U64]), _ints(8)),
    "beacon.lock": st.one_of(_tid(), st.sampled_from(
        [0, 1, D, W, W | D, U32, 0x3FFFFFFF]), _ints(4)),
    "beacon.owner": st.one_of(_tid(), st.sampled_from([0, 1, U32]), _ints(4)),
    "beacon.kind": st.one_of(st.sampled_from(
        [0, 1, 2, 3, 0x10, 0x20, 0x40, 0x50, 0x80, 0x90, 0x93, 0xD0, 0x100, U32]), _ints(4)),
    "beacon.count": st.one_of(st.sampled_from([0, 1, U32, 0x7FFFFFFF]), _ints(4)),
    "beacon.nusers": st.one_of(st.sampled_from([0, 1, U32]), _ints(4)),
    "beacon.list_prev": st.one_of(st.sampled_from([0, 1, 8, U64]), POINTERISH, _ints(8), _rel(8, -8)),
    "beacon.list_next": st.one_of(st.sampled_from([0, 1, 8, U64]), POINTERISH, _ints(8), _rel(8, -8)),
}

#: The words the fuzzer writes most: the geometry and the lock; the rest of
#: the header less often; raw offsets anywhere in the record sometimes.
HOT = ["data_bytes", "layout_bytes", "sequence", "ready", "abandoned", "holder",
       "beacon.lock", "beacon.owner", "beacon.kind", "beacon.count",
       "beacon.nusers", "beacon.list_prev", "beacon.list_next"]
COLD = [w for w in fr.WORDS if w not in HOT]


WHENS = ["after", "after", "after", "during", "during", "before"]


@st.composite
def word_write(draw, fields, rnd):
    """One write: which word and when from rnd (uniform), its value from
    Hypothesis (which favours edge cases)."""
    when = rnd.choice(WHENS)
    pick = rnd.randrange(10)
    if pick < 7:
        name = rnd.choice(HOT)
    elif pick < 9:
        name = rnd.choice(COLD)
    else:
        name = None
    if name is not None:
        offset, width, _ = fr.WORDS[name]
    else:
        size = fr.geometry(fields)[4]
        width = rnd.choice([8, 4, 1])
        offset = rnd.randrange(size // width) * width
        name = f"raw:{fr.word_name_at(fields, offset)}/{width}"
    values = SPECIFIC.get(name, GENERIC[width])
    w = {"word": name, "offset": offset, "width": width, "when": when}
    if when == "during":
        w["values"] = draw(st.lists(values, min_size=1, max_size=3))
    else:
        w["value"] = draw(values)
    return w


#: States no single write makes: a section whose writer looks dead, a lock
#: word held by nobody alive, a lock still "initialising", an open or an
#: abandoned section.  A case starts from one of them a third of the time.
PRESETS = {
    "dead_section": lambda: st.tuples(
        st.just(("sequence", ["or", 1])),
        st.tuples(st.just("holder"), st.integers(1, U64)),
        st.tuples(st.just("beacon.lock"), st.one_of(
            st.sampled_from([D, D | W, D | 1]), _tid().map(lambda t: [t[0], t[1], D])))),
    "ghost_holder": lambda: st.tuples(
        st.tuples(st.just("holder"), st.integers(1, U64)),
        st.tuples(st.just("beacon.lock"), st.one_of(_tid(), st.integers(1, 2**30 - 1)))),
    "initialising": lambda: st.tuples(st.just(("ready", 1))),
    "open_section": lambda: st.tuples(st.just(("sequence", ["or", 1]))),
    "abandoned_section": lambda: st.tuples(
        st.just(("sequence", ["or", 1])), st.just(("abandoned", 1)),
        st.tuples(st.just("holder"), st.sampled_from([0, 1]))),
}


@st.composite
def preset_writes(draw, rnd):
    name = rnd.choice(sorted(PRESETS))
    when = rnd.choice(["after", "after", "during", "before"])
    writes = []
    for word, value in draw(PRESETS[name]()):
        offset, width, _ = fr.WORDS[word]
        w = {"word": word, "offset": offset, "width": width, "when": when}
        if when == "during":
            w["values"] = [value]
        else:
            w["value"] = value
        writes.append(w)
    return writes


@st.composite
def layouts(draw):
    n = draw(st.integers(1, 3))
    fields = {f"s{i}": draw(st.sampled_from(["q", "d", "Q", "?"])) for i in range(n)}
    count = draw(st.sampled_from([1, 3, 16, 100, 300]))
    fields["arr"] = f"{count}{draw(st.sampled_from(['d', 'q', 'Q']))}"
    if draw(st.booleans()):  # the array first, sometimes
        fields = {"arr": fields.pop("arr"), **fields}
    return fields


ROLE_MIXES = [
    ("reader", "writer", "waiter"), ("reader", "writer", "waiter"), ("writer",), ("writer", "waiter"), ("reader", "writer"),
    ("waiter",), ("reader",), ("writer", "writer", "reader"), ("reader", "waiter"),
    ("writer", "writer", "waiter"), ("reader", "reader", "writer"),
]


@st.composite
def cases(draw):
    # The case's shape (which preset, which words, when, which roles) from
    # a Random that Hypothesis seeds: uniform, where Hypothesis's own
    # choices favour their first options and revisit what it has drawn (in
    # 500 cases it never drew ready = 1 after attach with a writer); the
    # values, the layout and the timings from Hypothesis itself.
    rnd = draw(st.randoms(use_true_random=True))
    fields = draw(layouts())
    preset = draw(preset_writes(rnd)) if rnd.random() < 1 / 3 else []
    n = rnd.randint(0, 3) if preset else rnd.randint(1, 4)
    writes = preset + [draw(word_write(fields, rnd)) for _ in range(n)]
    roles = [{"role": r, "readonly": rnd.random() < 0.5} if r == "reader" else {"role": r}
             for r in rnd.choice(ROLE_MIXES)]
    return {
        "fields": fields,
        "writes": writes,
        "roles": roles,
        "duration": draw(st.sampled_from([0.4, 0.6])),
        "timeout": draw(st.sampled_from([0.1, 0.0, 0.25])),
        "slack": 0.5,
        "untimed_bound": 0.5,
        "paced": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


# ---- shrinking ----

SEVERITY = {"crash": 0, "hang": 1, "oob": 2, "overtime": 3, "unexpected": 4}


def target_of(result):
    fs = sorted(fr.failed(result), key=lambda f: SEVERITY.get(f["kind"], 9))
    return (fs[0]["role"], fs[0]["kind"]) if fs else None


def shrink(case, result, until, log):
    """Drop writes, roles and scribbled values one at a time while the
    same role still fails the same way; stop at `until` (monotonic).
    Returns (case, result, runs, reproduced)."""
    target = target_of(result)
    runs = 0
    reproduced = False

    def still_fails(candidate):
        nonlocal runs, reproduced
        runs += 1
        r = fr.run_case(candidate)
        if target in fr.signature(r) or (target[0] == "any" and ("any", "oob") in fr.signature(r)):
            reproduced = True
            return r
        return None

    def tries(c):
        for i in reversed(range(len(c["writes"]))):
            if len(c["writes"]) > 1:
                yield dict(c, writes=c["writes"][:i] + c["writes"][i + 1:])
        for i in reversed(range(len(c["roles"]))):
            rest = c["roles"][:i] + c["roles"][i + 1:]
            if rest and (target[0] == "any" or any(r["role"] == target[0] for r in rest)):
                yield dict(c, roles=rest)
        for i, w in enumerate(c["writes"]):
            if w["when"] == "during":  # a static case is simpler
                static = {k: v for k, v in w.items() if k != "values"}
                yield dict(c, writes=c["writes"][:i] + [dict(static, when="after", value=w["values"][0])]
                           + c["writes"][i + 1:])
        for i, w in enumerate(c["writes"]):
            if w["when"] == "during" and len(w["values"]) > 1:
                for v in w["values"]:
                    yield dict(c, writes=c["writes"][:i] + [dict(w, values=[v])] + c["writes"][i + 1:])
        for i, r in enumerate(c["roles"]):
            if r.get("readonly"):
                yield dict(c, roles=c["roles"][:i] + [dict(r, readonly=False)] + c["roles"][i + 1:])

    progress = True
    while progress and time.monotonic() < until:
        progress = False
        for candidate in tries(case):
            if time.monotonic() >= until:
                break
            r = still_fails(candidate)
            if r is not None:
                case, result, progress = candidate, r, True
                log(f"    shrunk to {len(case['writes'])} writes, roles "
                    f"{[r['role'] for r in case['roles']]}")
                break
    return case, result, runs, reproduced


def finding_key(case, result):
    """Two findings are the same if the same role fails the same way in the
    same call after the same writes (word and when)."""
    t = target_of(result)
    calls = sorted({str(f.get("call")) for f in fr.failed(result) if (f["role"], f["kind"]) == t})
    words = sorted({(re.sub(r"^raw:|/\d+$", "", w["word"]), w["when"]) for w in case["writes"]})
    return json.dumps([t, calls, words])


# ---- the issue's own cases ----

_F = {"n": "q", "x": "d", "flag": "?", "arr": "16d"}


def _after(*pairs):
    return [{"word": w, "value": v, "when": "after"} for w, v in pairs]


#: Issue 17's reproductions as cases (saved with --issue-cases when they
#: fail on the build at hand), beside what the fuzzer finds by itself.
ISSUE_CASES = {
    "defect 1: layout_bytes += 64 after attach, a writer's update() writes past the record":
        {"fields": _F, "roles": ["writer"], "writes": _after(("layout_bytes", ["add", 64]))},
    "defect 1: layout_bytes = 0x7fffff00 after attach, a reader-only process reads far outside":
        {"fields": _F, "roles": ["reader"], "writes": _after(("layout_bytes", 0x7FFFFF00))},
    "defect 1: data_bytes = 8 on a 100-double record, update() overruns its stack scratch":
        {"fields": {"n": "q", "arr": "100d"}, "roles": ["writer"], "writes": _after(("data_bytes", 8))},
    "defect 2: ready = 1 (initialising) after attach, write(timeout=0.2) spins for ever":
        {"fields": _F, "roles": ["writer"], "timeout": 0.2, "writes": _after(("ready", 1))},
    "defect 5: beacon kind 0x40 (priority protect), the first write aborts":
        {"fields": _F, "roles": ["writer"], "writes": [
            {"word": "beacon.kind", "value": 0x40, "when": "before"}]},
    "defect 6: a section that looks dead but cannot be taken, wait(seq, 0.2) never returns":
        {"fields": _F, "roles": ["waiter"], "timeout": 0.2, "writes": _after(
            ("sequence", ["or", 1]), ("holder", 1), ("beacon.lock", fr.FUTEX_OWNER_DIED),
            ("beacon.kind", 3))},
}


def save_issue_cases(corpus_out, out=sys.stdout):
    saved = []
    for name, case in ISSUE_CASES.items():
        case = fr.normalise_case(json.loads(json.dumps(case)))
        result = fr.run_case(case)
        fs = fr.failed(result)
        print(f"{name}: {'fails' if fs else 'passes'}", file=out)
        if fs:
            print(fr.describe(result), file=out)
            path = fr.save_corpus_case(case, result, corpus_out, {
                "interpreter": interpreter_tag(), "commit": git_commit(),
                "by": f"hand, issue 17 {name}", "key": finding_key(case, result)})
            if path:
                saved.append(path)
                print(f"    saved {path}", file=out)
    return saved


# ---- the run ----


class BudgetSpent(Exception):
    pass


class Stats:
    def __init__(self):
        self.cases = 0
        self.by_mode = collections.Counter()
        self.failing_cases = 0
        self.crashes = collections.Counter()  # (role, mode, tolerated) -> n
        self.crash_kinds = collections.Counter()  # (role, mode, signal, call) -> n
        self.hangs = collections.Counter()  # (role, mode, call) -> n
        self.overtime = collections.Counter()  # (role, mode, call) -> calls
        self.oob = 0
        self.oob_bytes = 0
        self.unexpected = collections.Counter()
        self.errors = collections.Counter()
        self.attach_failed = 0
        self.readonly = collections.Counter()
        self.interrupted_updates = 0
        self.seconds = 0.0

    def add(self, case, result):
        mode = result["mode"]
        self.cases += 1
        self.by_mode[mode] += 1
        self.seconds += result["seconds"]
        self.failing_cases += bool(fr.failed(result))
        for f in result["failures"]:
            if f["kind"] == "crash":
                self.crashes[(f["role"], mode, bool(f.get("tolerated")))] += 1
                self.crash_kinds[(f["role"], mode, f["signal"], f.get("call"),
                                  bool(f.get("tolerated")))] += 1
            elif f["kind"] == "hang":
                self.hangs[(f["role"], mode, f.get("call"))] += 1
            elif f["kind"] == "unexpected":
                self.unexpected[(f["role"], f.get("call"), f["detail"][:100])] += 1
            elif f["kind"] == "oob":
                self.oob += 1
                self.oob_bytes += sum(b - a for a, b in result["oob"])
        for role in result["roles"]:
            rep = role["report"]
            if not rep:
                continue
            for o in rep["overtime"]:
                self.overtime[(role["role"], mode, o["call"])] += 1
            extra = rep["overtime_count"] - len(rep["overtime"])
            if extra > 0:
                self.overtime[(role["role"], mode, "(more)")] += extra
            self.attach_failed += rep["attach"] == "failed"
            if rep.get("readonly"):
                self.readonly[rep["readonly"].split(":")[0]] += 1
            self.interrupted_updates += rep.get("interrupted_updates", 0)
        for key, n in result["errors"].items():
            self.errors[re.sub(r"0x[0-9a-f]+|\d+", "N", key)] += n

    def failures(self):
        return (sum(n for (_, _, tol), n in self.crashes.items() if not tol)
                + sum(self.hangs.values()) + sum(self.overtime.values())
                + self.oob + sum(self.unexpected.values()))

    def report(self, out, wall, seed, tag):
        p = lambda *a: print(*a, file=out)  # noqa: E731
        p(f"fuzz-record on {tag} (hypothesis seed {seed}): {self.cases} cases "
          f"({self.by_mode['static']} static, {self.by_mode['during']} during) in {wall:.0f} s; "
          f"{self.failing_cases} broke the promise")
        p("  crashes (role / mode):")
        for role in fr.ROLES:
            cells = []
            for mode in ("static", "during"):
                n = self.crashes[(role, mode, False)]
                t = self.crashes[(role, mode, True)]
                cells.append(f"{mode} {n}" + (f" (+{t} tolerated)" if t else ""))
            p(f"    {role:7} {', '.join(cells)}")
        for (role, mode, sig, call, tol), n in sorted(self.crash_kinds.items(), key=str):
            p(f"      {n} x {role} [{mode}] {sig} in {call or 'between calls'}"
              + (" (tolerated)" if tol else ""))
        p(f"  out-of-bounds writes: {self.oob} cases, {self.oob_bytes} canary bytes changed")
        p(f"  overtime calls: {sum(self.overtime.values())}")
        for (role, mode, call), n in sorted(self.overtime.items(), key=str):
            p(f"      {n} x {role} [{mode}] {call}")
        p(f"  hangs: {sum(self.hangs.values())}")
        for (role, mode, call), n in sorted(self.hangs.items(), key=str):
            p(f"      {n} x {role} [{mode}] in {call or 'between calls / startup'}")
        p(f"  unexpected exceptions: {sum(self.unexpected.values())}")
        for (role, call, detail), n in sorted(self.unexpected.items(), key=str):
            p(f"      {n} x {role} {call}: {detail}")
        p(f"  attach refused (ValueError etc.): {self.attach_failed} children; "
          f"read-only readers: {dict(self.readonly) or 'none'}; "
          f"update() interrupted by its watchdog: {self.interrupted_updates}")
        p("  exceptions raised, by message (numbers as N; unexpected kinds also above):")
        for msg, n in self.errors.most_common(15):
            p(f"      {n:7} {msg}")
        if len(self.errors) > 15:
            p(f"      ... and {len(self.errors) - 15} other messages")


def interpreter_tag():
    import sysconfig

    return sys.implementation.cache_tag + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "")


def git_commit():
    try:
        import subprocess

        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=fr.TESTS_DIR,
                              capture_output=True, text=True, timeout=10).stdout.strip() or None
    except OSError:
        return None


def existing_keys(directory):
    keys = set()
    for path in Path(directory).glob("*.json"):
        try:
            data = fr.load_corpus_file(path)
            keys.add(data["found"].get("key"))
        except (OSError, ValueError, KeyError):
            pass
    return keys


def run(seconds, *, seed=None, corpus_out=None, save=True, do_shrink=True,
        shrink_share=0.5, max_saves=12, out=sys.stdout, verbose=True):
    """Fuzz for `seconds`; return (Stats, [saved paths])."""
    seed = random.randrange(2**32) if seed is None else seed
    tag = interpreter_tag()
    corpus_out = Path(corpus_out or fr.CORPUS_DIR)
    start = time.monotonic()
    end = start + seconds
    shrink_left = [seconds * shrink_share]
    stats = Stats()
    saved = []
    keys = existing_keys(corpus_out) if save else set()
    commit = git_commit()
    log = (lambda msg: print(msg, file=out, flush=True)) if verbose else (lambda msg: None)

    seen = set()

    @settings(max_examples=10**6, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck), verbosity=Verbosity.quiet,
              derandomize=False)
    @given(cases())
    def one(case):
        if time.monotonic() >= end:
            raise BudgetSpent
        body = json.dumps(case, sort_keys=True)
        if body in seen:  # Hypothesis repeats itself: play each case once
            return
        seen.add(body)
        result = fr.run_case(case)
        stats.add(case, result)
        fs = fr.failed(result)
        if not fs:
            return
        log(f"  case {stats.cases}: {fr.describe(result).strip()}")
        if not save or len(saved) >= max_saves:
            return
        key = finding_key(fr.normalise_case(json.loads(json.dumps(case))), result)
        if key in keys:
            return
        keys.add(key)
        small, small_result, runs, reproduced = case, result, 0, None
        if do_shrink and shrink_left[0] > 0:
            t0 = time.monotonic()
            small, small_result, runs, reproduced = shrink(
                case, result, min(end, t0 + min(20.0, shrink_left[0])), log)
            shrink_left[0] -= time.monotonic() - t0
        small = fr.normalise_case(json.loads(json.dumps(small)))
        skey = finding_key(small, small_result)
        if skey != key and skey in keys:
            return
        keys.add(skey)
        path = fr.save_corpus_case(small, small_result, corpus_out, {
            "interpreter": tag, "commit": commit, "hypothesis_seed": seed,
            "shrink_runs": runs, "reproduced_while_shrinking": reproduced, "key": skey})
        if path:
            saved.append(path)
            log(f"    saved {path}")

    try:
        hypothesis_seed(seed)(one)()
    except BudgetSpent:
        pass
    stats.report(out, time.monotonic() - start, seed, tag)
    if saved:
        print(f"  saved {len(saved)} new corpus cases in {corpus_out}:", file=out)
        for p in saved:
            print(f"      {p.name}", file=out)
    return stats, saved


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float,
                    default=float(os.environ.get("SEQLOCK_FUZZ_SECONDS", "60")))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--corpus-out", default=None,
                    help=f"where new failing cases go (default {fr.CORPUS_DIR})")
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--max-saves", type=int, default=12)
    ap.add_argument("-q", "--quiet", action="store_true", help="no line per failing case")
    ap.add_argument("--issue-cases", action="store_true",
                    help="play issue 17's reproductions instead, saving those that fail")
    args = ap.parse_args(argv)
    if args.issue_cases:
        save_issue_cases(Path(args.corpus_out or fr.CORPUS_DIR))
        return 0
    stats, _ = run(args.seconds, seed=args.seed, corpus_out=args.corpus_out,
                   save=not args.no_save, do_shrink=not args.no_shrink,
                   max_saves=args.max_saves, verbose=not args.quiet)
    bad = stats.failures() > 0 or stats.cases == 0
    print(f"{0 if bad else 1} passed, {1 if bad else 0} failed", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
