"""The audit of a generated corpus (MVC paper appendix A.2, Table 8; the paragraph corpus's
scores and lengths): what ``vlr generate stats`` prints and plots.

* MVC: per view, the records that have it, the mean and standard deviation of its words
  (Table 8); for each detailed caption and its refinement (``D1 -> D1*``, ``D2 -> D2*``),
  the mean content-word Jaccard similarity and the exact-match rate.
* Paragraph: the histogram of the kept scores and of every attempt's score, how many
  attempts the records took, and the distribution of the paragraphs' lengths in words.
* Both: the failures per stage and prompt (from the records' ``failures``).

Definitions (the paper gives none; these are ours, and the tests compute them by hand):
*words* are whitespace-separated tokens; the standard deviation is the population one
(``ddof=0``); *content words* are the lowercased tokens ``[a-z0-9]+(?:'[a-z]+)?`` minus
:data:`FUNCTION_WORDS`, taken as a set; the Jaccard similarity of two empty sets is 1;
an *exact match* is the same text after surrounding whitespace is stripped and inner runs
of whitespace are made one space.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vlr_plugins.data._text_files import json_lines
from vlr_plugins.errors import DataFormatError, MissingFileError

__all__ = ["FUNCTION_WORDS", "content_words", "content_jaccard", "word_count", "mvc_audit", "paragraph_audit",
           "read_corpus", "corpus_audit", "format_audit", "plot_audit"]

#: English function words left out of content words (articles, pronouns, auxiliaries,
#: prepositions, conjunctions, a few adverbs)
FUNCTION_WORDS = frozenset("""
a an the this that these those it its it's they them their there here he him his she her hers we us our
you your i me my mine one ones someone something
is are was were be been being am do does did doing has have had having will would shall should can could
may might must
of in on at to from by with without for about into onto over under above below between through during
before after around along across behind near off out up down upon within toward towards against among
and or but nor so yet if then than as while when where which who whom whose what how why because
not no also very just only too all any both each few more most other some such own same again further
once
""".split())

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_PAIRS = (("D1", "D1*"), ("D2", "D2*"))


def word_count(text: str) -> int:
    """Whitespace-separated tokens of ``text``."""
    return len(text.split())


def content_words(text: str) -> frozenset[str]:
    """The set of ``text``'s lowercased tokens that are not :data:`FUNCTION_WORDS`."""
    return frozenset(t for t in _TOKEN.findall(text.lower()) if t not in FUNCTION_WORDS)


def content_jaccard(a: str, b: str) -> float:
    """``|A & B| / |A | B|`` of the content words of ``a`` and ``b`` (1.0 when both are empty)."""
    wa, wb = content_words(a), content_words(b)
    union = wa | wb
    return 1.0 if not union else len(wa & wb) / len(union)


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


def _moments(values: Sequence[float]) -> dict[str, Any]:
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "std": None}
    mean = sum(values) / n
    return {"n": n, "mean": mean, "std": math.sqrt(sum((v - mean) ** 2 for v in values) / n)}


def _failures(records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        for f in r.get("failures") or (r.get("meta") or {}).get("failures") or []:
            key = f"{f.get('stage')}/{f.get('prompt')}"
            out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))


def mvc_audit(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Table 8 and the refinement audit of MVC records (module docstring for definitions).

    Returns ``{"kind": "mvc", "records", "views": {view: {"n", "mean", "std"}},
    "refinement": {"D1->D1*": {"pairs", "jaccard", "exact_match_rate"}, ...}, "failures"}``.
    """
    from vlr_plugins.generate.mvc_pipeline import MVC_VIEWS

    views = {v: _moments([word_count(r[v]) for r in records if isinstance(r.get(v), str)]) for v in MVC_VIEWS}
    refinement = {}
    for draft, refined in _PAIRS:
        pairs = [(r[draft], r[refined]) for r in records
                 if isinstance(r.get(draft), str) and isinstance(r.get(refined), str)]
        refinement[f"{draft}->{refined}"] = {
            "pairs": len(pairs),
            "jaccard": sum(content_jaccard(a, b) for a, b in pairs) / len(pairs) if pairs else None,
            "exact_match_rate": sum(_same_text(a, b) for a, b in pairs) / len(pairs) if pairs else None,
        }
    return {"kind": "mvc", "records": len(records), "views": views, "refinement": refinement,
            "failures": _failures(records)}


def _quantile(sorted_values: Sequence[int], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _histogram(values: Iterable[Any]) -> dict[str, int]:
    out: dict[Any, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return {str(k): out[k] for k in sorted(out)}


def paragraph_audit(records: Sequence[Mapping[str, Any]], bin_words: int = 10) -> dict[str, Any]:
    """Scores and paragraph lengths of paragraph-supervision records.

    Returns ``{"kind": "paragraph", "records", "scores": {score: count} (kept scores),
    "attempt_scores": {score: count} (every scored attempt), "unscored", "attempts": {n: count},
    "regenerated", "paragraphs": {"n", "mean", "std", "min", "p10", "p50", "p90", "max",
    "histogram": {"0-9": count, ...}}, "failures"}``; lengths in words, bins of ``bin_words``.
    """
    kept = [r["score"] for r in records if r.get("score") is not None]
    every = [a["score"] for r in records for a in r.get("attempts") or [] if a.get("score") is not None]
    lengths = sorted(word_count(r["paragraph"]) for r in records if isinstance(r.get("paragraph"), str))
    paragraphs: dict[str, Any] = _moments(lengths)
    if lengths:
        paragraphs.update(min=lengths[0], p10=_quantile(lengths, 0.1), p50=_quantile(lengths, 0.5),
                          p90=_quantile(lengths, 0.9), max=lengths[-1])
        bins: dict[int, int] = {}
        for n in lengths:
            bins[n // bin_words] = bins.get(n // bin_words, 0) + 1
        paragraphs["histogram"] = {f"{b * bin_words}-{(b + 1) * bin_words - 1}": bins[b] for b in sorted(bins)}
    attempts = [len(r.get("attempts") or []) for r in records]
    return {"kind": "paragraph", "records": len(records), "scores": _histogram(kept),
            "attempt_scores": _histogram(every), "unscored": len(records) - len(kept),
            "attempts": _histogram(attempts), "regenerated": sum(n > 1 for n in attempts),
            "paragraphs": paragraphs, "failures": _failures(records)}


def read_corpus(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a corpus: a ``vlr generate`` output folder (its ``corpus.jsonl``, or
    its last stage's parts when it was not merged) or a JSON Lines file."""
    p = Path(path)
    if p.is_dir():
        manifest = p / "manifest.json"
        if not manifest.is_file():
            raise MissingFileError(f"{p}: no manifest.json; the run is not finished (rerun `vlr generate` "
                                   "with the same --out to finish it), or this is not a `vlr generate` folder")
        corpus = json.loads(manifest.read_text(encoding="utf-8"))["corpus"]
        files = [p / corpus["file"]] if "file" in corpus else sorted((p / corpus["folder"]).glob("part-*.jsonl"))
    elif p.is_file():
        files = [p]
    else:
        raise MissingFileError(f"{p}: no such corpus file or folder")
    records = []
    for f in files:
        for line_no, record in json_lines(f):
            if not isinstance(record, dict):
                raise DataFormatError(f, "expected a JSON object", record=line_no)
            records.append(record)
    if not records:
        raise DataFormatError(p, "no records")
    return records


def corpus_audit(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The audit of the corpus at ``path``: :func:`mvc_audit` for records with ``D1``,
    :func:`paragraph_audit` for records with ``paragraph``."""
    records = read_corpus(path)
    first = records[0]
    if "D1" in first or "S1" in first:
        return mvc_audit(records)
    if "paragraph" in first or "attempts" in first:
        return paragraph_audit(records)
    raise DataFormatError(path, "neither an mvc corpus (records with S1, D1 ...) nor a paragraph corpus "
                                f"(records with paragraph); the first record's keys: {sorted(first)}")


def _num(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _percent(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def format_audit(audit: Mapping[str, Any]) -> str:
    """The audit as text tables (Markdown), what ``vlr generate stats`` prints."""
    lines = [f"{audit['records']} records ({audit['kind']} corpus)", ""]
    if audit["kind"] == "mvc":
        lines += ["| view | records | mean words | std |", "|---|---:|---:|---:|"]
        lines += [f"| {v} | {s['n']} | {_num(s['mean'])} | {_num(s['std'])} |" for v, s in audit["views"].items()]
        lines += ["", "| refinement | pairs | content-word Jaccard | exact match |", "|---|---:|---:|---:|"]
        lines += [f"| {k} | {s['pairs']} | {_num(s['jaccard'], 3)} | {_percent(s['exact_match_rate'])} |"
                  for k, s in audit["refinement"].items()]
    else:
        lines += ["| score | kept | all attempts |", "|---:|---:|---:|"]
        keys = sorted(set(audit["scores"]) | set(audit["attempt_scores"]), key=float)
        lines += [f"| {k} | {audit['scores'].get(k, 0)} | {audit['attempt_scores'].get(k, 0)} |" for k in keys]
        lines += ["", f"unscored: {audit['unscored']}; regenerated: {audit['regenerated']}; attempts per record: "
                      + ", ".join(f"{n}: {c}" for n, c in audit["attempts"].items())]
        p = audit["paragraphs"]
        lines += [f"paragraph words: n {p['n']}, mean {_num(p['mean'])}, std {_num(p['std'])}"
                  + (f", min {p['min']}, p10 {_num(p['p10'])}, median {_num(p['p50'])}, p90 {_num(p['p90'])}, "
                     f"max {p['max']}" if p["n"] else "")]
        if p["n"]:
            lines += ["", "| paragraph words | records |", "|---|---:|"]
            lines += [f"| {b} | {c} |" for b, c in p["histogram"].items()]
    failures = audit["failures"]
    lines += ["", "failures: " + (", ".join(f"{k} {n}" for k, n in failures.items()) if failures else "none")]
    return "\n".join(lines)


def plot_audit(audit: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Plot the audit to an image file (PNG, PDF, SVG by suffix); needs matplotlib
    (``pip install 'vlr-plugins[plot]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("plotting needs matplotlib: pip install 'vlr-plugins[plot]'") from e
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    if audit["kind"] == "mvc":
        views = [v for v, s in audit["views"].items() if s["n"]]
        left.bar(views, [audit["views"][v]["mean"] for v in views],
                 yerr=[audit["views"][v]["std"] for v in views], capsize=3)
        left.set_ylabel("words (mean, std)")
        left.set_title("words per view")
        pairs = list(audit["refinement"])
        right.bar([f"{k}\nJaccard" for k in pairs], [audit["refinement"][k]["jaccard"] or 0 for k in pairs])
        right.bar([f"{k}\nexact" for k in pairs], [audit["refinement"][k]["exact_match_rate"] or 0 for k in pairs])
        right.set_ylim(0, 1)
        right.set_title("detailed caption vs. its refinement")
    else:
        keys = sorted(set(audit["scores"]) | set(audit["attempt_scores"]), key=float)
        x = range(len(keys))
        left.bar([i - 0.2 for i in x], [audit["attempt_scores"].get(k, 0) for k in keys], 0.4, label="all attempts")
        left.bar([i + 0.2 for i in x], [audit["scores"].get(k, 0) for k in keys], 0.4, label="kept")
        left.set_xticks(list(x), keys)
        left.set_xlabel("judge score")
        left.legend()
        left.set_title("scores")
        hist = audit["paragraphs"].get("histogram", {})
        right.bar(list(hist), list(hist.values()))
        right.set_xlabel("paragraph words")
        right.tick_params(axis="x", labelrotation=45)
        right.set_title("paragraph lengths")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
