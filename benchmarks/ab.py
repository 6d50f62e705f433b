"""A/B two builds of seqlock_py on compare.py's contenders, in one session.

    python benchmarks/ab.py --a PYTHON_A --b PYTHON_B [--pairs N]
        [--label-a A] [--label-b B] [--json PATH] [-- compare.py arguments]

PYTHON_A and PYTHON_B are interpreters of two virtual environments, each
with its own (non-editable) install of seqlock_py, e.g. main and a branch
that changes the C code.  Each pair runs benchmarks/compare.py once under
each, back to back in fresh processes, the order alternating from pair to
pair, so that the machine's slow drifts hit both alike.  The default
compare.py arguments time the idioms with 2 reader threads (--idioms
--parts threads --sizes 4 --writers 1khz --threads 2 --repeats 1
--seconds 0.2); anything after "--" replaces them.

Reported per contender: reads/s of A and B (medians over pairs), and the
median of the per-pair ratios B/A with a bootstrap 95 % interval (resampled
pairs).  On a shared 2-CPU VM a contender that writes a shared cache line
switches between a fast and a slow mode that last seconds to minutes, far
more than a small change moves it: many short pairs, not a few long ones.
Stdlib only; the JSON keeps every pair.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (cpu_snapshot, fmt_rate, loadavg,  # noqa: E402
                     machine_info, others_cpu, write_json)

COMPARE = os.path.join(HERE, "compare.py")
DEFAULT_ARGS = ["--idioms", "--parts", "threads", "--sizes", "4",
                "--writers", "1khz", "--threads", "2", "--repeats", "1",
                "--seconds", "0.2"]
BOOTSTRAP = 2000


def run_once(python, cargs, path):
    """{(contender, size, writer, threads): reads/s} of one compare.py run."""
    subprocess.run([python, "-P", COMPARE, *cargs, "--json", path],
                   check=True, capture_output=True, text=True)
    with open(path) as f:
        out = json.load(f)
    return out, {f"{e['contender']} x{e['threads']}"
                 f"{'' if e['size'] == 4 else ' size ' + str(e['size'])}"
                 f"{'' if e['writer'] == '1khz' else ' ' + e['writer']}":
                 e["reads_per_s"]["median"] for e in out["results"]}


def _children_seconds():
    t = os.times()
    return t.children_user + t.children_system


def interval(ratios, rng):
    """Bootstrap 95 % interval of the median of ratios."""
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios)))
                  for _ in range(BOOTSTRAP))
    return meds[int(0.025 * BOOTSTRAP)], meds[int(0.975 * BOOTSTRAP) - 1]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    cargs = DEFAULT_ARGS
    if "--" in argv:
        i = argv.index("--")
        argv, cargs = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="interpreter A")
    parser.add_argument("--b", required=True, help="interpreter B")
    parser.add_argument("--label-a", default="A")
    parser.add_argument("--label-b", default="B")
    parser.add_argument("--pairs", type=int, default=40,
                        help="A/B pairs (default 40)")
    parser.add_argument("--json", metavar="PATH", help="write every pair here")
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error("--pairs must be at least 1")

    tmp = tempfile.mkdtemp(prefix="seqlock-ab-")
    pairs = []
    infos = {}
    t_start = time.perf_counter()
    for p in range(args.pairs):
        order = ("a", "b") if p % 2 == 0 else ("b", "a")
        pair = {"order": order, "load": loadavg()}
        cpu0, kids0 = cpu_snapshot(), _children_seconds()
        for side in order:
            out, rates = run_once(getattr(args, side), cargs,
                                  os.path.join(tmp, f"{side}.json"))
            pair[side] = rates
            infos[side] = out["interpreter"]
        cpu1, kids1 = cpu_snapshot(), _children_seconds()
        # Busy CPUs less this process's and its children's (the two runs).
        wall = (cpu1[0] - cpu0[0]) if cpu0 and cpu1 else float("nan")
        pair["others_cpu"] = max(0.0, others_cpu(cpu0, cpu1)
                                 - (kids1 - kids0) / wall)
        pairs.append(pair)
        print(f"# pair {p + 1}/{args.pairs} ({'/'.join(order)}), "
              f"{time.perf_counter() - t_start:.0f} s", file=sys.stderr,
              flush=True)

    rng = random.Random(12)
    summary = {}
    for key in pairs[0]["a"]:
        a = [x["a"][key] for x in pairs]
        b = [x["b"][key] for x in pairs]
        ratios = [y / x for x, y in zip(a, b)]
        lo, hi = interval(ratios, rng)
        summary[key] = {"a": statistics.median(a), "b": statistics.median(b),
                        "ratio": statistics.median(ratios),
                        "ratio_95": [lo, hi],
                        "b_faster_pairs": sum(r > 1 for r in ratios)}
    out = {"a": args.a, "b": args.b, "label_a": args.label_a,
           "label_b": args.label_b, "interpreter_a": infos["a"],
           "interpreter_b": infos["b"], "machine": machine_info(),
           "compare_args": cargs, "pairs": len(pairs),
           "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
           "summary": summary, "samples": pairs}
    width = max(len(k) for k in summary) + 2
    print(f"# {len(pairs)} pairs, B = {args.label_b}, A = {args.label_a}; "
          "reads/s medians over pairs; B/A: median of per-pair ratios "
          "[bootstrap 95 %]")
    for key, s in summary.items():
        print(f"  {key:<{width}}{fmt_rate(s['a']):>13}{fmt_rate(s['b']):>13}"
              f"{s['ratio']:8.3f}  [{s['ratio_95'][0]:.3f}, "
              f"{s['ratio_95'][1]:.3f}]  B faster in {s['b_faster_pairs']}"
              f"/{len(pairs)}")
    others = [x["others_cpu"] for x in pairs]
    print(f"# other processes kept busy: median {statistics.median(others):.2f}"
          f" CPUs, max {max(others):.2f}")
    if args.json:
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
