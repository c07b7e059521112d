"""A space-time ViT in the VideoMAE / UMT layout, built on timm's ViT ``Block``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from vlr_plugins.registry import MODELS
from vlr_plugins.vision.image_tower import IMAGENET_MEAN, IMAGENET_STD
from vlr_plugins.vision.positions import sincos_video_table
from vlr_plugins.vision.token_drop import TOKEN_DROP_MODES, gather_tokens, keep_index

__all__ = ["SpaceTimeViT", "SpaceTimeOutput", "POSITION_EMBEDDINGS"]

POSITION_EMBEDDINGS = ("sincos", "learned")


@dataclass
class SpaceTimeOutput:
    """What :meth:`SpaceTimeViT.forward` returns.

    ``tokens`` (B, N, width): the encoder's output tokens (after the final norm), only the
    kept ones when tokens were dropped; ``pooled`` (B, width): their mean (after
    ``pool_norm``); ``embedding`` (B, embed_dim): ``pooled`` projected (and L2-normalised
    when the tower normalises); ``keep_index`` (B, N): which of the T*H*W grid tokens
    ``tokens`` are, or None when none were dropped.
    """

    tokens: torch.Tensor
    pooled: torch.Tensor
    embedding: torch.Tensor
    keep_index: torch.Tensor | None = None


def _init_weights(module: nn.Module) -> None:
    # UMT / VideoMAE initialise their linear layers this way
    if isinstance(module, nn.Linear):
        nn.init.xavier_uniform_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def _eps(name: str, value: Any) -> float:
    """A norm's eps as a float. YAML 1.1 (PyYAML) reads ``1e-12`` (no dot) as a string: such a
    string is taken as the number it spells."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not number > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(number)


@MODELS.register
class SpaceTimeViT(nn.Module):
    """Joint space-time attention over tubelet tokens: clips (B, T, 3, H, W) -> (B, D).

    Expects frames normalised with ``image_mean`` / ``image_std`` (ImageNet's, as UMT and
    VideoMAE) at ``image_size``, ``T = num_frames``. A ``Conv3d`` cuts the clip into
    ``tubelet_size x patch_size x patch_size`` tubelets (T/t * H/p * W/p tokens), a
    position table is added, ``depth`` pre-norm transformer blocks attend over all tokens
    at once, and

        tokens = norm(blocks(patches + positions));  pooled = pool_norm(mean(tokens))
        embedding = normalize(proj(pooled))

    ``norm``, ``pool_norm``, ``proj`` and ``normalize`` are each optional
    (``final_norm``, ``pool_norm``, ``embed_dim``, ``normalize``) so that one module holds
    VideoMAE (transformers: no final norm with mean pooling), SMILE / VideoMAE's code
    (``norm`` or ``fc_norm``) and UMT (``norm``, ``pool_norm``, ``vision_proj``) exactly.
    Every norm uses ``layer_norm_eps`` except ``pool_norm`` when ``pool_norm_eps`` is given:
    transformers' ``VideoMAEForVideoClassification`` builds its ``fc_norm`` with torch's
    default 1e-5 while its encoder uses the config's ``layer_norm_eps`` (1e-12), and loading
    such a checkpoint sets ``pool_norm_eps`` to 1e-5 when it was left unset
    (:func:`~vlr_plugins.vision.load_video_checkpoint`; :meth:`set_pool_norm_eps`).

    Positions: ``"sincos"`` is the fixed sinusoid table of VideoMAE and UMT over the flat
    token index; weights trained on another frame count or resolution
    (``pretrained_num_frames`` / ``pretrained_image_size``) get that grid's table resampled,
    as UMT runs 8-frame weights on 16 frames. ``"learned"`` holds a learnt spatial table
    (1, H*W, width) and a learnt temporal one (1, T, width), summed.

    Training: ``token_drop_ratio`` of the tokens is dropped before the blocks in training
    mode (UMT's masking; ``token_drop_mode`` ``"random"`` or ``"tube"``, see
    :func:`~vlr_plugins.vision.keep_index`); MVC uses 0.1. ``drop_path_rate`` is stochastic
    depth, ``grad_checkpointing`` (True, or the number of leading blocks, UMT's
    ``checkpoint_num``) recomputes blocks in the backward pass.

    An image (B, 3, H, W) or one-frame clip is repeated to one tubelet and gets the first
    tubelet's positions (UMT's ``img_pos_embed``).

    Weights: ``pretrained`` is a local checkpoint (safetensors or a weights-only torch file)
    in ``checkpoint_layout`` ``"videomae"`` (transformers), ``"umt"``, ``"smile"`` (SMILE and
    VideoMAE's own code) or ``"native"``; ``"auto"`` tells them apart
    (:func:`~vlr_plugins.vision.load_video_checkpoint`). Built on timm's ViT ``Block`` (see
    docs/vision.md for why).

    Reference: Tong et al., VideoMAE (NeurIPS 2022); Li et al., Unmasked Teacher (ICCV 2023).
    Relations: :class:`~vlr_plugins.vision.FramePooledVideoEncoder` pools an image tower
    over frames instead; both follow :class:`~vlr_plugins.vision.VideoTower`.

    Example::

        vit = SpaceTimeViT(num_frames=4, image_size=32, patch_size=16, tubelet_size=2, width=32,
                           depth=2, num_heads=2, embed_dim=16, token_drop_ratio=0.1)
        emb = vit.encode_video(torch.randn(2, 4, 3, 32, 32))  # (2, 16)
    """

    def __init__(
        self,
        num_frames: int = 16,
        image_size: int = 224,
        patch_size: int = 16,
        tubelet_size: int = 1,
        width: int = 768,
        depth: int = 12,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        layer_norm_eps: float = 1e-6,
        init_values: float | None = None,
        drop_path_rate: float = 0.0,
        pos_embed: str = "sincos",
        pretrained_num_frames: int | None = None,
        pretrained_image_size: int | None = None,
        final_norm: bool = True,
        pool_norm: bool = False,
        pool_norm_eps: float | None = None,
        embed_dim: int | None = None,
        normalize: bool = True,
        token_drop_ratio: float = 0.0,
        token_drop_mode: str = "random",
        grad_checkpointing: bool | int = False,
        image_mean: tuple[float, float, float] = IMAGENET_MEAN,
        image_std: tuple[float, float, float] = IMAGENET_STD,
        pretrained: str | None = None,
        checkpoint_layout: str = "auto",
    ) -> None:
        super().__init__()
        from timm.models.vision_transformer import Block

        if num_frames % tubelet_size or image_size % patch_size:
            raise ValueError(f"num_frames ({num_frames}) must be a multiple of tubelet_size "
                             f"({tubelet_size}) and image_size ({image_size}) of patch_size ({patch_size})")
        if pos_embed not in POSITION_EMBEDDINGS:
            raise ValueError(f"pos_embed must be one of {POSITION_EMBEDDINGS}, got {pos_embed!r}")
        if token_drop_mode not in TOKEN_DROP_MODES:
            raise ValueError(f"token_drop_mode must be one of {TOKEN_DROP_MODES}, got {token_drop_mode!r}")
        layer_norm_eps = _eps("layer_norm_eps", layer_norm_eps)
        if pool_norm_eps is not None:
            pool_norm_eps = _eps("pool_norm_eps (null: layer_norm_eps)", pool_norm_eps)
        self.config = {k: v for k, v in locals().items()
                       if k not in ("self", "Block", "__class__", "pretrained", "checkpoint_layout")}
        self.config["image_mean"], self.config["image_std"] = list(image_mean), list(image_std)
        self.num_frames, self.image_size = num_frames, image_size
        self.patch_size, self.tubelet_size, self.width = patch_size, tubelet_size, width
        self.grid = (num_frames // tubelet_size, image_size // patch_size, image_size // patch_size)
        self.image_mean = tuple(float(v) for v in image_mean)
        self.image_std = tuple(float(v) for v in image_std)
        self.normalize = normalize
        self.token_drop_ratio, self.token_drop_mode = float(token_drop_ratio), token_drop_mode
        self.set_grad_checkpointing(grad_checkpointing)

        self.patch_embed = nn.Conv3d(3, width, kernel_size=(tubelet_size, patch_size, patch_size),
                                     stride=(tubelet_size, patch_size, patch_size))
        self.pos_embed_kind = pos_embed
        if pos_embed == "learned":
            if pretrained_num_frames is not None or pretrained_image_size is not None:
                raise ValueError("pretrained_num_frames / pretrained_image_size resample the fixed "
                                 "'sincos' table; learnt tables are resampled from a checkpoint's shapes")
            self.pos_embed_spatial = nn.Parameter(torch.zeros(1, self.grid[1] * self.grid[2], width))
            self.pos_embed_temporal = nn.Parameter(torch.zeros(1, self.grid[0], width))
            nn.init.trunc_normal_(self.pos_embed_spatial, std=0.02)
        else:
            self.set_pretrained_geometry(pretrained_num_frames, pretrained_image_size)
        norm = partial(nn.LayerNorm, eps=layer_norm_eps)
        rates = torch.linspace(0, drop_path_rate, depth).tolist()
        self.blocks = nn.ModuleList([
            Block(dim=width, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
                  init_values=init_values, drop_path=rate, norm_layer=norm) for rate in rates])
        self.norm = norm(width) if final_norm else nn.Identity()
        self.pool_norm = norm(width) if pool_norm else nn.Identity()
        if pool_norm and pool_norm_eps is not None:
            self.pool_norm.eps = pool_norm_eps
        self.proj = nn.Linear(width, embed_dim) if embed_dim is not None else nn.Identity()
        self.embed_dim = embed_dim or width
        self.apply(_init_weights)
        if pretrained is not None:
            from vlr_plugins.vision.video_checkpoints import load_video_checkpoint

            load_video_checkpoint(self, pretrained, layout=checkpoint_layout)

    def set_pretrained_geometry(self, num_frames: int | None = None, image_size: int | None = None) -> None:
        """Rebuild the fixed sin-cos tables for weights trained at ``num_frames`` x ``image_size``
        (None: this tower's own), resampled to this tower's grid."""
        if self.pos_embed_kind != "sincos":
            raise ValueError("only the fixed 'sincos' table is rebuilt; learnt tables are resampled "
                             "when a checkpoint is loaded")
        frames, size = num_frames or self.num_frames, image_size or self.image_size
        if frames % self.tubelet_size or size % self.patch_size:
            raise ValueError(f"pretrained geometry {frames} frames x {size} px does not divide into "
                             f"{self.tubelet_size}-frame, {self.patch_size}-px tubelets")
        source = (frames // self.tubelet_size, size // self.patch_size, size // self.patch_size)
        dim, (_, h, w) = self.width, self.grid
        video = sincos_video_table(self.grid, dim, source)
        image = sincos_video_table((1, h, w), dim, (1, *source[1:]))
        self.register_buffer("pos_video", video[None], persistent=False)
        self.register_buffer("pos_image", image[None], persistent=False)
        self.config["pretrained_num_frames"], self.config["pretrained_image_size"] = num_frames, image_size

    def set_pool_norm_eps(self, eps: float) -> None:
        """Use ``eps`` in ``pool_norm`` (recorded in :meth:`to_config` as ``pool_norm_eps``)."""
        eps = _eps("pool_norm_eps", eps)
        if not isinstance(self.pool_norm, nn.LayerNorm):
            raise ValueError("this tower has no pool_norm (build it with pool_norm=True)")
        self.pool_norm.eps = self.config["pool_norm_eps"] = eps

    def set_grad_checkpointing(self, enable: bool | int = True) -> None:
        """Recompute all blocks (True), none (False) or the first ``enable`` blocks in backward."""
        self.grad_checkpointing = enable
        self.config["grad_checkpointing"] = enable

    def _positions(self, tubelets: int) -> torch.Tensor:
        if self.pos_embed_kind == "learned":
            temporal = self.pos_embed_temporal[:, :tubelets]
            return (temporal[:, :, None] + self.pos_embed_spatial[:, None]).flatten(1, 2)
        return self.pos_image if tubelets == 1 and self.grid[0] != 1 else self.pos_video

    def _checkpointed(self, index: int) -> bool:
        limit = len(self.blocks) if self.grad_checkpointing is True else int(self.grad_checkpointing)
        return index < limit and self.training and torch.is_grad_enabled()

    def forward(self, frames: torch.Tensor) -> SpaceTimeOutput:
        """frames (B, T, 3, H, W), T = num_frames or 1 -> :class:`SpaceTimeOutput`."""
        if frames.dim() != 5 or tuple(frames.shape[2:]) != (3, self.image_size, self.image_size):
            raise ValueError(f"frames should be (B, T, 3, {self.image_size}, {self.image_size}), "
                             f"got shape {tuple(frames.shape)}")
        b, t = frames.shape[:2]
        if t == 1 and self.num_frames != 1:
            frames = frames.expand(-1, self.tubelet_size, -1, -1, -1)
        elif t != self.num_frames:
            raise ValueError(f"this tower takes {self.num_frames}-frame clips (or single images), got "
                             f"{t} frames; build it with num_frames={t} (and pretrained_num_frames="
                             f"{self.num_frames} to resample the sin-cos positions)")
        x = self.patch_embed(frames.transpose(1, 2)).flatten(2).transpose(1, 2)
        tubelets = frames.shape[1] // self.tubelet_size
        x = x + self._positions(tubelets).to(x.dtype)
        keep = None
        if self.training and self.token_drop_ratio > 0:
            keep = keep_index(b, (tubelets, *self.grid[1:]), self.token_drop_ratio, self.token_drop_mode,
                              device=x.device)
            x = gather_tokens(x, keep)
        for i, block in enumerate(self.blocks):
            x = checkpoint(block, x, use_reentrant=False) if self._checkpointed(i) else block(x)
        tokens = self.norm(x)
        pooled = self.pool_norm(tokens.mean(dim=1))
        embedding = self.proj(pooled)
        if self.normalize:
            embedding = F.normalize(embedding, dim=-1)
        return SpaceTimeOutput(tokens=tokens, pooled=pooled, embedding=embedding, keep_index=keep)

    def encode_video(self, frames: torch.Tensor) -> torch.Tensor:
        """frames (B, T, 3, H, W) -> (B, embed_dim)."""
        return self.forward(frames).embedding

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """images (B, 3, H, W) -> (B, embed_dim): a one-frame clip."""
        if images.dim() != 4:
            raise ValueError(f"images should be (B, 3, H, W), got shape {tuple(images.shape)}")
        return self.forward(images[:, None]).embedding

    @property
    def num_tokens(self) -> int:
        """Tokens of a full clip before dropping: T/t * H/p * W/p."""
        return math.prod(self.grid)

    def to_config(self) -> dict[str, Any]:
        """A registry config (plain JSON types) that rebuilds this architecture without weights."""
        current = {"token_drop_ratio": self.token_drop_ratio, "token_drop_mode": self.token_drop_mode,
                   "normalize": self.normalize}
        return {"type": type(self).__name__, **self.config, **current}
