"""Records/s of the paragraph pipeline against a loopback OpenAI-compatible server whose
every answer takes a fixed latency: concurrency 1 (the baseline) and N = 8, 32, 64 in one run,
each as a speed-up over concurrency 1 and as a fraction of the ideal N.

The server is the tests' scripted one (tests/_support/_fake_openai.py, tests/_support/_scripted_models.py):
lists with preambles, a paragraph, a score of 8, so 4 calls a record (3 texts, 1 score). It runs
in a process of its own (as a real server does: it does not share the client's interpreter
lock), keeps connections alive and serves every connection on its own thread. With latency L
and C calls a record, concurrency 1 gives about 1 / (C * L) records/s and concurrency N at most
N times that (the records of a part run side by side, each asking its next call as soon as its
last one is answered; 256 records fill every slot at N = 64 and give 16 rounds of calls).

The same run measures the server's own capacity: N threads of a minimal client (``http.client``,
one kept-alive connection each) asking it 8 rounds of calls; its fraction of the ideal N / L
calls/s says how far the server, not the client, sets the pace on this machine at this moment.
It also records the client's and the server's CPU time per call, the CPU (benchmarks/_machine.py)
and the load average. No model runs: this measures the driver and the chat client, not a GPU.

    python benchmarks/generate_throughput.py                        # 256 records, 200 ms, N = 8 32 64
    python benchmarks/generate_throughput.py --latency 0.05 --no-cache --json rows.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
SUPPORT = HERE.parent / "tests" / "_support"
sys.path.insert(0, str(SUPPORT))
sys.path.insert(0, str(HERE))

from _machine import cpu_description, describe  # noqa: E402

CAPTIONS = ["a red bus", "two cats", "a bowl of soup"]
#: the model name of the capacity probe's calls (answered "ok" after the latency, no script)
PROBE = "probe"


def _serve(conn, latency: float) -> None:
    """The server process: a FakeOpenAI answering the paragraph script after ``latency``;
    commands on ``conn``: "reset" (a fresh script, counters at 0), "stats", "stop"."""
    sys.path.insert(0, str(SUPPORT))
    from _fake_openai import FakeOpenAI, answer
    from _scripted_models import ParagraphModels

    state = {"models": ParagraphModels(glitches=False)}

    def script(body):
        if body["model"] == PROBE:
            return answer("ok", latency)
        reply = state["models"](body)
        return answer(reply, latency) if isinstance(reply, str) else reply

    with FakeOpenAI(script) as server:
        conn.send(server.url)
        cpu = time.process_time()
        while True:
            command = conn.recv()
            if command == "reset":
                with server._lock:
                    state["models"] = ParagraphModels(glitches=False)
                    server.requests.clear()
                    server.max_in_flight = 0
                cpu = time.process_time()
                conn.send(None)
            elif command == "stats":
                conn.send({"calls": len(server.requests), "max_in_flight": server.max_in_flight,
                           "server_cpu_s": time.process_time() - cpu})
            else:
                conn.send(None)
                return


class Server:
    def __init__(self, latency: float) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, latency), daemon=True)
        self._process.start()
        self.url = self._conn.recv()

    def ask(self, command: str):
        self._conn.send(command)
        return self._conn.recv()

    def close(self) -> None:
        self.ask("stop")
        self._process.join(timeout=10)


def probe_capacity(server: Server, concurrency: int, rounds: int, latency: float) -> dict:
    """Calls/s of ``concurrency`` minimal clients (one kept-alive connection each), and the
    fraction of the ideal ``concurrency / latency`` they reach."""
    server.ask("reset")
    where = urlsplit(server.url)
    body = json.dumps({"model": PROBE, "messages": [{"role": "user", "content": "hi"}]}).encode()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer EMPTY"}
    failures = []

    def worker() -> None:
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
        try:
            for _ in range(rounds):
                conn.request("POST", where.path + "/chat/completions", body, headers)
                response = conn.getresponse()
                data = response.read()
                if response.status != 200:
                    failures.append(response.status)
                json.loads(data)
        finally:
            conn.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    stats = server.ask("stats")
    if failures or stats["calls"] != concurrency * rounds:
        raise SystemExit(f"the capacity probe failed: {stats['calls']} calls answered, statuses {failures[:5]}")
    calls_per_s = stats["calls"] / seconds
    return {"concurrency": concurrency, "calls_per_s": calls_per_s, "ideal_calls_per_s": concurrency / latency,
            "fraction_of_ideal": calls_per_s * latency / concurrency, "max_in_flight": stats["max_in_flight"]}


def run_pipeline(server: Server, items: Path, out: Path, records: int, concurrency: int, cache: bool) -> dict:
    from vlr_plugins.chat.cache import ChatCache
    from vlr_plugins.generate.pipeline import load_pipeline
    from vlr_plugins.generate.runner import generate_corpus

    server.ask("reset")
    role = {"base_url": server.url, "concurrency": concurrency}
    pipeline = load_pipeline("paragraph", {"roles": {"captioner": role, "judge": role}, "records_per_part": records})
    cache_path = out / "llm-cache.sqlite"
    start, cpu = time.perf_counter(), time.process_time()
    result = generate_corpus(pipeline, items, out, cache=cache_path if cache else None, report=lambda line: None)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    stats = server.ask("stats")
    row = {"concurrency": concurrency, "records": records, "seconds": seconds, "records_per_s": records / seconds,
           "calls": stats["calls"], "calls_per_record": stats["calls"] / records,
           "max_in_flight": stats["max_in_flight"], "complete": result["complete"],
           "client_cpu_ms_per_call": 1000 * cpu / stats["calls"],
           "server_cpu_ms_per_call": 1000 * stats["server_cpu_s"] / stats["calls"]}
    if cache:
        with ChatCache(cache_path) as c:
            row["cached_answers"] = len(c)
        if row["cached_answers"] != stats["calls"]:
            raise SystemExit(f"concurrency {concurrency}: {row['cached_answers']} answers cached of {stats['calls']}")
    return row


def write_items(folder: Path, count: int, offset: int) -> Path:
    from _scripted_models import write_images

    # every caption its own (scored 8 by the script): 4 calls a record, none regenerated
    captions = [f"{CAPTIONS[i % 3]} number {i}" for i in range(offset, offset + count)]
    records = write_images(folder, captions)
    items = folder / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return items


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=256, help="records of each run at concurrency N")
    p.add_argument("--serial-records", type=int, default=16,
                   help="records of the concurrency-1 baseline (its records/s does not depend on the count)")
    p.add_argument("--latency", type=float, default=0.2, help="seconds per answer")
    p.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 64])
    p.add_argument("--probe-rounds", type=int, default=8, help="calls of each capacity-probe connection")
    p.add_argument("--no-cache", action="store_true", help="run without the answer cache (vlr generate --no-cache)")
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "EMPTY")
    machine, load_before = describe(), os.getloadavg()
    server = Server(args.latency)
    rows, probes = [], []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            serial_items = write_items(root / "serial", args.serial_records, 0)
            items = write_items(root / "images", args.records, args.serial_records)
            # imports and first calls (the openai package, the pipeline's modules) are paid here, not by the baseline
            run_pipeline(server, write_items(root / "warm-up", 2, 0), root / "out-warm-up", 2, 2, not args.no_cache)
            for c in args.concurrency:
                probes.append(probe_capacity(server, c, args.probe_rounds, args.latency))
            rows.append(run_pipeline(server, serial_items, root / "out-1", args.serial_records, 1, not args.no_cache))
            for c in args.concurrency:
                rows.append(run_pipeline(server, items, root / f"out-{c}", args.records, c, not args.no_cache))
    finally:
        server.close()
    load_after = os.getloadavg()
    base = rows[0]["records_per_s"]
    for r in rows:
        r["speed_up"] = r["records_per_s"] / base
        r["fraction_of_ideal"] = r["speed_up"] / r["concurrency"]
    cache = "without the cache" if args.no_cache else "with the answer cache"
    print(f"{machine}; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after (1 min)")
    print(f"paragraph pipeline, {args.latency * 1000:.0f} ms per call, loopback server in its own process, {cache}")
    print("| concurrency | records | seconds | records/s | calls/record | most calls in flight | "
          "client CPU ms/call | server CPU ms/call | speed-up | of ideal |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['records']} | {r['seconds']:.2f} | {r['records_per_s']:.2f} | "
              f"{r['calls_per_record']:.2f} | {r['max_in_flight']} | {r['client_cpu_ms_per_call']:.2f} | "
              f"{r['server_cpu_ms_per_call']:.2f} | {r['speed_up']:.1f}x | {r['fraction_of_ideal']:.2f} |")
    print(f"\nthe server alone: minimal clients (http.client, one connection each), {args.probe_rounds} calls each")
    print("| connections | calls/s | ideal calls/s | of ideal | most calls in flight |")
    print("|---:|---:|---:|---:|---:|")
    for q in probes:
        print(f"| {q['concurrency']} | {q['calls_per_s']:.1f} | {q['ideal_calls_per_s']:.1f} | "
              f"{q['fraction_of_ideal']:.2f} | {q['max_in_flight']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": cpu_description(), "load_average": [load_before, load_after],
                                               "latency": args.latency, "cache": not args.no_cache,
                                               "rows": rows, "server_capacity": probes}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
