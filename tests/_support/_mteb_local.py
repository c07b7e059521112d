"""A small MTEB retrieval task built in memory (no download): queries, a corpus and their relevance.

``local_task(name, category, queries, corpus, relevant)`` returns an instance of a new
``AbsTaskRetrieval`` subclass whose ``load_data`` is the given columns, as MTEB's own mock
tasks are built. ``queries`` / ``corpus``: column name (``text``, ``image``, ``video``) ->
values; ids are ``q0, q1, ...`` and ``d0, d1, ...``; ``relevant``: query index -> document
indices (relevance 1).
"""

from __future__ import annotations

from typing import Any

_MODALITY = {"t": "text", "i": "image", "v": "video"}


def local_task(name: str, category: str, queries: dict[str, list[Any]], corpus: dict[str, list[Any]],
               relevant: dict[int, list[int]]) -> Any:
    from datasets import Dataset, Video
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
    from mteb.abstasks.task_metadata import TaskMetadata

    modalities = sorted({_MODALITY[c] for c in category if c in _MODALITY})
    metadata = TaskMetadata(
        name=name, description="a local retrieval task built in a test", reference="https://example.org",
        dataset={"path": "NA", "revision": "NA"}, type="Any2AnyRetrieval", category=category,
        modalities=modalities, eval_splits=["test"], eval_langs=["eng-Latn"], main_score="ndcg_at_10",
        date=None, domains=None, task_subtypes=None, license=None, annotations_creators=None, dialect=None,
        sample_creation=None, bibtex_citation="")

    def dataset(columns: dict[str, list[Any]], prefix: str) -> Any:
        count = len(next(iter(columns.values())))
        ds = Dataset.from_dict({"id": [f"{prefix}{i}" for i in range(count)], **columns})
        return ds.cast_column("video", Video()) if "video" in columns else ds

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        split = RetrievalSplitData(
            queries=dataset(queries, "q"), corpus=dataset(corpus, "d"),
            relevant_docs={f"q{q}": {f"d{d}": 1 for d in docs} for q, docs in relevant.items()}, top_ranked=None)
        self.dataset = {"default": {"test": split}}
        self.data_loaded = True

    cls = type(name, (AbsTaskRetrieval,), {"metadata": metadata, "load_data": load_data})
    return cls()


def scores_of(result: Any) -> dict[str, float]:
    """The test split's scores of one task in an ``mteb.evaluate`` result."""
    (task,) = result.task_results
    (row,) = task.scores["test"]
    return row
