"""An asyncio /stats service with long-polling clients, fed by a worker process.

A worker process counts requests it "serves" and publishes its statistics
in a record in shared memory, twice a second.  The service (asyncio,
one thread) answers ``GET /stats?after=SEQ`` with the first statistics
newer than SEQ: it parks the request on ``await rec.wait_async(seq)``, so a
thousand clients long-polling cost a thousand parked coroutines, not a
thousand threads, and each is answered right after the worker's next
write.  Each answer is one snapshot: ``served == ok + failed``, always.

    python examples/stats_service.py --clients 1000 --seconds 2

runs the worker, the service and the clients (asyncio too) together, and
prints how many answers came back, how many requests were parked at once
(counted as they park), how many threads the process had while any was
(sampled every 5 ms), and whether every answer was consistent (exit 1 if
not).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import threading
import time
from urllib.parse import parse_qs, urlsplit

from seqlock_py import SeqRecord

STATS = dict(served="q", ok="q", failed="q", p99_ms="d")
PARKED = [0, 0]                          # requests in wait_async: now, at most


def worker(name: str, stop: multiprocessing.synchronize.Event, period: float) -> None:
    """The process that does the work and publishes its statistics."""
    with SeqRecord.attach_shared(name) as rec:
        served = ok = 0
        while not stop.is_set():
            served += 10
            ok += 9
            rec.update(served=served, ok=ok, failed=served - ok, p99_ms=1.5 + served % 7)
            time.sleep(period)


async def handle(rec: SeqRecord, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    request = await reader.readline()
    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
        pass                                             # the headers
    try:
        method, target, _ = request.decode().split()
        url = urlsplit(target)
        after = int(parse_qs(url.query).get("after", ["0"])[0])
    except ValueError:
        method, url, after = "", None, 0
    if method != "GET" or url is None or url.path != "/stats":
        writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    else:
        PARKED[0] += 1
        PARKED[1] = max(PARKED[1], PARKED[0])            # counted, not sampled
        try:
            await rec.wait_async(after, timeout=30)      # parked, no thread
        finally:
            PARKED[0] -= 1
        seq, stats = rec.read_versioned()
        body = json.dumps({"seq": seq, **stats._asdict()}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    writer.close()


async def long_poll(port: int, after: int) -> dict:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /stats?after={after} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return json.loads(body)


async def client(port: int, deadline: float, tally: dict) -> None:
    """A long-polling client: each answer's seq is its next request's after.
    At least two polls, however slow the machine: the second one waits for
    news (its after is the newest seq), so requests do park."""
    after = polls = 0
    while time.monotonic() < deadline or polls < 2:
        polls += 1
        stats = await long_poll(port, after)
        tally["answers"] += 1
        tally["inconsistent"] += stats["served"] != stats["ok"] + stats["failed"]
        tally["inconsistent"] += stats["seq"] <= after              # not news
        after = stats["seq"]


async def serve_and_poll(rec: SeqRecord, clients: int, seconds: float) -> dict:
    server = await asyncio.start_server(lambda r, w: handle(rec, r, w), "127.0.0.1", 0,
                                        backlog=clients)
    port = server.sockets[0].getsockname()[1]
    tally = dict(answers=0, inconsistent=0, most_parked=0,
                 most_threads=threading.active_count())

    async def count_threads() -> None:                   # while requests are parked
        while True:
            if PARKED[0] > 0:
                tally["most_threads"] = max(tally["most_threads"], threading.active_count())
            await asyncio.sleep(0.005)

    sampler = asyncio.create_task(count_threads())
    deadline = time.monotonic() + seconds
    async with server:
        await asyncio.gather(*(client(port, deadline, tally) for _ in range(clients)))
    sampler.cancel()
    tally["most_parked"] = PARKED[1]
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--period", type=float, default=0.5,
                        help="seconds between the worker's updates")
    args = parser.parse_args(argv)

    ctx = multiprocessing.get_context("spawn")
    name = f"stats-service-{os.getpid()}"
    with SeqRecord.create_shared(name, **STATS) as rec:   # unlinked when closed
        stop = ctx.Event()
        feeder = ctx.Process(target=worker, args=(name, stop, args.period))
        feeder.start()
        try:
            seq, _ = rec.read_versioned()
            rec.wait(seq, timeout=30)                     # the worker is up
            result = asyncio.run(serve_and_poll(rec, args.clients, args.seconds))
        finally:
            stop.set()
            feeder.join(30)
    print(f"{result['answers']:,} long-poll answers to {args.clients} clients; "
          f"{result['most_parked']} requests parked at once on "
          f"at most {result['most_threads']} threads")
    ok = result["inconsistent"] == 0 and feeder.exitcode == 0
    print("every answer was one consistent, newer snapshot" if ok
          else f"{result['inconsistent']} bad answers, worker exit {feeder.exitcode}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
