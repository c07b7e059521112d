"""Records/s of the paragraph pipeline against a loopback OpenAI-compatible server whose
every answer takes a fixed latency, with the client's concurrency at 1 and at N.

The server is the tests' scripted one (tests/_support/_fake_openai.py, tests/_support/_scripted_models.py):
lists with preambles, a paragraph, a score of 8, so 4 calls a record (3 texts, 1 score).
With latency L per call and C calls per record, concurrency 1 gives about 1 / (C * L)
records/s; concurrency N overlaps calls of up to N records (the records of a part run side
by side, each asking its next call as soon as its last one is answered), so the ratio of
the two shows the pipelining. No model runs: this measures the driver, not a GPU.

    python benchmarks/generate_throughput.py                         # 64 records, 50 ms, C = 1, 8, 32
    python benchmarks/generate_throughput.py --records 256 --latency 0.1 --concurrency 1 64
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "_support"))

from _fake_openai import FakeOpenAI, answer  # noqa: E402
from _scripted_models import ParagraphModels, write_images  # noqa: E402

from vlr_plugins.generate.pipeline import load_pipeline  # noqa: E402
from vlr_plugins.generate.runner import generate_corpus  # noqa: E402

CAPTIONS = ["a red bus", "two cats", "a bowl of soup"]


def run_once(items: Path, out: Path, records: int, latency: float, concurrency: int) -> dict:
    models = ParagraphModels(glitches=False)

    def script(body):
        reply = models(body)
        return answer(reply, latency) if isinstance(reply, str) else reply

    with FakeOpenAI(script) as server:
        role = {"base_url": server.url, "concurrency": concurrency}
        pipeline = load_pipeline("paragraph", {"roles": {"captioner": role, "judge": role},
                                               "records_per_part": records})
        start = time.perf_counter()
        result = generate_corpus(pipeline, items, out, cache=None, report=lambda line: None)
        seconds = time.perf_counter() - start
    return {"concurrency": concurrency, "seconds": seconds, "records_per_s": records / seconds,
            "calls": len(server.requests), "calls_per_record": len(server.requests) / records,
            "max_in_flight": server.max_in_flight, "complete": result["complete"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=64)
    p.add_argument("--latency", type=float, default=0.05, help="seconds per answer")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--json", help="also write the rows here")
    args = p.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "EMPTY")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # every caption its own (scored 8 by the script): 4 calls a record, none regenerated
        captions = [f"{CAPTIONS[i % 3]} number {i}" for i in range(args.records)]
        records = write_images(root / "images", captions)
        items = root / "images" / "items.jsonl"
        items.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        for c in args.concurrency:
            rows.append(run_once(items, root / f"out-{c}", args.records, args.latency, c))
    base = rows[0]["records_per_s"]
    print(f"paragraph pipeline, {args.records} records, {args.latency * 1000:.0f} ms per call, loopback server")
    print("| concurrency | seconds | records/s | calls/record | most calls in flight | speed-up |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['seconds']:.2f} | {r['records_per_s']:.2f} | {r['calls_per_record']:.2f} | "
              f"{r['max_in_flight']} | {r['records_per_s'] / base:.1f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
