"""``vlr capst``: score detailed captions with an LLM judge (CaReBench's CapST)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from vlr_plugins._argtypes import at_least

__all__ = ["add_cli"]


def _run(args: argparse.Namespace) -> int:
    from vlr_plugins._io import check_output_dir
    from vlr_plugins.chat.request import ChatSettings
    from vlr_plugins.errors import UsageError
    from vlr_plugins.eval.capst.report import capst_table_markdown
    from vlr_plugins.eval.capst.run import failure_summary, run_capst

    if args.benchmark != "carebench":
        raise UsageError("--benchmark", f"CapST scores CaReBench captions; found {args.benchmark!r}")
    for option, path in (("--captions", args.captions), ("--annotations", args.annotations),
                         ("--retrieval", args.retrieval)):
        if path is not None and not os.path.isfile(path):
            raise UsageError(option, f"no such file: {path}")
    check_output_dir(args.out, "--out")
    sampling = {"temperature": args.temperature}
    if args.max_tokens is not None:
        sampling["max_tokens"] = args.max_tokens
    settings = ChatSettings(model=args.judge_model, base_url=args.judge_url, api_key_env=args.judge_key_env,
                            concurrency=args.concurrency, timeout=args.timeout, max_retries=args.max_retries,
                            reasks=args.reasks, sampling=sampling)
    result = run_capst(args.captions, args.annotations, args.out, settings, label=args.label,
                       category_field=args.category_field, split_references=args.split_references,
                       allow_missing=args.allow_missing, cache=args.cache, retrieval=args.retrieval)
    print(capst_table_markdown({result["label"]: result}))
    if result.get("unified") is not None:
        print(f"unified score: {result['unified']}")
    files = result["files"]
    print(f"results: {', '.join(str(files[k]) for k in ('markdown', 'json', 'plot') if files.get(k))}")
    if result["failed"]:  # the report scores the others; the exit status says it is not the whole set
        print(f"error: {failure_summary(result)}; {files['markdown']} lists every failure", file=sys.stderr)
        return 1
    return 0


def add_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``vlr capst`` to the ``vlr`` command's subparsers (nothing heavy is imported here)."""
    s = subparsers.add_parser(
        "capst", help="score detailed video captions with an LLM judge (CaReBench CapST, Table 2)",
        description="Extract events and objects from reference and predicted captions with a judge "
                    "LLM behind any OpenAI-compatible endpoint, judge their entailment, and report "
                    "action / object F1 overall and per category (docs/capst.md). The key is read "
                    "from the environment variable --judge-key-env names, never from the command line. "
                    "Exit status: 0 every video scored; 1 some videos failed (the report scores the "
                    "others and lists them); 2 bad input, a refused key/model/URL, or every video failed "
                    "(nothing written).")
    s.add_argument("--captions", required=True, help="JSON Lines of {id, caption} (e.g. from a captioning run)")
    s.add_argument("--benchmark", default="carebench", help="the benchmark the captions are for (carebench)")
    s.add_argument("--annotations", required=True, help="CaReBench's metadata.json")
    s.add_argument("--judge-url", help="the endpoint's base URL, e.g. http://127.0.0.1:8000/v1 "
                                       "(default: OPENAI_BASE_URL or OpenAI's)")
    s.add_argument("--judge-model", required=True, help="the model name the endpoint serves")
    s.add_argument("--judge-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    s.add_argument("--concurrency", type=at_least(1), default=8)
    s.add_argument("--timeout", type=at_least(1, float), default=120.0, help="seconds per call")
    s.add_argument("--max-retries", type=at_least(0), default=6)
    s.add_argument("--reasks", type=at_least(0), default=3,
                   help="times a malformed answer is asked again before it counts as failed")
    s.add_argument("--temperature", type=at_least(0, float), default=0.0)
    s.add_argument("--max-tokens", type=at_least(1), default=None,
                   help="new tokens per judge answer (default: the endpoint's own limit)")
    s.add_argument("--cache", help="answer cache (SQLite; default OUT/llm-cache.sqlite)")
    s.add_argument("--label", help="the model's name in the report (default: the captions file's stem)")
    s.add_argument("--category-field", default="category", help="the category key of metadata.json")
    s.add_argument("--split-references", action="store_true",
                   help="events from the temporal caption, objects from the spatial one (sec. 3.4.2's "
                        "reading; the released code uses the detailed caption for both)")
    s.add_argument("--allow-missing", action="store_true", help="score videos without a caption as missing")
    s.add_argument("--retrieval", help="the same model's `vlr eval` results.json: adds CaRe's unified score")
    s.add_argument("--out", default="vlr-capst")
    s.set_defaults(fn=_run)
    return s
