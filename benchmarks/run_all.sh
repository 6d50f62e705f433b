#!/usr/bin/env bash
# benchmarks/run_all.sh - the whole comparison, one command:
# benchmarks/compare.py, bench_latch.py, bench_wait.py, bench_ring.py and
# bench_shared_reads.py under the normal and the free-threaded CPython, each
# in its own virtual environment (build/bench-venv/<tag>) with the package,
# the optional extra "bench" and the peers of bench_ring.py (RING_PEERS) and
# bench_shared_reads.py (SHARED_READS_PEERS) installed (here only, never a
# dependency of the package, not even an optional one), then the plots and
# the README tables from both results.
#
#   SEQLOCK_PYTHON     the normal interpreter (default: python3)
#   SEQLOCK_FT_PYTHON  a free-threaded one (default: tools/ft-python)
#   SEQLOCK_WAIT_BASELINE  the commit bench_wait.py compares writes with
#                      (default d2b914f, the parent of wait(); built from
#                      `git archive` into build/baseline/<tag>)
#   extra arguments go to compare.py (e.g. --quick, --repeats 3);
#   bench_latch.py, bench_wait.py, bench_ring.py and bench_shared_reads.py
#   run with their defaults (about 3, 4, 5 and 4 minutes per interpreter)
#
# Writes benchmarks/results/<tag>.json, throughput.png, writer_latency.png,
# idioms.png and table.md; latch-<tag>.json, reader_latency.png and latch_table.md;
# wait-<tag>.json and wait_table.md; ring_<tag>.json; shared_reads_<tag>.json.
# Contenders without a binary wheel for an interpreter are skipped there
# (never built from source) and listed in its output.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PIP_DISABLE_PIP_VERSION_CHECK=1
RESULTS=$ROOT/benchmarks/results
mkdir -p "$RESULTS"

NORMAL=$(command -v "${SEQLOCK_PYTHON:-python3}")
FREE=$(tools/ft-python)
BASELINE=${SEQLOCK_WAIT_BASELINE:-d2b914f}
# bench_ring.py's peers (its PEERS): the versions whose API it uses.
RING_PEERS=(zerochannel==0.1.2 safe-shm==0.1.1)
# bench_shared_reads.py's peer (its PEERS): safe-shm's seqlock.
SHARED_READS_PEERS=(safe-shm==0.1.1)
rm -rf build/baseline/src
mkdir -p build/baseline/src
git archive "$BASELINE" | tar -x -C build/baseline/src
jsons=()
latch_jsons=()
wait_jsons=()
for py in "$NORMAL" "$FREE"; do
    tag=$("$py" -I tools/interp_tag.py)
    venv=$ROOT/build/bench-venv/$tag
    printf '\n==> %s (%s)\n' "$tag" "$py"
    [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q .
    while read -r req; do
        "$venv/bin/python" -m pip install -q --only-binary=:all: "$req" \
            >/dev/null 2>&1 || echo "(no wheel of '$req' for $tag: skipped there)"
    done < <(tools/extra-deps bench)
    while read -r req; do  # each requirement once (the two share safe-shm)
        "$venv/bin/python" -m pip install -q --only-binary=:all: "$req" \
            >/dev/null 2>&1 || echo "(no wheel of '$req' for $tag: skipped there)"
    done < <(printf '%s\n' numpy "${RING_PEERS[@]}" "${SHARED_READS_PEERS[@]}" | sort -u)
    # -P: import the installed package, not the source folder.
    "$venv/bin/python" -P benchmarks/compare.py --json "$RESULTS/$tag.json" "$@"
    jsons+=("$RESULTS/$tag.json")
    "$venv/bin/python" -P benchmarks/bench_latch.py \
        --json "$RESULTS/latch-$tag.json"
    latch_jsons+=("$RESULTS/latch-$tag.json")
    rm -rf "build/baseline/$tag"
    "$venv/bin/python" -m pip install -q --no-deps \
        --target "build/baseline/$tag" build/baseline/src
    "$venv/bin/python" -P benchmarks/bench_wait.py \
        --json "$RESULTS/wait-$tag.json" \
        --baseline "build/baseline/$tag" --baseline-label "$BASELINE"
    wait_jsons+=("$RESULTS/wait-$tag.json")
    "$venv/bin/python" -P benchmarks/bench_ring.py \
        --json "$RESULTS/ring_$tag.json"
    "$venv/bin/python" -P benchmarks/bench_shared_reads.py \
        --json "$RESULTS/shared_reads_$tag.json"
    if [ "$py" = "$NORMAL" ]; then normal_venv=$venv; fi
done

printf '\n==> plots and table\n'
"$normal_venv/bin/python" -P benchmarks/compare.py --plot "${jsons[@]}" \
    --outdir "$RESULTS" | tee "$RESULTS/table.md"
"$normal_venv/bin/python" -P benchmarks/bench_latch.py \
    --plot "${latch_jsons[@]}" --outdir "$RESULTS" | tee "$RESULTS/latch_table.md"
"$normal_venv/bin/python" -P benchmarks/bench_wait.py \
    --table "${wait_jsons[@]}" | tee "$RESULTS/wait_table.md"
