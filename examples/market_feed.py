"""A market-data feed in shared memory, read by four strategy processes.

The feed (this process) writes the newest quote for one instrument 2,000
times a second into a record in named shared memory.  Four strategy
processes attach to it by name and react to changes, asleep between them
(``changes()``: a futex wait, no polling).  A strategy wants the newest
quote, not a queue of stale ones: when it falls behind it gets the latest
and the sequence numbers say how many quotes it skipped (a ring that
delivers every change is a different tool).

Every quote a strategy sees is one the feed wrote whole: ``ask == bid +
0.01 * spread_ticks`` and ``tick`` agrees with ``bid``.  The program
checks that in every process and exits 1 if a quote is torn.

    python examples/market_feed.py --seconds 2 --strategies 4
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import NamedTuple

from seqlock_py import SeqRecord


class Quote(NamedTuple):
    tick: int
    bid: float
    ask: float
    spread_ticks: int
    open: bool


STRATEGY = """
import sys
sys.path.insert(0, sys.argv[2])                      # examples/, for Quote
from market_feed import Quote, whole
from seqlock_py import SeqRecord
seen = torn = skipped = 0
with SeqRecord.attach_shared(sys.argv[1], Quote) as feed:
    previous = None
    for seq, quote in feed.changes(timeout=5):
        if not quote.open:
            break                                    # the feed closed the market
        torn += not whole(quote)
        if previous is not None:
            skipped += (seq - previous) // 2 - 1
        previous, seen = seq, seen + 1
print(seen, skipped, torn)
"""


def whole(q: Quote) -> bool:
    return (q.bid == 100 + q.tick * 0.01
            and q.ask == q.bid + 0.01 * q.spread_ticks
            and q.spread_ticks == 1 + q.tick % 3)


def quote(tick: int, open_: bool = True) -> Quote:
    bid = 100 + tick * 0.01
    spread = 1 + tick % 3
    return Quote(tick, bid, bid + 0.01 * spread, spread, open_)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--strategies", type=int, default=4)
    parser.add_argument("--rate", type=float, default=2000.0, help="quotes per second")
    args = parser.parse_args(argv)

    here = os.path.dirname(os.path.abspath(__file__))
    name = f"market-feed-{os.getpid()}"
    with SeqRecord.create_shared(name, Quote) as feed:
        feed.update(**quote(0)._asdict())
        strategies = [subprocess.Popen([sys.executable, "-P", "-c", STRATEGY, name, here],
                                       stdout=subprocess.PIPE, text=True)
                      for _ in range(args.strategies)]
        time.sleep(0.5)                               # let them attach and settle
        period, tick = 1 / args.rate, 0
        next_at = end = time.monotonic()
        end += args.seconds
        while next_at < end:
            tick += 1
            feed.update(**quote(tick)._asdict())
            next_at += period
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        feed.update(**quote(tick + 1, open_=False)._asdict())
        results = [p.communicate(timeout=60)[0].split() for p in strategies]

    print(f"the feed wrote {tick:,} quotes in {args.seconds:g} s")
    torn_total = 0
    for i, (p, fields) in enumerate(zip(strategies, results)):
        seen, skipped, torn = map(int, fields) if len(fields) == 3 else (0, 0, -1)
        torn_total += torn if torn >= 0 else 1
        print(f"  strategy {i}: reacted to {seen:,} quotes ({seen / max(tick, 1):.1%}), "
              f"skipped {skipped:,} stale ones, {torn} torn, exit {p.returncode}")
    ok = torn_total == 0 and all(p.returncode == 0 for p in strategies)
    print("every quote every strategy saw was whole" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
