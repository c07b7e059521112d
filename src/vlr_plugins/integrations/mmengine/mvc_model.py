"""MVC / UMT Stage II video-text pretraining as an MMEngine ``BaseModel``: the core video tower,
the core dual-CLS text encoder, a matching head, and the core ``VideoTextPretrainingLoss``."""

from __future__ import annotations

import random
from typing import Any

import torch
from mmengine.model import BaseModel
from torch import nn

from vlr_plugins.errors import ConfigError
from vlr_plugins.integrations.mmengine.registry import MODELS
from vlr_plugins.vision.stage_one import load_stage_one

__all__ = ["VideoTextPretrainingModel"]


def _build(cfg: Any) -> Any:
    return MODELS.build(cfg) if isinstance(cfg, dict) else cfg


@MODELS.register_module()
class VideoTextPretrainingModel(BaseModel):
    """Trains a video tower and a dual-CLS text encoder together with VTC + VTM + MLM (MVC, UMT).

    ``video_encoder`` (a :class:`~vlr_plugins.vision.SpaceTimeViT` config), ``text_encoder``
    (a :class:`~vlr_plugins.text.DualCLSTextEncoder` config, ``video_width`` the tower's
    width) and ``loss`` (a :class:`~vlr_plugins.losses.VideoTextPretrainingLoss` config, its
    ``views`` the caption views the data draws) are configs of the core registries or built
    modules. ``video_checkpoint``: Stage I weights loaded into the tower
    (:func:`~vlr_plugins.vision.load_stage_one`: the pooled head and projection start fresh). ``freeze_video``:
    the tower's weights do not train and no gradient is computed through it (its token
    dropping still applies in training mode). ``grad_checkpointing``: the tower's blocks and
    the text layers are recomputed in the backward pass. ``draw_seed``: VTM's negatives and
    MLM's masks are drawn, at each training iteration, from a generator seeded by
    ``(draw_seed, iteration)`` (MMEngine's message hub), the same on every rank: VTM's draws
    over the gathered batch are then what one process draws, and a resumed run draws what
    the uninterrupted one drew; ``None``, or outside a run: torch's global generator.

    Batches come from ``vlr_mvc_collate``: ``frames`` (B, T, 3, S, S), every caption in one
    padded block ``input_ids`` / ``attention_mask`` (N, L), ``text_owner`` (N,) its video and
    ``text_view`` (N,) its view as the text encoder numbers them (0 summary, 1 detailed).

    ``forward(..., mode="loss")`` returns the loss's dict: ``loss`` (what MMEngine sums and
    backpropagates) and the terms ``vtc``, ``vtm``, ``mlm`` and per view ``vtc_summary``...,
    each logged separately. The model implements
    :class:`~vlr_plugins.losses.VideoTextFusion` for the loss (``fuse``, ``match_logits``,
    ``encode_text_tokens``, ``mlm_logits``); the matching head is its ``match_head``.
    Checkpoints keep the text encoder under ``text_encoder.`` and the tower under
    ``video_encoder.``, with their architectures in ``meta`` (``WeightsOnlyCheckpointHook``),
    so ``vlr eval`` / ``vlr export`` read the text encoder and ``vlr precompute --encoder
    vlr:CHECKPOINT`` the tower.
    """

    def __init__(self, text_encoder: dict | nn.Module, video_encoder: dict | nn.Module, loss: dict | nn.Module,
                 video_checkpoint: str | None = None, video_checkpoint_layout: str = "auto",
                 freeze_video: bool = False, grad_checkpointing: bool = False, draw_seed: int | None = None,
                 data_preprocessor: dict | None = None, init_cfg: dict | None = None) -> None:
        super().__init__(data_preprocessor=data_preprocessor, init_cfg=init_cfg)
        from vlr_plugins.text.dual_cls import VIEWS

        self.text_encoder = _build(text_encoder)
        self.video_encoder = _build(video_encoder)
        self.loss_fn = _build(loss)
        if video_checkpoint is not None:
            load_stage_one(self.video_encoder, video_checkpoint, video_checkpoint_layout)
        width = getattr(self.video_encoder, "width", None)
        if width != self.text_encoder.video_width:
            raise ConfigError(f"the video tower's tokens are {width} wide but the text encoder's fusion layers "
                              f"read {self.text_encoder.video_width}-wide tokens (video_width)")
        if self.video_encoder.embed_dim != self.text_encoder.embed_dim:
            raise ConfigError(f"the video tower embeds in {self.video_encoder.embed_dim} dims but the text encoder "
                              f"in {self.text_encoder.embed_dim}; VTC compares them in one space")
        self.match_head = nn.Linear(self.text_encoder.bert.config.hidden_size, 2)
        unknown = [v for v in self.loss_fn.views if v not in VIEWS]
        if unknown:
            raise ConfigError(f"the loss's views {list(self.loss_fn.views)} must be caption views of the text "
                              f"encoder, {list(VIEWS)}")
        # the data numbers views as the text encoder does; the loss numbers its own views
        to_loss = torch.full((len(VIEWS),), -1, dtype=torch.long)
        for i, name in enumerate(self.loss_fn.views):
            to_loss[VIEWS.index(name)] = i
        self.register_buffer("_to_loss_view", to_loss, persistent=False)
        self.register_buffer("_to_encoder_view", torch.tensor([VIEWS.index(v) for v in self.loss_fn.views]),
                             persistent=False)
        self.draw_seed = draw_seed
        self.freeze_video = bool(freeze_video)
        if self.freeze_video:
            self.video_encoder.requires_grad_(False)
        if grad_checkpointing:
            self.video_encoder.set_grad_checkpointing(True)
            self.text_encoder.bert.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    # --------------------------------------------------------------- VideoTextFusion

    def fuse(self, text_hidden: torch.Tensor, text_mask: torch.Tensor, video_tokens: torch.Tensor,
             video_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.text_encoder.fuse(text_hidden, text_mask, video_tokens, video_mask)

    def match_logits(self, cls_hidden: torch.Tensor) -> torch.Tensor:
        return self.match_head(cls_hidden)

    def encode_text_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                           view_ids: torch.Tensor | None) -> torch.Tensor:
        # the loss passes its own view indices
        views = None if view_ids is None else self._to_encoder_view[view_ids]
        return self.text_encoder.encode(input_ids, attention_mask, views).hidden

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.text_encoder.mlm_logits(hidden)

    # --------------------------------------------------------------- forward

    def encode_video(self, frames: torch.Tensor) -> Any:
        """frames (B, T, 3, S, S) -> the tower's ``SpaceTimeOutput`` (embedding and tokens)."""
        if self.freeze_video:
            with torch.no_grad():
                return self.video_encoder(frames)
        return self.video_encoder(frames)

    def _loss_views(self, text_view: torch.Tensor) -> torch.Tensor:
        views = self._to_loss_view[text_view]
        if bool((views < 0).any()):
            from vlr_plugins.text.dual_cls import VIEWS

            bad = sorted({VIEWS[int(v)] for v in text_view[views < 0]})
            raise ValueError(f"captions of view(s) {bad} in the batch, but the loss trains views "
                             f"{list(self.loss_fn.views)}")
        return views

    def _step_generator(self, device: torch.device) -> torch.Generator | None:
        """The generator of this iteration's VTM and MLM draws (see ``draw_seed``)."""
        from mmengine.logging import MessageHub

        if self.draw_seed is None or not MessageHub._instance_dict:
            return None
        step = MessageHub.get_current_instance().get_info("iter")
        if step is None:
            return None
        return torch.Generator(device=device).manual_seed(random.Random(f"{self.draw_seed}/{step}").getrandbits(63))

    def forward(self, frames: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                text_owner: torch.Tensor, text_view: torch.Tensor, ids: list[str] | None = None,
                mode: str = "tensor") -> Any:
        video = self.encode_video(frames)
        text = self.text_encoder.encode(input_ids, attention_mask, text_view)
        if mode == "loss":
            return self.loss_fn(self, video.embedding, text.embeds, text_owner, self._loss_views(text_view),
                                video_tokens=video.tokens, text_hidden=text.hidden, input_ids=input_ids,
                                attention_mask=attention_mask, generator=self._step_generator(frames.device))
        if mode == "tensor":
            return video.embedding, text.embeds
        if mode == "predict":
            owner = text_owner.tolist()
            return [{"id": ids[i] if ids else str(i), "video_emb": video.embedding[i].detach().float().cpu(),
                     "text_emb": text.embeds[[j for j, o in enumerate(owner) if o == i]].detach().float().cpu()}
                    for i in range(video.embedding.shape[0])]
        raise ValueError(f"mode must be 'loss', 'predict' or 'tensor', got {mode!r}")
