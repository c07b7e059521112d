"""LAVIS model ``blip_retrieval_textonly``: BLIP retrieval, text side trained, vision frozen.

The module tree (and so the checkpoint keys) is LAVIS' ``blip_retrieval``: ``visual_encoder``
(LAVIS' ViT), ``text_encoder`` (LAVIS' XBert), ``vision_proj``, ``text_proj``, ``itm_head``;
a LAVIS BLIP retrieval or pre-training checkpoint loads into it (the momentum encoders and
queues of ``blip_retrieval`` are not built: text-only training never uses them).

Trainable: the text encoder's self-attention stack and ``text_proj`` (paper sec. 3.2). The
ViT, ``vision_proj``, ``itm_head`` and the text encoder's cross-attention are frozen (the
last two are only read by ITM re-ranking at evaluation, so DDP needs no
``find_unused_parameters``). During training the image side is normally not run at all:
batches carry stored image embeddings (``image_emb``, from ``vlr precompute``); batches
with ``image`` run the frozen ViT + ``vision_proj`` under ``no_grad``.

Text budgets: every text of a batch carries its own token budget (``text_max_len``, from
the recipe's text views), so a 128-token paragraph and a 77-token caption go through one
forward pass, each cut only at its own budget. ``max_txt_len`` is the fallback for
batches without budgets (LAVIS' own datasets). The loss is any ``vlr_plugins`` loss,
named in the model config (``loss: {type: ..., ...}``); one with ``cache_chunk``
(``loss: {type: MultiPositiveInfoNCELoss, cache_chunk: 32}``) makes ``forward`` encode
the texts with gradient caching, so LAVIS' own ``loss.backward()`` (or its AMP scaler's)
re-encodes them chunk by chunk. ``length_blocks: 2`` in the model config encodes a batch's
texts in (at most) two blocks of similar length, each cut to its own longest text
(:func:`~vlr_plugins.text.encode_in_length_blocks`): the captions are not padded to the
paragraphs' length; loss and gradients stay those of one block.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from lavis.common.dist_utils import download_cached_file
from lavis.common.utils import is_url
from lavis.models.blip_models.blip import BlipBase
from lavis.models.blip_models.blip_outputs import BlipOutput, BlipOutputFeatures
from lavis.models.med import XBertEncoder
from lavis.models.vit import VisionTransformerEncoder, interpolate_pos_embed
from omegaconf import OmegaConf
from torch import nn

from vlr_plugins.errors import ConfigError, MissingFileError
from vlr_plugins.integrations.lavis._registry import register
from vlr_plugins.losses import cached_encode
from vlr_plugins.text.length_blocks import check_length_blocks, encode_in_length_blocks
from vlr_plugins.text.tokenizer import pad_token_rows, token_ids_at_budgets

__all__ = ["BlipRetrievalTextOnly", "CONFIG_DIR"]

log = logging.getLogger(__name__)

CONFIG_DIR = Path(__file__).resolve().parent / "configs"

DEFAULT_LOSS = {"type": "MultiPositiveInfoNCELoss", "temperature": 0.07}


def _plain(cfg: Any) -> Any:
    return OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg


def _build_vision(cfg: Mapping) -> VisionTransformerEncoder:
    """LAVIS' ViT; ``vit: {width, depth, heads, patch_size}`` builds a custom size (tests)."""
    custom = cfg.get("vit")
    if not custom:
        return VisionTransformerEncoder.from_config(cfg)
    custom = dict(_plain(custom))
    unknown = set(custom) - {"width", "depth", "heads", "patch_size"}
    if unknown:
        raise ConfigError(f"model.vit: unknown keys {sorted(unknown)} (allowed: width, depth, heads, patch_size)")
    enc = VisionTransformerEncoder(
        img_size=cfg.get("image_size", 384), patch_size=custom.get("patch_size", 16),
        embed_dim=custom["width"], depth=custom["depth"], num_heads=custom["heads"],
        use_grad_checkpointing=cfg.get("vit_grad_ckpt", False), ckpt_layer=cfg.get("vit_ckpt_layer", 0),
    )
    enc.vision_width = custom["width"]
    return enc


@register("model", "blip_retrieval_textonly")
class BlipRetrievalTextOnly(BlipBase):
    """BLIP retrieval whose text encoder + ``text_proj`` learn against frozen image embeddings.

    ``forward(samples)`` reads ``image_emb`` (B, D) or ``image`` (B, 3, H, W);
    ``text_input`` (N texts), ``text_max_len`` (N budgets, optional), ``text_owner`` (N,
    the row of each text's image; default one text per row); optionally hard negatives
    ``neg_input`` / ``neg_max_len`` / ``neg_owner``. Returns a LAVIS ``BlipOutput`` whose
    ``loss`` is the configured ``vlr_plugins`` loss.
    """

    PRETRAINED_MODEL_CONFIG_DICT = {
        # absolute paths: LAVIS joins them onto its own package folder, which keeps them as is
        "base_coco": str(CONFIG_DIR / "models" / "blip_retrieval_textonly_base_coco.yaml"),
        "base_flickr": str(CONFIG_DIR / "models" / "blip_retrieval_textonly_base_flickr.yaml"),
    }

    def __init__(
        self,
        image_encoder: nn.Module,
        text_encoder: nn.Module,
        loss: Mapping[str, Any] | nn.Module | None = None,
        embed_dim: int = 256,
        max_txt_len: int = 35,
        tokenizer: str = "bert-base-uncased",
        length_blocks: int = 1,
    ) -> None:
        super().__init__()
        from vlr_plugins.registry import LOSSES

        check_length_blocks("blip_retrieval_textonly", length_blocks)
        self.length_blocks = length_blocks
        self.tokenizer = self.init_tokenizer(tokenizer)
        self.visual_encoder = image_encoder
        self.text_encoder = text_encoder
        text_width = text_encoder.config.hidden_size
        self.vision_proj = nn.Linear(image_encoder.vision_width, embed_dim)
        self.text_proj = nn.Linear(text_width, embed_dim)
        self.itm_head = nn.Linear(text_width, 2)
        loss = DEFAULT_LOSS if loss is None else loss
        self.loss_fn = loss if isinstance(loss, nn.Module) else LOSSES.build(dict(_plain(loss)))
        self.max_positions = text_encoder.config.max_position_embeddings
        self.max_txt_len = self._check_budget(max_txt_len, "max_txt_len")
        self._freeze()

    # ------------------------------------------------------------------ construction

    @classmethod
    def init_tokenizer(cls, name_or_path: str = "bert-base-uncased"):
        """LAVIS' BLIP tokenizer (BERT + ``[DEC]`` / ``[ENC]``), from any local folder or Hub name.

        The fast (Rust) BERT tokenizer: the same ids as LAVIS' ``BertTokenizer``, without
        its per-text Python cost on every training step.
        """
        from transformers import BertTokenizerFast

        tok = BertTokenizerFast.from_pretrained(name_or_path)
        tok.add_special_tokens({"bos_token": "[DEC]"})
        tok.add_special_tokens({"additional_special_tokens": ["[ENC]"]})
        tok.enc_token_id = tok.additional_special_tokens_ids[0]
        return tok

    @classmethod
    def from_config(cls, cfg=None):
        cfg = cfg if cfg is not None else OmegaConf.create()
        image_encoder = _build_vision(cfg)
        text_encoder = XBertEncoder.from_config(cfg)  # random init; weights come from the checkpoint
        model = cls(
            image_encoder=image_encoder,
            text_encoder=text_encoder,
            loss=cfg.get("loss", None),
            embed_dim=cfg.get("embed_dim", 256),
            max_txt_len=cfg.get("max_txt_len", 35),
            tokenizer=cfg.get("tokenizer", "bert-base-uncased"),
            length_blocks=cfg.get("length_blocks", 1),
        )
        model.load_checkpoint_from_config(cfg)
        trained = cfg.get("trained_checkpoint", None)
        if trained:  # a LAVIS checkpoint of this model holds only the trained (text) tensors
            model._load_state(model._read_checkpoint(trained), source=trained)
        return model

    def _check_budget(self, n: int, what: str) -> int:
        n = int(n)
        if not 3 <= n <= self.max_positions:
            raise ConfigError(f"{what}={n}: the text encoder takes 3..{self.max_positions} tokens "
                              f"(max_position_embeddings of its med config)")
        return n

    def _freeze(self) -> None:
        frozen = [self.visual_encoder, self.vision_proj, self.itm_head]
        frozen += [m for name, m in self.text_encoder.named_modules() if name.endswith("crossattention")]
        for module in frozen:
            for p in module.parameters():
                p.requires_grad_(False)

    def train(self, mode: bool = True):
        super().train(mode)
        self.visual_encoder.eval()  # frozen: no dropout / drop-path noise in its features
        return self

    # ------------------------------------------------------------------ checkpoints

    def load_checkpoint_from_config(self, cfg, **kwargs):
        """LAVIS' rule (``load_finetuned`` picks ``finetuned`` or ``pretrained``), except that
        a model naming no checkpoint stays randomly initialised instead of failing or
        downloading."""
        key = "finetuned" if cfg.get("load_finetuned", True) else "pretrained"
        path = cfg.get(key, None)
        if not path:
            log.warning("blip_retrieval_textonly: no %s checkpoint named; weights are random", key)
            return None
        return self._load_state(self._read_checkpoint(path), source=path)

    def load_state_dict(self, state_dict, strict: bool = True, **kwargs):
        """Strict loading accepts a state dict without the frozen parameters.

        LAVIS' runner saves only parameters that require grad, then resumes with a strict
        ``load_state_dict`` (``run.resume_ckpt_path``), which would fail on the frozen
        ViT; here those keep their current values. A missing trainable tensor or an
        unknown key still fails as usual.
        """
        if strict:
            frozen = {n for n, p in self.named_parameters() if not p.requires_grad}
            own = set(self.state_dict())
            missing, unexpected = own - set(state_dict), set(state_dict) - own
            if missing and missing <= frozen and not unexpected:
                log.info("loading without %d frozen tensors (kept as they are)", len(missing))
                return super().load_state_dict(state_dict, strict=False, **kwargs)
        return super().load_state_dict(state_dict, strict=strict, **kwargs)

    def load_checkpoint(self, url_or_filename):
        return self._load_state(self._read_checkpoint(url_or_filename), source=url_or_filename)

    load_from_pretrained = load_checkpoint  # LAVIS' name for ``load_finetuned: false``

    @staticmethod
    def _read_checkpoint(url_or_filename: str) -> dict[str, torch.Tensor]:
        if is_url(url_or_filename):
            path = download_cached_file(url_or_filename, check_hash=False, progress=True)
        elif os.path.isfile(url_or_filename):
            path = url_or_filename
        else:
            raise MissingFileError(f"checkpoint {url_or_filename!r}: no such file, and not a URL")
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # an UnpicklingError naming the refused global
            raise RuntimeError(
                f"{path}: cannot be read with torch.load(weights_only=True) ({e}). vlr_plugins never "
                "unpickles arbitrary objects; re-save it as {'model': state_dict}.") from None
        state = ckpt.get("model", ckpt) if isinstance(ckpt, dict) else None
        if not isinstance(state, dict):
            raise RuntimeError(f"{path}: expected a state dict or {{'model': state_dict}}")
        return state

    def _load_state(self, state: dict[str, torch.Tensor], source: str):
        own = self.state_dict()
        key = "visual_encoder.pos_embed"
        if key in state and state[key].shape != own[key].shape:
            state = {**state, key: interpolate_pos_embed(state[key], self.visual_encoder)}
        usable = {k: v for k, v in state.items() if k in own and v.shape == own[k].shape}
        skipped = sorted(k for k in state if k in own and k not in usable)
        msg = self.load_state_dict(usable, strict=False)
        trainable = {n for n, p in self.named_parameters() if p.requires_grad}
        text_missing = [k for k in msg.missing_keys if k in trainable]
        log.info("loaded %s: %d tensors; %d model tensors not in it; shape mismatches skipped: %s",
                 source, len(usable), len(msg.missing_keys), skipped or "none")
        if text_missing:
            log.warning("%s lacks %d trainable tensors (e.g. %s): they keep their current values",
                        source, len(text_missing), text_missing[0])
        return msg

    # ------------------------------------------------------------------ encoders

    def _budgets(self, budgets: Sequence[int] | int | None, n: int) -> list[int]:
        if budgets is None or isinstance(budgets, int):
            return [budgets or self.max_txt_len] * n
        return [int(b) for b in budgets]

    def tokenize(self, texts: Sequence[str], budgets: Sequence[int] | int | None = None):
        """Token ids (N, L) and mask, each text cut at its own budget, padded to the longest."""
        texts = list(texts)
        budgets = self._budgets(budgets, len(texts))
        for budget in set(budgets):
            self._check_budget(budget, "text budget")
        rows = token_ids_at_budgets(self.tokenizer, texts, budgets)
        ids, mask = pad_token_rows(rows, self.tokenizer.pad_token_id)
        return ids.to(self.device), mask.to(self.device)

    def encode_text(self, texts: Sequence[str], budgets: Sequence[int] | int | None = None) -> torch.Tensor:
        """Normalised text embeddings (N, embed_dim): ``text_proj`` of the [CLS] state."""
        ids, mask = self.tokenize(texts, budgets)
        return self.encode_tokens(ids, mask)

    def encode_tokens(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self._text_states_and_embeddings(input_ids, attention_mask)[1]

    def _text_states_and_embeddings(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        states = self.text_encoder(input_ids, attention_mask=attention_mask, return_dict=True,
                                   mode="text").last_hidden_state
        return states, F.normalize(self.text_proj(states[:, 0, :]), dim=-1)

    @torch.no_grad()
    def encode_image(self, image: torch.Tensor, return_features: bool = False):
        """Normalised image embeddings (B, embed_dim) from the frozen ViT + ``vision_proj``;
        with ``return_features`` also the ViT token states (B, 1+P, W) ITM cross-attends to."""
        feats = self.visual_encoder.forward_features(image)
        emb = F.normalize(self.vision_proj(feats[:, 0, :]), dim=-1)
        return (emb, feats) if return_features else emb

    @torch.no_grad()
    def itm_scores(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   image_features: torch.Tensor) -> torch.Tensor:
        """BLIP's image-text matching logit (match class) for aligned rows of texts and images."""
        ids = input_ids.clone()
        ids[:, 0] = self.tokenizer.enc_token_id
        atts = torch.ones(image_features.shape[:-1], dtype=torch.long, device=image_features.device)
        out = self.text_encoder(ids, attention_mask=attention_mask, encoder_hidden_states=image_features,
                                encoder_attention_mask=atts, return_dict=True)
        return self.itm_head(out.last_hidden_state[:, 0, :])[:, 1]

    @torch.no_grad()
    def extract_features(self, samples: Mapping[str, Any], mode: str = "text") -> BlipOutputFeatures:
        """LAVIS' feature-extractor call: ``mode="text"`` embeds ``text_input`` (budgets from
        ``text_max_len`` or ``max_txt_len``), ``mode="image"`` embeds ``image``; the
        normalised vectors are in ``text_embeds_proj`` / ``image_embeds_proj``."""
        if mode == "text":
            states, proj = self._text_states_and_embeddings(
                *self.tokenize(samples["text_input"], samples.get("text_max_len")))
            return BlipOutputFeatures(text_embeds=states, text_embeds_proj=proj)
        if mode == "image":
            emb, feats = self.encode_image(samples["image"].to(self.device), return_features=True)
            return BlipOutputFeatures(image_embeds=feats, image_embeds_proj=emb)
        raise ValueError(f"mode must be 'text' or 'image' (this model trains no fusion), found {mode!r}")

    # ------------------------------------------------------------------ training

    def _owner(self, samples: Mapping, key: str, n_texts: int, n_images: int) -> torch.Tensor:
        owner = samples.get(key)
        if owner is None:
            if n_texts != n_images:
                raise ValueError(f"{n_texts} texts for {n_images} images and no {key!r} saying whose they are")
            return torch.arange(n_images, device=self.device)
        return torch.as_tensor(owner, device=self.device)

    def _text_parameters(self) -> list[nn.Parameter]:
        return [*self.text_encoder.parameters(), *self.text_proj.parameters()]

    def forward(self, samples: Mapping[str, Any]) -> BlipOutput:
        chunk = getattr(self.loss_fn, "cache_chunk", None)
        image_emb = samples.get("image_emb")
        if image_emb is None:  # the frozen ViT, without graph: chunks only bound its memory
            image_emb = cached_encode(self.encode_image, samples["image"], chunk_size=chunk,
                                      parameters=())
        image_emb = image_emb.to(self.device)
        n = image_emb.shape[0]
        texts, negs = list(samples["text_input"]), list(samples.get("neg_input") or [])
        # positives and hard negatives in one pass of the text encoder (or one per length block)
        budgets = self._budgets(samples.get("text_max_len"), len(texts))
        budgets += self._budgets(samples.get("neg_max_len"), len(negs))
        ids, mask = self.tokenize(texts + negs, budgets)
        emb = encode_in_length_blocks(self.encode_tokens, ids, mask, blocks=self.length_blocks, chunk_size=chunk,
                                      parameters=self._text_parameters())
        text_emb = emb[: len(texts)]
        owner = self._owner(samples, "text_owner", len(texts), n)
        neg_emb = neg_owner = None
        if negs:
            neg_emb = emb[len(texts):]
            neg_owner = torch.as_tensor(samples["neg_owner"], device=self.device)
        if image_emb.shape[1] != text_emb.shape[1]:
            raise ConfigError(f"the image embeddings are {image_emb.shape[1]}-d but text_proj gives "
                              f"{text_emb.shape[1]}-d vectors; they must share one space (embed_dim)")
        loss = self.loss_fn(image_emb, text_emb, owner, neg_emb, neg_owner)
        return BlipOutput(loss=loss, loss_itc=loss)
