"""The multi-view caption corpus (MVC paper sec. 3.1, appendix A.2): two captioning models'
summary and detailed captions, each detailed caption refined by a reasoning model, and
two semantic positives from one refined caption chosen at random.

Stages (each answered by one role):

==============  ============  ==================================================================
stage           role          what it adds
==============  ============  ==================================================================
``caption-1``   captioner_1   ``S1`` (summary prompt) and ``D1`` (detailed prompt)
``caption-2``   captioner_2   ``S2`` and ``D2``
``refine``      refiner       ``D1*`` from ``D1`` and ``D2*`` from ``D2`` (the thinking removed)
``positives``   refiner       ``P1``, ``P2`` from ``D{m}*``, m drawn per record (``P_from``)
==============  ============  ==================================================================

Every model sees the video as ``frames.num_frames`` frames picked by ``frames.strategy``
(:func:`vlr_plugins.data.video.sample_frames`). A record (JSON Lines)::

    {"id", "video", "O", "S1", "S2", "D1", "D2", "D1*", "D2*", "P1", "P2",
     "meta": {"P_from": "D2*", "frames": {"num_frames", "strategy"}, "failures": [...],
              "generated_by": {view: model}}}

The audit keys live under ``meta``, which the MVC training reader ignores, so it reads the
corpus unchanged. A view whose request failed is ``null``, and its failure is in
``meta.failures``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator, Mapping
from typing import Any

from vlr_plugins.chat.media import video_part
from vlr_plugins.data._text_files import json_lines
from vlr_plugins.errors import ConfigError, DataFormatError
from vlr_plugins.generate.parsing import parse_list_answer, parse_text_answer, strip_thinking
from vlr_plugins.generate.stage import Stage, StepContext, failure_entry, record_seed

__all__ = ["MVCPipeline", "MVC_VIEWS"]

#: the caption views of a record, in order (O is the dataset's own caption)
MVC_VIEWS = ("O", "S1", "S2", "D1", "D2", "D1*", "D2*", "P1", "P2")


def _json_type(value: Any) -> str:
    return {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string",
            list: "array", dict: "object"}.get(type(value), type(value).__name__)


def _parse_caption(text: str) -> str:
    return parse_text_answer(text, what="caption")


def _parse_positives(text: str) -> list[str]:
    return parse_list_answer(strip_thinking(text), 2, what="positive captions")


def _media(record: dict[str, Any], ctx: StepContext) -> list[dict[str, Any]]:
    frames = ctx.options["frames"]
    return [video_part(record["video"], frames["num_frames"], frames["strategy"])]


def _caption(m: int):
    def step(record: dict[str, Any], ctx: StepContext):
        prompts = (f"summary_{m}", f"detailed_{m}")
        results = yield [ctx.request(p, record["id"], _media(record, ctx), parse=_parse_caption) for p in prompts]
        for view, prompt, result in zip((f"S{m}", f"D{m}"), prompts, results):
            record[view] = result.value if result.ok else None
            record["generated_by"][view] = ctx.model_of(prompt)
            if not result.ok:
                record["failures"].append(failure_entry(ctx.stage, prompt, result))
        return record
    step.__name__ = f"caption_{m}"
    return step


def _refine(record: dict[str, Any], ctx: StepContext):
    todo = [m for m in (1, 2) if record.get(f"D{m}") is not None]
    results = (yield [ctx.request("refine", record["id"], _media(record, ctx), parse=_parse_caption, attempt=m,
                                  caption=record[f"D{m}"]) for m in todo]) if todo else []
    for m in (1, 2):
        record[f"D{m}*"] = None
    for m, result in zip(todo, results):
        record[f"D{m}*"] = result.value if result.ok else None
        record["generated_by"][f"D{m}*"] = ctx.model_of("refine")
        if not result.ok:
            record["failures"].append(failure_entry(ctx.stage, "refine", result, view=f"D{m}*"))
    return record


def _positives(record: dict[str, Any], ctx: StepContext):
    rng = random.Random(record_seed(ctx.seed, record["id"], "choose refined caption"))
    drawn = rng.choice((1, 2))
    order = (drawn, 3 - drawn)  # the drawn caption, else the other one when the drawn one failed
    m = next((k for k in order if record.get(f"D{k}*") is not None), None)
    record["P1"] = record["P2"] = record["P_from"] = None
    if m is None:
        record["failures"].append({"stage": ctx.stage, "prompt": "positives", "error": "no refined caption "
                                   "(D1* and D2* both failed) to draw the positives from", "answer": None})
        return record
    [result] = yield [ctx.request("positives", record["id"], _media(record, ctx), parse=_parse_positives,
                                  refined_caption=record[f"D{m}*"])]
    record["P_from"] = f"D{m}*"
    if result.ok:
        record["P1"], record["P2"] = result.value
    else:
        record["failures"].append(failure_entry(ctx.stage, "positives", result))
    record["generated_by"]["P1"] = record["generated_by"]["P2"] = ctx.model_of("positives")
    return record


class MVCPipeline:
    """The ``mvc`` kind: prompts, options, stages, its input records and its output check."""

    name = "mvc"
    prompt_slots = {
        "summary_1": (set(), set()), "detailed_1": (set(), set()),
        "summary_2": (set(), set()), "detailed_2": (set(), set()),
        "refine": ({"caption"}, {"caption"}),
        "positives": ({"refined_caption"}, {"refined_caption"}),
    }
    list_prompts = ()
    fields = ("id", "video", *MVC_VIEWS, "meta")
    #: the audit keys, under ``meta`` on disk
    meta_keys = ("P_from", "frames", "failures", "generated_by")
    text_views = MVC_VIEWS

    def pack(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record as written: the views at the top, the audit keys under ``meta``."""
        out = {k: v for k, v in record.items() if k not in self.meta_keys}
        out["meta"] = {k: record[k] for k in self.meta_keys if k in record}
        return out

    def unpack(self, record: dict[str, Any]) -> dict[str, Any]:
        """A written record as the steps use it (the audit keys at the top)."""
        out = {k: v for k, v in record.items() if k != "meta"}
        out.update(record.get("meta") or {})
        return out

    def check_options(self, raw: Mapping[str, Any], where: str) -> dict[str, Any]:
        frames = raw.get("frames", {"num_frames": 16, "strategy": "uniform"})
        if not isinstance(frames, Mapping) or set(frames) != {"num_frames", "strategy"}:
            raise ConfigError(f"{where}: frames: expected {{num_frames: N, strategy: NAME}}, found {frames!r}")
        n = frames["num_frames"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"{where}: frames.num_frames: expected an integer >= 1, found {n!r}")
        # rand would show each call (and each rerun) other frames: a corpus must not depend on the run
        if frames["strategy"] not in ("uniform", "middle"):
            raise ConfigError(f"{where}: frames.strategy: expected uniform or middle (a corpus must not depend "
                              f"on the run, so not rand), found {frames['strategy']!r}")
        return {"frames": dict(frames)}

    def stages(self, options: Mapping[str, Any], prompts: Mapping[str, Any]) -> list[Stage]:
        out = []
        for name, members, step in (("caption-1", ("summary_1", "detailed_1"), _caption(1)),
                                    ("caption-2", ("summary_2", "detailed_2"), _caption(2)),
                                    ("refine", ("refine",), _refine), ("positives", ("positives",), _positives)):
            roles = {prompts[p].role for p in members}
            if len(roles) != 1:
                raise ConfigError(f"prompts.{members[1]}.role: stage {name} asks one role; "
                                  f"{members[0]} and {members[1]} name {sorted(roles)}")
            out.append(Stage(name, roles.pop(), step))
        return out

    def read_input(self, path: str | os.PathLike[str], keys: Mapping[str, str],
                   options: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """Input records ``{id, caption, video}`` from JSON Lines (key names from ``keys``:
        ``caption``, ``media``); video paths relative to ``media_root`` (default: the file's
        folder). Errors name the file, the line and the key. A video file that is not there
        is refused here, before any call: a role sending frames decodes it on this machine,
        and one sending ``file://`` URLs names this machine's path to a server beside it."""
        caption_key, media_key = keys.get("caption", "caption"), keys.get("media", "video")
        root = os.path.abspath(keys.get("media_root") or os.path.dirname(os.path.abspath(path)))
        frames = dict(options["frames"])
        first_seen: dict[str, int] = {}
        for line_no, item in json_lines(path):
            if not isinstance(item, dict):
                raise DataFormatError(path, f"expected a JSON object, found {_json_type(item)}", record=line_no)
            rid = item.get("id")
            if isinstance(rid, bool) or not isinstance(rid, (str, int)) or not str(rid).strip():
                raise DataFormatError(path, f"expected a non-empty string or an integer, found {rid!r}",
                                      record=line_no, field="id")
            if str(rid) in first_seen:
                raise DataFormatError(path, f"duplicate id {str(rid)!r}, first seen on line {first_seen[str(rid)]}",
                                      record=line_no, field="id")
            first_seen[str(rid)] = line_no
            for key in (caption_key, media_key):
                value = item.get(key)
                if not isinstance(value, str) or not value.strip():
                    raise DataFormatError(path, f"expected a non-empty string, found {_json_type(value)}",
                                          record=line_no, field=key)
            video = os.path.join(root, item[media_key])
            if not os.path.isfile(video):
                raise DataFormatError(path, f"no such video file: {video}", record=line_no, field=media_key)
            yield {"id": str(rid), "video": video, "O": item[caption_key],
                   "frames": frames, "failures": [], "generated_by": {}}

    def check_record(self, record: dict[str, Any], path: str | os.PathLike[str], line: int) -> None:
        """Every view a non-empty string or null (a failed one), ``O`` a string."""
        for view in MVC_VIEWS:
            value = record.get(view)
            if not (value is None and view != "O") and not (isinstance(value, str) and value.strip()):
                raise DataFormatError(path, f"expected a non-empty string{'' if view == 'O' else ' or null'}, "
                                            f"found {value!r}", record=line, field=view)
