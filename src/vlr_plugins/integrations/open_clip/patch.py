"""The one place that patches open_clip_train: three names of ``open_clip_train.main``, and
the ``DistributedDataParallel`` it wraps the model in on CPU processes.

Inside :func:`patched_open_clip_train`, ``open_clip_train.main.main`` runs its own loop
with

* ``create_model_and_transforms``: the model it creates (stretched to a longer text
  context first, when asked) wrapped in :class:`TextBatchCLIP`;
* ``create_loss``: :class:`OpenCLIPLoss` around the chosen core loss (a loss with
  ``cache_chunk`` makes the model encode with gradient caching);
* ``get_data``: our training data (several texts per image, ``(images, TextBatch)``
  batches); validation and ImageNet zero-shot data stay open_clip_train's.

Under torchrun on CPU processes (gloo) open_clip_train wraps the model in
``torch.nn.parallel.DistributedDataParallel(model, device_ids=[device])``, which DDP refuses for
a module on the CPU: inside the block that name is a subclass that drops ``device_ids`` /
``output_device`` for a CPU module (DDP's CPU mode) and passes them on otherwise.

Nothing else of open_clip_train is touched; everything is restored on exit. Frozen
leading positional rows (Long-CLIP, ``train_new_only``) need nothing here: open_clip_train's
AdamW decays every 2-D weight, and :func:`vlr_plugins.text.freeze_leading_rows` restores
those rows after every step of any torch optimizer.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from vlr_plugins.data.sample import SAMPLE_SUFFIXES
from vlr_plugins.integrations.open_clip.dataset import (
    SampleTokenizer,
    TextViewsImageDataset,
    make_train_loader,
    read_image_text_samples,
)
from vlr_plugins.integrations.open_clip.long_clip_checkpoint import long_clip_model_name, refuse_under_short_name
from vlr_plugins.integrations.open_clip.long_context import (
    create_long_context_model_and_transforms,
)
from vlr_plugins.integrations.open_clip.loss import build_openclip_loss
from vlr_plugins.integrations.open_clip.model import TextBatchCLIP
from vlr_plugins.integrations.open_clip.options import VLRTrainOptions
from vlr_plugins.recipe import TextView, TextViews

__all__ = ["VLRTrainOptions", "patched_open_clip_train", "PATCHED_NAMES"]

PATCHED_NAMES = ("create_model_and_transforms", "create_loss", "get_data")
log = logging.getLogger(__name__)


class _Run:
    """State shared by the patched functions of one ``open_clip_train.main.main`` call."""

    def __init__(self, options: VLRTrainOptions, originals: dict[str, Any]) -> None:
        self.options, self.originals = options, originals
        self.model: torch.nn.Module | None = None
        self.loss = build_openclip_loss(options.loss, options.temperature)

    # ----------------------------------------------------------------- model
    def create_model_and_transforms(
        self, model_name: str, pretrained: str | None = None, **kwargs: Any
    ) -> tuple[Any, Any, Any]:
        if self.model is not None:
            raise RuntimeError(
                "open_clip_train created a second model (distillation?); the vlr "
                "integration supports one"
            )
        o = self.options
        if o.context_length is not None:
            model, *transforms = create_long_context_model_and_transforms(
                model_name,
                pretrained,
                context_length=o.context_length,
                keep=o.keep_positions,
                train_new_only=o.freeze_kept_positions,
                **kwargs,
            )
        else:
            try:
                model, *transforms = self.originals["create_model_and_transforms"](
                    model_name, pretrained, **kwargs
                )
            except RuntimeError as e:
                refuse_under_short_name(e, pretrained, setting="--pretrained",
                                        give=f"--model {long_clip_model_name(model_name)}")
                raise
        if isinstance(model, torch.jit.ScriptModule):
            raise ValueError("a TorchScript model cannot take a TextBatch: drop --torchscript")
        self.model = model
        return (TextBatchCLIP(model, cache_chunk=self.loss.cache_chunk), *transforms)

    # ----------------------------------------------------------------- loss
    def create_loss(self, args: argparse.Namespace) -> Any:
        return self.loss

    # ----------------------------------------------------------------- data
    def get_data(
        self, args: argparse.Namespace, preprocess_fns: Any, epoch: int = 0, tokenizer: Any = None
    ) -> dict[str, Any]:
        others = argparse.Namespace(**vars(args))
        others.train_data = None
        data = self.originals["get_data"](others, preprocess_fns, epoch=epoch, tokenizer=tokenizer)
        data["train"] = self._train_data(args, preprocess_fns, epoch, tokenizer)
        return data

    def _train_data(
        self, args: argparse.Namespace, preprocess_fns: Any, epoch: int, tokenizer: Any
    ) -> Any:
        o = self.options
        model = self.model
        context_length = int(getattr(tokenizer, "context_length", 0) or model.context_length)
        if context_length != model.context_length:
            raise ValueError(
                f"the tokenizer makes {context_length} tokens but the model takes "
                f"{model.context_length}; pass --force-context-length or a '-ctx' model"
            )
        views = o.views or TextViews((TextView("caption", context_length),))
        texts = SampleTokenizer(tokenizer, context_length, views, o.short)
        path = args.train_data
        if args.dataset_type == "webdataset" or not path.lower().endswith(SAMPLE_SUFFIXES):
            from vlr_plugins.integrations.open_clip.webdataset import get_wds_text_views_data

            if o.image_embeddings and not os.path.exists(o.image_embeddings):
                raise ValueError(
                    f"no embedding store at {o.image_embeddings}; precomputing one from "
                    f"webdataset shards is not supported (write it with vlr precompute)"
                )
            return get_wds_text_views_data(
                args, preprocess_fns[0], texts, epoch=epoch, image_embeddings=o.image_embeddings
            )
        table = path.lower().endswith((".csv", ".tsv"))
        samples = read_image_text_samples(
            path,
            image_key=o.image_key or (args.csv_img_key if table else None),
            caption_key=args.csv_caption_key if table else "caption",
            image_root=o.image_root,
            separator=args.csv_separator,
        )
        if o.image_embeddings:
            self._ensure_image_embeddings(args, samples, preprocess_fns[1])
        dataset = TextViewsImageDataset(
            samples,
            texts,
            preprocess_fns[0],
            o.image_embeddings,
            source=path,
            fraction=o.fraction,
            seed=o.data_seed,
        )
        from open_clip_train.data import DataInfo

        loader = make_train_loader(
            dataset,
            batch_size=args.batch_size,
            workers=args.workers,
            world_size=args.world_size if args.distributed else 1,
            rank=args.rank if args.distributed else 0,
            seed=args.seed,
            pin_memory=torch.device(args.device).type == "cuda",
        )
        return DataInfo(loader, loader.sampler)

    def _ensure_image_embeddings(
        self, args: argparse.Namespace, samples: Any, preprocess: Any
    ) -> None:
        """Encode the training images once with the (locked) vision tower, on the master
        process, when the store does not exist yet; the others wait for it."""
        from open_clip_train.distributed import is_master

        store = self.options.image_embeddings
        encoder_name = f"open_clip:{args.model}:{args.pretrained}"
        if not os.path.exists(store) and is_master(args):
            from vlr_plugins.precompute.images import precompute_image_embeddings

            log.info(
                "vlr: encoding %d training images into %s (preprocess_val, vision tower in eval)",
                len(samples),
                store,
            )
            encoder = _VisionTower(self.model, preprocess, args.device)
            precompute_image_embeddings(
                encoder,
                [(s.id, s.media) for s in samples],
                store,
                batch_size=args.batch_size,
                meta={"encoder": encoder_name},
                progress=False,
                num_workers=min(args.workers, 4),
            )
        if args.distributed:
            torch.distributed.barrier()
        from vlr_plugins.data.embedding_store import EmbeddingStore

        written_by = EmbeddingStore(store).meta.get("encoder")
        if written_by != encoder_name:
            log.warning(
                "vlr: the image embeddings in %s were written by %r, not by this run's vision "
                "tower (%s); they must come from the model being trained",
                store,
                written_by,
                encoder_name,
            )


class _VisionTower:
    """PIL images -> (n, D) normalised embeddings of a model's vision tower, for precompute."""

    def __init__(self, model: torch.nn.Module, preprocess: Any, device: str) -> None:
        self.model, self.preprocess, self.device = model, preprocess, device
        self.name = "open_clip vision tower"

    @torch.no_grad()
    def __call__(self, images: list[Any]) -> torch.Tensor:
        visual = self.model.visual
        was_training = visual.training
        visual.eval()
        try:
            dtype = next(visual.parameters()).dtype
            pixels = torch.stack([self.preprocess(im) for im in images]).to(self.device, dtype)
            return self.model.encode_image(pixels, normalize=True).float().cpu()
        finally:
            visual.train(was_training)


@contextmanager
def patched_open_clip_train(options: VLRTrainOptions) -> Iterator[_Run]:
    """Within this block ``open_clip_train.main.main(argv)`` trains with the vlr data,
    model wrapper and loss (module docstring); the originals come back on exit."""
    import open_clip_train.main as ocm

    originals = {name: getattr(ocm, name) for name in PATCHED_NAMES}
    run = _Run(options, originals)
    for name in PATCHED_NAMES:
        setattr(ocm, name, getattr(run, name))
    ddp = torch.nn.parallel.DistributedDataParallel
    torch.nn.parallel.DistributedDataParallel = _cpu_capable_ddp(ddp)
    try:
        yield run
    finally:
        for name, fn in originals.items():
            setattr(ocm, name, fn)
        torch.nn.parallel.DistributedDataParallel = ddp


def _cpu_capable_ddp(ddp: type) -> type:
    """``ddp`` (torch's ``DistributedDataParallel``) that also wraps a module on the CPU:
    open_clip_train passes ``device_ids=[device]`` whatever the device, which DDP refuses for
    a CPU module (there it takes none: its CPU mode, with gloo); on an accelerator they pass
    through unchanged."""

    class CpuCapableDistributedDataParallel(ddp):  # type: ignore[misc, valid-type]
        def __init__(self, module: torch.nn.Module, device_ids: Any = None, output_device: Any = None,
                     **kwargs: Any) -> None:
            if any(p.device.type != "cpu" for p in module.parameters()):
                kwargs.update(device_ids=device_ids, output_device=output_device)
            super().__init__(module, **kwargs)

    return CpuCapableDistributedDataParallel
