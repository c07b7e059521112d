"""``vlr mine --gallery-store STORE``: the gallery embedded once, by the whole job, and mined
against many times (docs/eval.md, "The gallery embedded once").

``vlr mine FORMAT INPUT --model M --gallery-store STORE --embed-gallery`` embeds the gallery of
the corpus (the texts mining searches, as the format and ``--pool`` define them) into STORE,
an embedding store whose ids are the gallery texts. Sharded (``--shard-index I --shard-count
N``, torchrun, ``--engine ray``), shard ``I`` embeds a contiguous run of whole batches of the
order the model embeds the gallery in (:meth:`TextEmbedder.order`) into its part, exactly as
``vlr precompute``'s shards do (precompute/sharded.py: resumable, kill -9 safe; the last shard
to finish merges). So every gallery text is embedded once in total, in the very batch (same
texts, same padding) a single process mining on the fly puts it in: the rows are those bits.

``vlr mine ... --gallery-store STORE --out OUT`` then reads the gallery's rows from STORE
instead of embedding it: every shard embeds only its own queries. STORE is checked first
against this run (:func:`open_gallery_store`): a finished store, written by ``--embed-gallery``
with the same ``--model``, ``--tokenizer``, ``--max-tokens`` and ``--model-dtype``, float32,
holding exactly this gallery; each refusal names ``index.json`` and its field.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import torch

from vlr_plugins.data.embedding_store import EmbeddingStore, check_store_target, _is_store
from vlr_plugins.data.store_parts import Parts, inputs_digest, parts_dir_of
from vlr_plugins.errors import DataFormatError, UsageError

__all__ = ["GALLERY_KEY", "check_query_width", "embed_gallery", "gallery_meta", "merge_gallery", "open_gallery_store"]

#: the entry of the store's meta that says which gallery it holds
GALLERY_KEY = "mine_gallery"
#: store meta key -> the option that sets it (named when a store or a part differs)
_OPTIONS = {"model": "--model", "tokenizer": "--tokenizer", "max_tokens": "--max-tokens",
            "model_dtype": "--model-dtype", "batch_size": "--batch-size", "dim": "--model", "dtype": "--model",
            f"{GALLERY_KEY}": "INPUT / --pool / --query", "shard.count": "--shard-count",
            "shard.batch_size": "--batch-size", "shard.items": "INPUT / --pool / --query",
            "shard.inputs": "INPUT / --pool / --query", "shard.layout": "--embed-gallery"}
_CHECKED = ("model", "tokenizer", "max_tokens", "model_dtype")  # the settings that make the embedding space
_LAYOUT = {"writer": "store", "shard_size": 100_000}  # one process' EmbeddingStoreWriter


def gallery_meta(task, args: argparse.Namespace) -> dict[str, Any]:
    """The store's meta: the model settings as given, and the gallery (its size and the SHA-256
    of its texts in gallery order) with the batch size it was embedded in."""
    return {**{key: getattr(args, key) for key in _CHECKED}, "batch_size": args.batch_size,
            GALLERY_KEY: {"texts": len(task.gallery), "sha256": inputs_digest(task.gallery)}}


def _unfinished(path: Path) -> str | None:
    """Why the store at ``path`` is not there yet, naming what is missing; None when nothing
    of it exists."""
    parts = Parts(path)
    if not parts.dir.is_dir():
        return None
    found = parts.counts_found()
    if not found:
        return f"{path} is not finished: {parts.dir} holds no finished part yet"
    count = max(found)
    missing = parts.missing(count)
    return (f"{path} is not finished: {len(missing)} of {count} gallery shards still to run or to finish "
            f"(e.g. --shard-index {missing[0]} --shard-count {count} with --embed-gallery; their parts go into "
            f"{parts.dir})" if missing else f"{path} is not merged yet: every part is in {parts.dir}; vlr mine ... "
            "--embed-gallery --merge-only merges them")


def open_gallery_store(path: str | os.PathLike[str], task, args: argparse.Namespace) -> EmbeddingStore:
    """STORE opened and checked against this run and its gallery, before anything is embedded."""
    path = Path(path)
    index = path / "index.json"
    if not _is_store(path):
        why = _unfinished(path)
        if why is not None:
            raise UsageError("--gallery-store", why)
        if not path.exists():
            raise UsageError("--gallery-store", f"{path}: no such store; write it first with the same command, "
                                                "--embed-gallery instead of --out")
    store = EmbeddingStore(path)  # a malformed index.json is refused there, naming its field
    stored = store.meta.get(GALLERY_KEY)
    if not isinstance(stored, dict):
        raise DataFormatError(index, "is not a gallery store of vlr mine (vlr mine ... --embed-gallery writes one: "
                                     "its ids are the gallery texts)", field=f"meta.{GALLERY_KEY}")
    for key in _CHECKED:
        if store.meta.get(key) != getattr(args, key):
            def given(value: Any) -> str:
                return "not given" if value is None else repr(value)

            raise DataFormatError(index, f"the gallery was embedded with {_OPTIONS[key]} "
                                         f"{given(store.meta.get(key))}, this run gives {given(getattr(args, key))}: "
                                         "not one embedding space; embed it again (--embed-gallery) or mine with the "
                                         "same settings", field=f"meta.{key}")
    if store.dtype != torch.float32:
        raise DataFormatError(index, f"holds {str(store.dtype).removeprefix('torch.')} rows; a gallery store is "
                                     "float32 (the rows mining embeds)", field="dtype")
    if len(store) != len(task.gallery):
        raise DataFormatError(index, f"holds {len(store)} texts, the gallery of {args.input} has "
                                     f"{len(task.gallery)} (another corpus, --pool or --query); embed it again",
                              field="count")
    missing = next((t for t in task.gallery if t not in store), None)
    if missing is not None:
        raise DataFormatError(index, f"has no row for the gallery text {missing!r} of {args.input} (another corpus, "
                                     "--pool or --query); embed it again", field="ids")
    if stored.get("sha256") != inputs_digest(task.gallery):  # the same texts, batched in another order
        raise DataFormatError(index, f"was embedded from the gallery of {args.input} in another order; embed it "
                                     "again", field=f"meta.{GALLERY_KEY}")
    store.check(task.gallery)  # every shard file there, of the shape index.json says
    return store


def check_query_width(store: EmbeddingStore, queries: torch.Tensor) -> None:
    if queries.shape[1] != store.dim:
        raise DataFormatError(store.path / "index.json", f"holds {store.dim}-d embeddings and the queries are "
                                                         f"{queries.shape[1]}-d: they are not one space",
                              field="dim")


def _requeued(path: Path, task, args: argparse.Namespace) -> bool:
    """STORE is finished: True when it holds this gallery of these settings (nothing to do);
    anything else is refused."""
    if parts_dir_of(path).exists() or not _is_store(path):
        return False
    try:
        with open_gallery_store(path, task, args):
            return True
    except DataFormatError as e:
        raise UsageError("--gallery-store", f"{path} is a store of another gallery or model ({e}); pass "
                                            "--overwrite to replace it, or give another --gallery-store") from None


def embed_gallery(task, args: argparse.Namespace, device: str) -> int:
    """``--embed-gallery``: this process' share of the gallery (all of it without shard options)
    into STORE; the last shard to finish merges the parts."""
    from vlr_plugins.mine.text_embedder import text_embedder

    path = Path(args.gallery_store)
    if not args.overwrite and _requeued(path, task, args):
        print(f"nothing to do: {path} already holds the gallery of {args.input} ({len(task.gallery)} texts) "
              "embedded with these settings")
        return 0
    if args.shard_count is None:
        check_store_target(path, overwrite=args.overwrite, flag="--overwrite")
    meta = gallery_meta(task, args)
    embedder = text_embedder(args, device)
    order = embedder.order(task.gallery)
    texts = [task.gallery[i] for i in order]  # rows in the order they are embedded: a shard's rows are a run of it
    if args.shard_count is None:
        from vlr_plugins.data.embedding_store import EmbeddingStoreWriter

        with torch.inference_mode():
            emb = embedder(task.gallery, "encode gallery")
        with EmbeddingStoreWriter(path, int(emb.shape[1]), meta=meta, overwrite=args.overwrite,
                                  shard_size=_LAYOUT["shard_size"]) as writer:
            writer.add(texts, emb[torch.tensor(order)])
        print(f"wrote the gallery of {args.input}: {len(texts)} texts, {int(emb.shape[1])}-d, to {path}")
        return 0
    return _embed_shard(path, embedder, texts, meta, args)


def _embed_shard(path: Path, embedder, texts: list[str], meta: dict[str, Any], args: argparse.Namespace) -> int:
    from vlr_plugins.data.resumable_store import read_store_progress
    from vlr_plugins.precompute.sharded import ShardJob

    job = ShardJob(path, texts, args.shard_index, args.shard_count, embedder.batch_size, _LAYOUT, "gallery texts",
                   options=_OPTIONS)
    resume = not args.overwrite
    if job.check(dim=None, dtype=torch.float32, meta=meta, resume=resume, overwrite=args.overwrite):
        print(f"{job.describe()}: its part {job.part} is finished already")
        return job.finish()
    mine = texts[job.start : job.stop]
    progress = read_store_progress(job.part) if resume else None
    writer = None if progress is None else job.writer(progress.dim, torch.float32, meta, resume=resume,
                                                      overwrite=args.overwrite)
    from tqdm.auto import tqdm

    try:
        with torch.inference_mode():
            for start in tqdm(range(0, len(mine), embedder.batch_size), desc=f"encode gallery, shard {job.index}",
                              unit="batch", leave=False):
                batch = mine[start : start + embedder.batch_size]  # one batch of the whole gallery's
                if writer is not None and all(t in writer for t in batch):
                    continue  # written before a kill
                emb = embedder(batch, "", progress=False)
                if writer is None:
                    writer = job.writer(int(emb.shape[1]), torch.float32, meta, resume=resume,
                                        overwrite=args.overwrite)
                keep = [k for k, t in enumerate(batch) if t not in writer]
                writer.add([batch[k] for k in keep], emb[torch.tensor(keep, dtype=torch.long)])
            if writer is None:  # a shard with no texts: its empty part needs the width
                dim = int(embedder(texts[:1], "", progress=False).shape[1])
                writer = job.writer(dim, torch.float32, meta, resume=resume, overwrite=args.overwrite)
        writer.close()
    except BaseException:
        if writer is not None:
            writer.interrupt()  # the rows written so far stay for the rerun
        raise
    return job.finish()


def merge_gallery(args: argparse.Namespace) -> int:
    """``--embed-gallery --merge-only``: the parts of every gallery shard merged into STORE."""
    from vlr_plugins.precompute.sharded import merge_only

    return merge_only(args.gallery_store, args.shard_count, options=_OPTIONS)
