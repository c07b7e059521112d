"""``vlr eval``: recall@1/5/10 (or the ``--metrics`` chosen) of a text model on image or video
benchmarks, with the papers' protocols and tables (docs/eval.md)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from vlr_plugins._argtypes import check_device, positive_int
from vlr_plugins.errors import UsageError
from vlr_plugins.eval.cli_renorm import add_renorm_options, renorm_from_args
from vlr_plugins.specs import (
    check_model_dtype_option,
    load_checked_text_encoder,
    load_text_model,
    load_text_tokenizer,
    model_dtype_record,
    refuse_tokenizer_options,
    text_model_source,
)

__all__ = ["add_cli", "cmd_eval"]


_MIN_TOKENS = 3  # [CLS] and [SEP] take 2


def _pairs(items: Sequence[str] | None, option: str) -> dict[str, int]:
    """``["short=20"]`` -> ``{"short": 20}``; budgets below 3 tokens are refused."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name or not value.isdigit():
            raise UsageError(option, f"expected NAME=INTEGER, found {item!r}")
        if int(value) < _MIN_TOKENS:
            raise UsageError(option, f"{item!r}: a budget must leave room for a word (>= {_MIN_TOKENS} tokens, "
                                     "special tokens included)")
        out[name] = int(value)
    return out


def _integers(text: str | None, option: str) -> list[int] | None:
    """``"20,40,77"`` -> ``[20, 40, 77]``: distinct budgets of at least 3 tokens."""
    if not text:
        return None
    try:
        values = [int(b) for b in text.split(",")]
    except ValueError:
        raise UsageError(option, f"expected integers such as 20,40,77, found {text!r}") from None
    if min(values) < _MIN_TOKENS:
        raise UsageError(option, f"budgets must leave room for a word (>= {_MIN_TOKENS} tokens, special tokens "
                                 f"included), found {min(values)}")
    if len(set(values)) < len(values):
        raise UsageError(option, f"a budget is given twice in {text!r}")
    return values


def _check_budgets(specs, budgets: dict[str, int], overrides: dict[str, int], protocol: str | None,
                   truncation: list[int] | None, max_positions: int | None, benchmarks: str) -> None:
    """The budgets the options give, against the benchmarks file and the encoder's positions."""
    names = [spec.name for spec in specs]
    for name in overrides:
        if name not in names:
            raise UsageError("--budget", f"{name!r} is no benchmark of {benchmarks} (its benchmarks: "
                                         f"{', '.join(names)})")
    if max_positions is None:
        return
    for spec in specs:
        budget = budgets.get(spec.name)
        if spec.max_tokens is None and budget is not None and budget > max_positions:
            option = "--budget" if spec.name in overrides else f"--protocol {protocol}"
            raise UsageError(option, f"{spec.name}={budget} exceeds the text encoder's {max_positions} positions")
    if truncation and max(truncation) > max_positions:
        raise UsageError("--truncation", f"{max(truncation)} exceeds the text encoder's {max_positions} positions")


def _table_names(text: str | None) -> list[str]:
    """``--tables mvc-table1,carebench-table4`` -> the names, each a shipped table layout."""
    from vlr_plugins.eval.tables import list_tables

    if not text:
        return []
    names = [n.strip() for n in text.split(",")]
    for name in names:
        if name not in list_tables():
            raise UsageError("--tables", f"unknown table {name!r}; known: {', '.join(list_tables())}")
    if len(set(names)) < len(names):
        raise UsageError("--tables", f"a table is named twice in {text!r}")
    return names


def _metrics(args: argparse.Namespace):
    """``--metrics`` and ``--truncation-metric``, checked: ``(choice, truncation metric)``."""
    from vlr_plugins.eval.metric_names import parse_metrics

    choice = parse_metrics(args.metrics, "--metrics")
    if args.truncation_metric is None:
        return choice, "r@1" if "r@1" in choice.names else choice.names[0]
    if not args.truncation:
        raise UsageError("--truncation-metric", "plots the curves of a truncation sweep: give --truncation too")
    metric = parse_metrics(args.truncation_metric, "--truncation-metric")
    if len(metric.names) != 1:
        raise UsageError("--truncation-metric", f"one metric, found {args.truncation_metric!r}")
    if metric.names[0] not in choice.names:
        raise UsageError("--truncation-metric", f"{metric.names[0]} is not computed in this run (--metrics "
                                                f"{','.join(choice.names)}): add it to --metrics")
    return choice, metric.names[0]


def _check_tables(names: Sequence[str], specs, benchmarks: str, metrics: Sequence[str] = ()) -> None:
    """Every table fills at least one column from the benchmarks, with metrics this run computes
    (``metrics``: the ``--metrics`` names); the columns it leaves empty are said."""
    from vlr_plugins.eval.tables import list_tables

    keys = [key for spec in specs for key in spec.result_keys()]
    for name in names:
        lacking = [m for m in list_tables()[name].metrics() if m not in metrics]
        if metrics and lacking:
            wanted = ",".join([*metrics, *lacking])
            raise UsageError("--tables", f"{name} shows {', '.join(lacking)}, which this run does not compute "
                                         f"(--metrics {','.join(metrics)}): give --metrics {wanted}")
        wanted = list_tables()[name].benchmarks()
        missing = [b for b in wanted if b not in keys]
        if len(missing) == len(wanted):
            raise UsageError("--tables", f"{name} reads benchmarks {', '.join(wanted)}, and {benchmarks} scores none "
                                         f"of them (it scores: {', '.join(keys)}); name them so, with text_kinds "
                                         "for a text kind (docs/eval.md)")
        if missing:
            print(f"warning: --tables {name}: {benchmarks} does not score {', '.join(missing)}; "
                  "their columns stay empty", file=sys.stderr)


def _eval_model(args: argparse.Namespace, specs, budgets: dict[str, int], overrides: dict[str, int],
                protocol: str | None, truncation: list[int] | None, device: str):
    """``(model, tokenizer, budgets)`` of ``--model``: a checkpoint with its tokenizer and the
    protocol's budgets, or a text model (open_clip, module:callable) and only the given ones."""
    if text_model_source(args.model) == "checkpoint":
        encoder = load_checked_text_encoder(args.model, "--model")
        _check_budgets(specs, budgets, overrides, protocol, truncation, getattr(encoder, "max_positions", None),
                       args.benchmarks)
        tokenizer = load_text_tokenizer(args.tokenizer, encoder, args.model)
        if args.rerank_k is not None:
            raise UsageError("--rerank-k", f"{args.model} is a text encoder without a matching head; re-ranking "
                                           "needs a model with match_scores (docs/eval.md)")
        return encoder.to(device), tokenizer, budgets
    refuse_tokenizer_options(args.model, {"--tokenizer": args.tokenizer, "--truncation": truncation})
    model = load_text_model(args.model, setting="--model", device=device, dtype=args.model_dtype)
    _check_budgets(specs, overrides, overrides, protocol, None, getattr(model, "max_positions", None),
                   args.benchmarks)
    if args.rerank_k is not None and not callable(getattr(model, "match_scores", None)):
        raise UsageError("--rerank-k", f"{args.model} has no matching head: re-ranking needs "
                                       "match_scores(item_ids, item_emb, texts) (docs/eval.md)")
    return model, None, overrides


def _capst_for_unified(path: str | None, specs, benchmarks: str,
                       metrics: Sequence[str] = ("r@1",)) -> tuple[dict | None, str | None]:
    """``--capst``: the CapST results and the CaReBench general result key the unified score reads."""
    if path is None:
        return None, None
    from vlr_plugins.eval.capst import load_capst_result

    if "r@1" not in metrics:
        raise UsageError("--capst", f"the unified score reads R@1, which this run does not compute (--metrics "
                                    f"{','.join(metrics)}): add r@1 to --metrics")
    if not os.path.isfile(path):
        raise UsageError("--capst", f"no such file: {path}")
    care = [s for s in specs if s.reader == "carebench"]
    if len(care) != 1:
        found = "none" if not care else ", ".join(s.name for s in care)
        raise UsageError("--capst", f"the unified score joins CapST with CaReBench general retrieval; "
                                    f"{benchmarks} must score one carebench benchmark, found {found}")
    keys = care[0].result_keys()
    key = f"{care[0].name}/general" if f"{care[0].name}/general" in keys else care[0].name
    if key not in keys:
        raise UsageError("--capst", f"{care[0].where('text_kinds')} leaves out 'general', which the unified "
                                    f"score reads")
    return load_capst_result(path), key


def cmd_eval(args: argparse.Namespace) -> int:
    import torch

    from vlr_plugins._io import check_output_dir
    from vlr_plugins.eval import evaluate_benchmarks, list_protocols, load_benchmark_specs, token_budgets
    from vlr_plugins.eval.report_files import write_eval_report

    # options, output folder, benchmarks file, model: all checked before any text is encoded
    from vlr_plugins.eval import _tile_calibration

    _tile_calibration.check_settings()  # VLR_CPU_BLAS, VLR_CPU_TILE_ELEMS, VLR_COUNT_KERNEL
    protocol = None if args.protocol in (None, "none") else args.protocol
    if protocol is not None and protocol not in list_protocols():
        raise UsageError("--protocol", f"unknown protocol {protocol!r}; known: {', '.join(list_protocols())}, or none")
    overrides = _pairs(args.budget, "--budget")
    budgets = token_budgets(protocol, overrides)
    truncation = _integers(args.truncation, "--truncation")
    tables = _table_names(args.tables)
    choice, truncation_metric = _metrics(args)
    check_model_dtype_option(args.model_dtype, args.model, "--model")
    device = check_device(args.device)
    check_output_dir(args.out, "--out")
    specs = load_benchmark_specs(args.benchmarks)
    _check_tables(tables, specs, args.benchmarks, choice.names)
    capst, capst_benchmark = _capst_for_unified(args.capst, specs, args.benchmarks, choice.names)
    renorm = renorm_from_args(args, specs)  # its banks read and checked before the model loads
    model, tokenizer, budgets = _eval_model(args, specs, budgets, overrides, protocol, truncation, device)
    recorded = model_dtype_record(args.model_dtype, model, args.model, device)
    label = args.label or os.path.splitext(os.path.basename(str(args.model).rstrip("/")))[0]

    def warn(message: str) -> None:
        print(f"warning: {message}", file=sys.stderr)

    # the engine reads and checks every benchmark and store before it encodes the first text
    with torch.inference_mode():
        result = evaluate_benchmarks(model, tokenizer, specs, budgets=budgets, truncation=truncation,
                                     batch_size=args.batch_size, device=device, protocol=protocol,
                                     rerank_k=args.rerank_k, on_warning=warn,
                                     metrics=choice if args.metrics is not None else None, renorm=renorm)
    unified = None
    if capst is not None:
        from vlr_plugins.eval.capst import unified_score

        unified = {**unified_score(result, capst, benchmark=capst_benchmark), "benchmark": capst_benchmark,
                   "capst": str(args.capst)}
    report = write_eval_report(result, args.out, model=str(args.model), label=label, protocol=protocol,
                               tables=tables, unified=unified, model_dtype=recorded.get("model_dtype"),
                               metrics=choice.names if args.metrics is not None else None,
                               truncation_metric=truncation_metric)
    if report["plots"] is None:
        print("matplotlib is not installed (the [plot] extra): no plots written", file=sys.stderr)
    print(report["table"])
    print(f"results: {report['json']}, {report['markdown']}")
    return 0


def add_cli(sub: Any) -> None:
    """Add ``vlr eval`` to the ``vlr`` command's subparsers."""
    from vlr_plugins.mllm.model_dtype import add_model_dtype_option

    s = sub.add_parser(
        "eval", help="recall@K and rank metrics of a text model on image or video benchmarks (exact)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Recall@1/5/10 (or the --metrics chosen: r@K, mdr, mnr, mrr@K, ...), both directions, of a\n"
                    "text model against precomputed item embeddings (images or videos; `vlr precompute`), in the\n"
                    "papers' tables if asked (docs/eval.md).\n\n"
                    "--model: a `vlr train` checkpoint (.pth); blip:<hub name or folder>;\n"
                    "open_clip:MODEL:CHECKPOINT_OR_TAG (open_clip:ViT-B-32:openai,\n"
                    "open_clip:ViT-B-16-quickgelu-ctx248:epoch_6.pt, open_clip:hf-hub:org/name, open_clip:local-dir:DIR,\n"
                    "open_clip:local-dir:DIR:logs/run/checkpoints/epoch_1.pt: DIR's config, the run's weights);\n"
                    "mllm:FOLDER[:PROMPT], a CaRe / E5-V MLLM folder or vlr export under an EOL prompt (care, e5v);\n"
                    "or module:callable, an object with encode_text(texts) -> (N, D) (the module imported from\n"
                    "the current folder first; a class or function is called without arguments to make it).")
    s.add_argument("--model", required=True,
                   help="a checkpoint (.pth), blip:<name>, open_clip:MODEL:CHECKPOINT_OR_TAG, mllm:FOLDER[:PROMPT] "
                        "or module:callable")
    s.add_argument("--benchmarks", required=True, help="YAML: benchmarks: [{name, reader, path, item_embeddings, ...}]")
    s.add_argument("--protocol", default="paragraph-supervision/table2",
                   help="per benchmark: token budget, frames and sampler, text view (eval/protocols.yaml); "
                        "'none' for only --budget")
    s.add_argument("--budget", nargs="*", metavar="NAME=N", help="override a benchmark's token budget")
    s.add_argument("--truncation", metavar="20,40,...", help="also sweep these encoding budgets and plot them")
    s.add_argument("--metrics", metavar="NAME,...",
                   help="the metrics to compute, both directions: r@K (recall at K), mdr, mnr (median / mean rank "
                        "of the best positive), mrr@K, ... (default r@1,r@5,r@10; docs/eval.md)")
    s.add_argument("--truncation-metric", metavar="NAME",
                   help="the metric the truncation curves plot, one of --metrics (default r@1)")
    s.add_argument("--tables", metavar="NAME,...",
                   help="also lay the results out as the papers' tables: mvc-table1, mvc-table3, carebench-table3, "
                        "carebench-table4, and with --metrics ...,mdr,mnr clip4clip-msrvtt, -msvd, -lsmdc, -didemo, "
                        "-activitynet")
    s.add_argument("--capst", metavar="CAPST_JSON",
                   help="the same model's `vlr capst` capst.json: adds CaRe's unified score (CaReBench Table 5)")
    s.add_argument("--rerank-k", type=positive_int, metavar="K",
                   help="re-rank each query's top K by the model's matching head (match_scores); UMT uses 128")
    add_renorm_options(s)
    s.add_argument("--tokenizer", help="default: the encoder's (checkpoints and blip: only)")
    s.add_argument("--label", help="name of this model in the report (default: file name)")
    s.add_argument("--out", default="vlr-eval", help="the folder to write the results into")
    s.add_argument("--batch-size", type=positive_int, default=256)
    s.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps")
    add_model_dtype_option(s, what="an mllm: --model")
    s.set_defaults(fn=cmd_eval)
