"""CapST end to end: extract elements from the predicted and reference captions, judge each
element against the other caption, and score (CaReBench sec. 3.4.2, Table 2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vlr_plugins.chat.request import ChatRequest
from vlr_plugins.errors import UserError
from vlr_plugins.eval.capst.answers import elements_parser, judgement_parser
from vlr_plugins.eval.capst.inputs import CapstReference
from vlr_plugins.eval.capst.prompts import ELEMENT_KINDS, extraction_messages, judgement_messages
from vlr_plugins.eval.capst.scoring import SCORE_KINDS, capst_table, entailed_share

if TYPE_CHECKING:
    from vlr_plugins.chat.openai_chat import OpenAIChatClient

__all__ = ["capst_requests_per_video", "evaluate_capst"]

_SPLIT_SOURCE = {"events": "temporal", "objects": "spatial"}
_SHOWN = 10


def capst_requests_per_video(*, reference_elements_given: bool = False) -> int:
    """The most chat requests one video costs (before re-asks and retries): extraction of
    events and objects from the predicted caption (2) and, unless the annotation lists
    them, from the reference (2); then 4 judgements (recall and precision, events and
    objects), each skipped when its list is empty. 8, or 6 with reference elements given."""
    return 2 + (0 if reference_elements_given else 2) + 4


def _ids(ids: Sequence[str]) -> str:
    shown = ", ".join(repr(i) for i in ids[:_SHOWN])
    return shown + (f" ... and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else "")


def _match(captions: Mapping[str, str], references: Sequence[CapstReference],
           allow_missing: bool) -> tuple[list[CapstReference], list[str]]:
    known = {r.id for r in references}
    unknown = [vid for vid in captions if vid not in known]
    if unknown:
        raise UserError(f"{len(unknown)} caption id(s) are not videos of the benchmark: {_ids(unknown)} "
                        "(ids are the video file names without extension)")
    missing = [r.id for r in references if r.id not in captions]
    if missing and not allow_missing:
        raise UserError(f"{len(missing)} of {len(references)} benchmark videos have no caption: "
                        f"{_ids(missing)}; give them all, or allow missing captions to score the rest")
    return [r for r in references if r.id in captions], missing


def _reference_text(ref: CapstReference, kind: str, split_references: bool) -> str:
    if split_references:
        text = getattr(ref, _SPLIT_SOURCE[kind])
        if text is None:
            raise UserError(f"video {ref.id!r} has no {_SPLIT_SOURCE[kind]} caption to extract "
                            f"{kind} from (split_references)")
        return text
    return ref.caption


def evaluate_capst(captions: Mapping[str, str], references: Sequence[CapstReference],
                   client: OpenAIChatClient, *, split_references: bool = False,
                   allow_missing: bool = False) -> dict[str, Any]:
    """CapST of one model's captions against CaReBench, judged through ``client``.

    captions: ``{video id: caption}`` (:func:`~vlr_plugins.eval.capst.read_captions_jsonl`);
    references: :func:`~vlr_plugins.eval.capst.read_carebench_references`; client: an
    :class:`~vlr_plugins.chat.OpenAIChatClient` (its cache makes a rerun free).

    Per video, for events (action scores) and objects (object scores): the elements of
    the predicted caption and of the reference (listed in the annotation file, or
    extracted from the reference caption, or with ``split_references`` from the temporal
    caption for events and the spatial caption for objects, as sec. 3.4.2 describes);
    recall = share of reference elements the predicted caption entails, precision =
    share of predicted elements the reference caption entails (:func:`entailed_share`).
    Corpus scores: :func:`~vlr_plugins.eval.capst.capst_table`.

    A video whose extraction or judgement failed (endpoint errors, or an answer still
    malformed after the re-asks) is not scored: it is listed under ``"failed"`` with the
    stage and error, and left out of every mean (the table's ``n`` counts scored videos).
    Captions for ids the benchmark lacks are an error; benchmark videos without a caption
    are an error unless ``allow_missing`` (then listed under ``"missing"``).

    Returns ``{"scores": Table 2 cells (percent), "videos", "scored", "failed",
    "missing", "reference_elements_given", "requests": the client's counts for this run,
    "samples": per video, the elements, labels and shares}``.
    """
    scored_refs, missing = _match(captions, references, allow_missing)
    before = client.summary.as_dict()

    # 1. extraction: the predicted caption always, the reference where the file lists nothing
    extraction: list[tuple[str, str, str]] = []  # (video, "prediction" | "reference", kind)
    requests = []
    for ref in scored_refs:
        for kind in ELEMENT_KINDS:
            sources = [("prediction", captions[ref.id])]
            if getattr(ref, kind) is None:
                sources.append(("reference", _reference_text(ref, kind, split_references)))
            for side, text in sources:
                extraction.append((ref.id, side, kind))
                requests.append(ChatRequest(extraction_messages(text, kind),
                                            parse=elements_parser(kind)))
    results = client.complete_many(requests, desc="CapST extraction")

    elements: dict[str, dict[tuple[str, str], list[str]]] = {
        r.id: {("reference", k): list(getattr(r, k)) for k in ELEMENT_KINDS if getattr(r, k) is not None}
        for r in scored_refs}
    failed: dict[str, dict[str, str]] = {}
    for (vid, side, kind), result in zip(extraction, results):
        if result.ok:
            elements[vid][(side, kind)] = result.value
        elif vid not in failed:
            failed[vid] = {"id": vid, "stage": f"extracting {kind} from the {side}",
                           "error": result.error}

    # 2. judgement: each side's elements against the other side's caption; none for an empty list
    judged: list[tuple[str, str, str]] = []  # (video, "recall" | "precision", kind)
    requests = []
    by_id = {r.id: r for r in scored_refs}
    for vid in (r.id for r in scored_refs if r.id not in failed):
        for kind in ELEMENT_KINDS:
            for score, elems, description in (
                    ("recall", elements[vid][("reference", kind)], captions[vid]),
                    ("precision", elements[vid][("prediction", kind)], by_id[vid].caption)):
                if elems:
                    judged.append((vid, score, kind))
                    requests.append(ChatRequest(judgement_messages(description, elems, kind),
                                                parse=judgement_parser(kind, len(elems))))
    results = client.complete_many(requests, desc="CapST judgement")
    labels: dict[tuple[str, str, str], list[str]] = {}
    for (vid, score, kind), result in zip(judged, results):
        if result.ok:
            labels[(vid, score, kind)] = result.value
        elif vid not in failed:
            failed[vid] = {"id": vid, "stage": f"judging {kind} for {score}", "error": result.error}

    # 3. scores
    samples = []
    for ref in scored_refs:
        if ref.id in failed:
            continue
        sample: dict[str, Any] = {"id": ref.id, "category": ref.category}
        for column, kind in SCORE_KINDS.items():
            recall_labels = labels.get((ref.id, "recall", kind), [])
            precision_labels = labels.get((ref.id, "precision", kind), [])
            sample[column] = {"recall": entailed_share(recall_labels),
                              "precision": entailed_share(precision_labels)}
            sample[kind] = {"reference": elements[ref.id][("reference", kind)],
                            "prediction": elements[ref.id][("prediction", kind)],
                            "recall_labels": recall_labels, "precision_labels": precision_labels}
        samples.append(sample)

    after = client.summary.as_dict()
    return {
        "scores": capst_table(samples),
        "videos": len(references),
        "scored": len(samples),
        "failed": [failed[r.id] for r in scored_refs if r.id in failed],
        "missing": missing,
        "reference_elements_given": {k: sum(getattr(r, k) is not None for r in scored_refs)
                                     for k in ELEMENT_KINDS},
        "split_references": split_references,
        "requests": {k: after[k] - before[k] for k in after},
        "samples": samples,
    }
