"""``vlr mteb``'s run: an export scored on named MTEB tasks, MTEB's result files plus a results.json / .md summary.

MTEB's own files go where its ``ResultCache`` puts them under ``OUT``
(``results/<name>/<revision>/<Task>.json`` and ``model_meta.json``); ``results.json``
holds, per task, split and subset, the main score and the usual retrieval metrics, and
``results.md`` the same as a table. Every task is checked against the export's towers
before anything is encoded: a task whose queries or documents are of a modality the
export cannot encode is refused up front, not after an hour of the other side.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vlr_plugins.errors import ConfigError, UsageError

__all__ = ["SUMMARY_METRICS", "resolve_tasks", "run_mteb", "summary_markdown"]

#: the metrics results.json keeps of each task (when MTEB reports them), besides ``main_score``
SUMMARY_METRICS = ("ndcg_at_10", "map_at_10", "mrr_at_10", "recall_at_1", "recall_at_5", "recall_at_10")


def _local_task(spec: str) -> Any:
    from mteb.abstasks import AbsTask

    from vlr_plugins._imports import import_attr

    module, _, attr = spec.partition(":")
    task = import_attr(module, attr, lambda problem, kind: UsageError("--tasks", problem))
    if isinstance(task, type) and issubclass(task, AbsTask):
        task = task()
    if not isinstance(task, AbsTask):
        raise UsageError("--tasks", f"{spec} is a {type(task).__name__}, not an MTEB task (an AbsTask subclass)")
    return task


def resolve_tasks(names: Sequence[str]) -> list[Any]:
    """MTEB's task objects for ``names``: MTEB task names, or ``module:Class`` for a task of one's
    own (an ``AbsTask`` subclass, imported with the current folder first). An unknown name is a
    :class:`UsageError` with MTEB's suggestion."""
    import mteb

    tasks = []
    for name in names:
        if ":" in name:
            tasks.append(_local_task(name))
            continue
        try:
            tasks.append(mteb.get_task(name))
        except KeyError as e:
            message = str(e.args[0] if e.args else e)
            raise UsageError("--tasks", f"{name!r} is not an MTEB task ({message.removeprefix('KeyError: ')}); "
                                        "`mteb.get_tasks()` lists them") from None
    return tasks


def _sides(task: Any) -> list[tuple[str, set[str]]]:
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.types import PromptType

    metadata = task.metadata
    if isinstance(task, AbsTaskRetrieval):
        return [("queries", set(metadata.get_modalities(PromptType.query))),
                ("documents", set(metadata.get_modalities(PromptType.document)))]
    return [("inputs", set(metadata.modalities))]


def check_modalities(tasks: Sequence[Any], modalities: Sequence[str], folder: Path, kind: str) -> None:
    """Refuse (:class:`ConfigError`) a task with a side the export cannot encode."""
    have = set(modalities)
    for task in tasks:
        for side, needed in _sides(task):
            missing = sorted(needed - have)
            if missing:
                raise ConfigError(f"--tasks: {task.metadata.name}'s {side} are {'+'.join(sorted(needed))}, and the "
                                  f"{kind} export {folder} encodes {', '.join(sorted(have))} only (no "
                                  f"{' or '.join(missing)} tower); --frames N scores an image model on videos")


def _scores(result: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for split, rows in result.scores.items():
        for row in rows:
            kept = {"main_score": row.get("main_score")}
            kept.update({k: row[k] for k in SUMMARY_METRICS if k in row})
            out.setdefault(split, {})[row.get("hf_subset", "default")] = kept
    return out


def summary_markdown(summary: dict[str, Any]) -> str:
    """results.md: one row per task, split and subset."""
    lines = [f"# MTEB: {summary['name']} ({summary['revision']})", "",
             f"Export: `{summary['model']}` ({summary['kind']}; {', '.join(summary['modalities'])}).", "",
             "| task | split | subset | main score | " + " | ".join(SUMMARY_METRICS) + " |",
             "|---|---|---|---|" + "---|" * len(SUMMARY_METRICS)]
    for task, splits in summary["tasks"].items():
        for split, subsets in splits.items():
            for subset, row in subsets.items():
                cells = [f"{row[k]:.4f}" if isinstance(row.get(k), float) else "" for k in SUMMARY_METRICS]
                main = row.get("main_score")
                lines.append(f"| {task} | {split} | {subset} | {main:.4f} | " + " | ".join(cells) + " |"
                             if isinstance(main, float) else f"| {task} | {split} | {subset} | | " + " | ".join(cells)
                             + " |")
    return "\n".join(lines) + "\n"


def run_mteb(model: str | Path, tasks: Sequence[Any], *, out: str | Path | None = None, batch_size: int = 32,
             device: str | None = None, name: str | None = None, view: str | None = None,
             dtype: str | None = None, frames: int | None = None, show_progress_bar: bool = True,
             export: Any = None) -> dict[str, Any]:
    """Score the export ``model`` on ``tasks`` (MTEB task objects); returns the summary
    written to ``out/results.json`` (when ``out`` is given). ``frames``: score an image
    export on video tasks as the mean of that many frames (MTEB's ``Video2ImagesWrapper``)."""
    import mteb
    from mteb.models import Video2ImagesWrapper

    from vlr_plugins._io import atomic_write_json, atomic_write_text
    from vlr_plugins.integrations.mteb.encoder import VlrExportEncoder

    encoder = VlrExportEncoder(folder=model, device=device, name=name, view=view, dtype=dtype, export=export)
    wrapped: Any = encoder
    modalities = list(encoder.mteb_model_meta.modalities)
    if frames is not None:
        if "video" in modalities or "image" not in modalities:
            raise UsageError("--frames", f"is for image models on video tasks; {model} is a "
                                         f"{'video' if 'video' in modalities else 'text-only'} export")
        wrapped = Video2ImagesWrapper(encoder, num_frames=frames)
        modalities = list(wrapped.mteb_model_meta.modalities)
    check_modalities(tasks, modalities, Path(model), encoder.export.kind)
    cache = mteb.ResultCache(cache_path=Path(out)) if out is not None else None
    result = mteb.evaluate(wrapped, list(tasks), cache=cache, overwrite_strategy="always",
                           encode_kwargs={"batch_size": batch_size, "show_progress_bar": show_progress_bar},
                           show_progress_bar=show_progress_bar)
    meta = wrapped.mteb_model_meta
    summary = {"model": str(model), "kind": encoder.export.kind, "name": meta.name, "revision": meta.revision,
               "modalities": modalities, "mteb_version": mteb.__version__,
               "tasks": {r.task_name: _scores(r) for r in result.task_results}}
    if out is not None:
        atomic_write_json(Path(out) / "results.json", summary)
        atomic_write_text(Path(out) / "results.md", summary_markdown(summary))
    return summary
