"""The paragraph-supervision corpus (paper sec. 3.1, appendix A.1): five positives, five hard
negatives and a judge-scored paragraph per image, low-scoring paragraphs regenerated.

Stages (each answered by one role, so each may run on its own machine):

=================  ==========  ===============================================================
stage              role        what it adds
=================  ==========  ===============================================================
``texts``          captioner   ``positives``, ``hard_negatives``, paragraph attempt 1
``score-1``        judge       the score of every attempt not yet scored; the best one kept
``regenerate-2``   captioner   attempt 2, if no attempt scored above ``at_or_below``
``score-2``        judge       ...
...                            up to ``max_attempts`` (paper: 3)
=================  ==========  ===============================================================

A record (JSON Lines; :func:`vlr_plugins.data.read_paragraph_samples` reads it unchanged)::

    {"id", "caption", "image", "positives": [5], "hard_negatives": [5], "paragraph", "score",
     "attempts": [{"attempt": 1, "paragraph", "score", "score_answer"}, ...],
     "failures": [{"stage", "prompt", "attempt"?, "error", "answer"}], "generated_by": {prompt: model}}
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from vlr_plugins.chat.media import image_part
from vlr_plugins.errors import ConfigError, DataFormatError
from vlr_plugins.generate.parsing import parse_list_answer, parse_score_answer, parse_text_answer
from vlr_plugins.generate.stage import Stage, StepContext, failure_entry

__all__ = ["ParagraphPipeline"]


def _parse_paragraph(text: str) -> str:
    return parse_text_answer(text, what="paragraph")


def _best(attempts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The highest-scoring attempt (the earliest among equals); without any score, the
    first attempt that has a paragraph."""
    scored = [a for a in attempts if a.get("score") is not None]
    if scored:
        return max(scored, key=lambda a: (a["score"], -a["attempt"]))
    return next((a for a in attempts if a.get("paragraph") is not None), None)


def _keep_best(record: dict[str, Any]) -> None:
    best = _best(record["attempts"])
    record["paragraph"] = None if best is None else best["paragraph"]
    record["score"] = None if best is None else best.get("score")


def _texts(record: dict[str, Any], ctx: StepContext):
    media = [image_part(record["image"])]
    caption = record["caption"]
    rid = record["id"]
    positives, negatives, paragraph = yield [
        ctx.request("positives", rid, media, original_caption=caption,
                    parse=functools.partial(parse_list_answer, count=ctx.prompts["positives"].items)),
        ctx.request("hard_negatives", rid, media, original_caption=caption,
                    parse=functools.partial(parse_list_answer, count=ctx.prompts["hard_negatives"].items)),
        ctx.request("paragraph", rid, media, original_caption=caption, parse=_parse_paragraph, attempt=1),
    ]
    for name, result in (("positives", positives), ("hard_negatives", negatives)):
        record[name] = list(result.value) if result.ok else []
        if not result.ok:
            record["failures"].append(failure_entry(ctx.stage, name, result))
        record["generated_by"][name] = ctx.model_of(name)
    record["attempts"] = [_attempt(ctx, record, paragraph, 1)]
    record["generated_by"]["paragraph"] = ctx.model_of("paragraph")
    _keep_best(record)
    return record


def _attempt(ctx: StepContext, record: dict[str, Any], result: Any, n: int) -> dict[str, Any]:
    if not result.ok:
        record["failures"].append(failure_entry(ctx.stage, "paragraph", result, attempt=n))
    return {"attempt": n, "paragraph": result.value if result.ok else None, "score": None, "score_answer": None}


def _score(record: dict[str, Any], ctx: StepContext):
    todo = [a for a in record["attempts"]
            if a["paragraph"] is not None and a["score"] is None and a["score_answer"] is None]
    media = [image_part(record["image"])]
    if todo:
        results = yield [ctx.request("score", record["id"], media, parse=parse_score_answer, attempt=a["attempt"],
                                     paragraph=a["paragraph"], original_caption=record["caption"]) for a in todo]
        for attempt, result in zip(todo, results):
            attempt["score_answer"] = result.text if result.text is not None else ""
            if result.ok:
                attempt["score"] = result.value
            else:
                record["failures"].append(failure_entry(ctx.stage, "score", result, attempt=attempt["attempt"]))
        record["generated_by"]["score"] = ctx.model_of("score")
    _keep_best(record)
    return record


def _regenerate(record: dict[str, Any], ctx: StepContext):
    rule = ctx.options["regenerate"]
    attempts = record["attempts"]
    good = any(a["score"] is not None and a["score"] > rule["at_or_below"] for a in attempts)
    if not good and len(attempts) < rule["max_attempts"]:
        n = len(attempts) + 1
        [result] = yield [ctx.request("paragraph", record["id"], [image_part(record["image"])], attempt=n,
                                      parse=_parse_paragraph, original_caption=record["caption"])]
        attempts.append(_attempt(ctx, record, result, n))
        _keep_best(record)
    return record


def _place(path: str | os.PathLike[str], index: int) -> tuple[int | None, str]:
    """Where the ``index``-th record of an input file is, as its reader counts: the line of a
    JSON Lines file (blank lines skipped), the 0-based row of a Parquet file; ``None`` for a
    CSV/TSV file (a quoted field may span lines), whose message names the id instead."""
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".json"):
        from vlr_plugins.data._text_files import json_lines

        for n, (line_no, _) in enumerate(json_lines(path)):
            if n == index:
                return line_no, "line"
    if suffix == ".parquet":
        return index, "row"
    return None, "line"


class ParagraphPipeline:
    """The ``paragraph`` kind: prompts, options, stages, its input records and its output check."""

    name = "paragraph"
    #: prompt -> (slots it may use, slots it must hold)
    prompt_slots = {
        "positives": ({"original_caption"}, set()),
        "hard_negatives": ({"original_caption"}, set()),
        "paragraph": ({"original_caption"}, set()),
        "score": ({"paragraph", "original_caption"}, {"paragraph"}),
    }
    list_prompts = ("positives", "hard_negatives")
    #: the output record's keys, in order (others follow)
    fields = ("id", "caption", "image", "positives", "hard_negatives", "paragraph", "score", "attempts",
              "failures", "generated_by")
    text_views = ("caption", "positives", "hard_negatives", "paragraph")

    def pack(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record as written (the training reader ignores the audit keys): unchanged."""
        return record

    def unpack(self, record: dict[str, Any]) -> dict[str, Any]:
        return record

    def check_options(self, raw: Mapping[str, Any], where: str) -> dict[str, Any]:
        rule = raw.get("regenerate", {"at_or_below": 5, "max_attempts": 3})
        if not isinstance(rule, Mapping) or set(rule) != {"at_or_below", "max_attempts"}:
            raise ConfigError(f"{where}: regenerate: expected {{at_or_below: SCORE, max_attempts: N}}, found {rule!r}")
        if isinstance(rule["at_or_below"], bool) or not isinstance(rule["at_or_below"], (int, float)):
            raise ConfigError(f"{where}: regenerate.at_or_below: expected a score, found {rule['at_or_below']!r}")
        n = rule["max_attempts"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"{where}: regenerate.max_attempts: expected an integer >= 1, found {n!r}")
        return {"regenerate": dict(rule)}

    def stages(self, options: Mapping[str, Any], prompts: Mapping[str, Any]) -> list[Stage]:
        captioner, judge = prompts["paragraph"].role, prompts["score"].role
        for name in ("positives", "hard_negatives"):
            if prompts[name].role != captioner:
                raise ConfigError(f"prompts.{name}.role: the texts stage asks one role; expected {captioner!r} "
                                  f"(the paragraph's), found {prompts[name].role!r}")
        out = [Stage("texts", captioner, _texts), Stage("score-1", judge, _score)]
        for n in range(2, options["regenerate"]["max_attempts"] + 1):
            out += [Stage(f"regenerate-{n}", captioner, _regenerate), Stage(f"score-{n}", judge, _score)]
        return out

    def read_input(self, path: str | os.PathLike[str], keys: Mapping[str, str],
                   options: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """Input records ``{id, caption, image}`` through the training reader
        (:func:`~vlr_plugins.data.read_paragraph_samples`, so its checks and messages):
        JSON Lines, Parquet or CSV/TSV; image paths relative to the file's folder. An image
        file that is not there is refused here, before any call (every backend reads the
        image on this machine), naming the file, the line (or row) and the key."""
        from vlr_plugins.data.sample import read_paragraph_samples

        media_key = keys.get("media", "image")
        root = keys.get("media_root") or Path(path).resolve().parent
        samples = read_paragraph_samples(path, media_key=media_key, media_root=root,
                                         caption_key=keys.get("caption", "caption"))
        for i, s in enumerate(samples):
            if not os.path.isfile(s.media):
                record, kind = _place(path, i)
                where = "" if record is not None else f" (the record with id {s.id!r})"
                raise DataFormatError(path, f"no such image file: {s.media}{where}", record=record,
                                      field=media_key, record_kind=kind)
        for s in samples:
            yield {"id": s.id, "caption": s.caption, "image": s.media, "failures": [], "generated_by": {}}

    def check_record(self, record: dict[str, Any], path: str | os.PathLike[str], line: int) -> None:
        """The training reader's own check (:func:`~vlr_plugins.data.sample_from_record`)."""
        from vlr_plugins.data.sample import sample_from_record

        sample_from_record(record, path, line, media_key="image")
