"""Long-CLIP's checkpoint layout and text forward, written from its paper and code for the tests.

* :func:`save_long_clip_checkpoint`: a random tiny CLIP saved as Long-CLIP saves one
  (``torch.save(model.state_dict())`` of its CLIP class: a plain state dict in OpenAI CLIP's
  key layout with two 248-row text positional tables, ``positional_embedding`` and
  ``positional_embedding_res``), the two tables distinct in every row;
* :func:`long_clip_encode_text`: Long-CLIP's ``encode_text`` (model/model_longclip.py) as a
  plain re-implementation in float64 on such a state dict, read by OpenAI's key names: token
  embeddings plus ``positional_embedding * mask1 + positional_embedding_res * mask2`` (masks
  of 248 rows, one on rows < 20 and on rows >= 20 respectively), pre-LN residual blocks with
  causal multi-head attention and a QuickGELU MLP, ``ln_final``, the features at the end token
  (the largest id) times ``text_projection``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

LONG_CLIP_ROWS, LONG_CLIP_KEPT = 248, 20
SOT, EOT = 49406, 49407

# a tiny OpenAI-style CLIP (QuickGELU, as OpenAI's and so Long-CLIP's), 77 positions as a base
TINY_LONG_CLIP = {
    "embed_dim": 16,
    "quick_gelu": True,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}


def register_tiny_long_clip(folder: Path, name: str = "vlr-test-longclip", config: dict | None = None) -> str:
    """Register the tiny base config as ``name`` with open_clip; returns ``name``."""
    import open_clip

    path = Path(folder) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config or TINY_LONG_CLIP))
    open_clip.add_model_config(path)
    return name


def long_clip_state(config: dict | None = None, seed: int = 0) -> dict[str, torch.Tensor]:
    """A random tiny CLIP's state dict at 248 positions, in Long-CLIP's two-table layout."""
    import open_clip

    cfg = json.loads(json.dumps(config or TINY_LONG_CLIP))
    cfg["text_cfg"]["context_length"] = LONG_CLIP_ROWS
    torch.manual_seed(seed)
    state = open_clip.CLIP(**cfg).state_dict()  # OpenAI CLIP's key names are open_clip CLIP's
    width = cfg["text_cfg"]["width"]
    state["positional_embedding"] = torch.randn(LONG_CLIP_ROWS, width) * 0.5
    state["positional_embedding_res"] = torch.randn(LONG_CLIP_ROWS, width) * 0.5 + 1.0
    return state


def save_long_clip_checkpoint(path: Path, config: dict | None = None, seed: int = 0) -> dict[str, torch.Tensor]:
    """:func:`long_clip_state` saved at ``path`` as Long-CLIP saves it; returns the state dict."""
    state = long_clip_state(config, seed)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return state


def token_rows(ends: list[int], seed: int = 1) -> torch.Tensor:
    """(len(ends), 248) token ids: start token, random words, the end token at each ``ends[i]``, then 0."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.zeros(len(ends), LONG_CLIP_ROWS, dtype=torch.long)
    for i, end in enumerate(ends):
        rows[i, 0] = SOT
        rows[i, 1:end] = torch.randint(1, SOT, (end - 1,), generator=g)
        rows[i, end] = EOT
    return rows


def long_clip_encode_text(state: dict[str, torch.Tensor], tokens: torch.Tensor, heads: int) -> torch.Tensor:
    """Long-CLIP's ``encode_text`` on ``state`` (its checkpoint layout), in float64: (N, 248) -> (N, D)."""
    sd = {k: v.double() for k, v in state.items() if v.is_floating_point()}
    mask1 = torch.zeros(LONG_CLIP_ROWS, 1, dtype=torch.float64)
    mask1[:LONG_CLIP_KEPT] = 1
    mask2 = torch.zeros(LONG_CLIP_ROWS, 1, dtype=torch.float64)
    mask2[LONG_CLIP_KEPT:] = 1
    x = sd["token_embedding.weight"][tokens]
    x = x + sd["positional_embedding"] * mask1 + sd["positional_embedding_res"] * mask2
    n, length, width = x.shape
    head = width // heads
    causal = torch.full((length, length), float("-inf"), dtype=torch.float64).triu(1)
    layers = len({k.split(".")[2] for k in sd if k.startswith("transformer.resblocks.")})
    for i in range(layers):
        p = f"transformer.resblocks.{i}."
        h = F.layer_norm(x, (width,), sd[p + "ln_1.weight"], sd[p + "ln_1.bias"], eps=1e-5)
        qkv = h @ sd[p + "attn.in_proj_weight"].T + sd[p + "attn.in_proj_bias"]
        q, k, v = (t.reshape(n, length, heads, head).transpose(1, 2) for t in qkv.chunk(3, dim=-1))
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(head) + causal, dim=-1)
        att = (weights @ v).transpose(1, 2).reshape(n, length, width)
        x = x + att @ sd[p + "attn.out_proj.weight"].T + sd[p + "attn.out_proj.bias"]
        h = F.layer_norm(x, (width,), sd[p + "ln_2.weight"], sd[p + "ln_2.bias"], eps=1e-5)
        h = h @ sd[p + "mlp.c_fc.weight"].T + sd[p + "mlp.c_fc.bias"]
        h = h * torch.sigmoid(1.702 * h)  # QuickGELU
        x = x + h @ sd[p + "mlp.c_proj.weight"].T + sd[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (width,), sd["ln_final.weight"], sd["ln_final.bias"], eps=1e-5)
    return x[torch.arange(n), tokens.argmax(dim=-1)] @ sd["text_projection"]
