"""Logit lens of an EOL embedding: which tokens the embedding "says" (CaReBench sec. 5.5, Figure 5).

CaReBench feeds CaRe's embedding of a video into the LM head and decodes the top logits:
after the two training stages the top tokens name the video's objects and actions
("kitchen", "cutting", "tomatoes"), where the base Qwen2-VL's are sub-words and unrelated
words. Here the embedding is :meth:`EOLEmbedder.embed`'s last-token state -- transformers'
``last_hidden_state``, which is already past the model's final norm -- so the output head
is the LM head alone, and the lens logits are exactly the model's next-token logits at the
EOL prompt's last position (a test checks both).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

__all__ = ["LensToken", "LensResult", "logit_lens", "plot_lens"]


@dataclass(frozen=True)
class LensToken:
    """One of the top tokens: its ``rank`` (1 = highest logit), ``id``, ``token`` (decoded
    alone), ``logit`` and ``probability`` (softmax over the whole vocabulary)."""

    rank: int
    id: int
    token: str
    logit: float
    probability: float


@dataclass(frozen=True)
class LensResult:
    """The lens of one input: ``modality``, ``input`` (the text, or the file's path), the
    ``top`` tokens, and the EOL prompt the embedding was read from."""

    modality: str
    input: str
    top: list[LensToken] = field(default_factory=list)
    prompt: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> str:
        """A plain-text table: rank, token (as ``repr``, so spaces and newlines show), logit, probability."""
        lines = [f"{'rank':>4}  {'token':<24} {'logit':>9} {'prob':>8}"]
        lines += [f"{t.rank:>4}  {repr(t.token):<24} {t.logit:>9.3f} {t.probability:>8.4f}" for t in self.top]
        return "\n".join(lines)


def _head(model: torch.nn.Module) -> torch.nn.Module:
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise ValueError(f"{type(model).__name__} has no output head (get_output_embeddings() is None): the logit "
                         "lens needs the LM head of a causal LM / MLLM")
    return head


@torch.no_grad()
def logit_lens(embedder: Any, modality: str, item: Any, top_k: int = 50) -> LensResult:
    """The ``top_k`` tokens of ``embedder``'s EOL embedding of ``item`` (a string for
    ``text``, a path / frames for ``image`` and ``video``) through its LM head.

    Formula: ``logits = lm_head(h_L[last])``, ``h_L`` the last hidden states (after the
    final norm), ``last`` the EOL prompt's last token.

    Example::

        emb = EOLEmbedder("path/to/CaRe-7B", prompt="care")
        print(logit_lens(emb, "video", "chef.mp4", top_k=50).table())
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be an integer >= 1, found {top_k!r}")
    inputs = embedder.inputs(modality, [item])
    hidden = embedder.embed(inputs)
    head = _head(embedder.model)
    logits = head(hidden.to(head.weight.dtype)).float()[0]
    probs = logits.softmax(-1)
    k = min(top_k, logits.numel())
    values, ids = logits.topk(k)
    tokenizer = embedder.tokenizer
    top = [LensToken(rank=r + 1, id=int(i), token=tokenizer.decode([int(i)]), logit=float(v),
                     probability=float(probs[i]))
           for r, (v, i) in enumerate(zip(values.tolist(), ids.tolist()))]
    shown = item if isinstance(item, str) else os.fspath(item) if isinstance(item, os.PathLike) else \
        f"<{type(item).__name__}>"
    prompt = embedder.prompts(modality, [item] if modality == "text" else None, count=1)[0]
    return LensResult(modality=modality, input=shown, top=top, prompt=prompt)


def plot_lens(results: Sequence[LensResult], path: str | os.PathLike[str], labels: Sequence[str] | None = None,
              title: str = "") -> str:
    """Horizontal bars of each result's top tokens by logit, one panel per result (Figure 5's
    comparison of two models), written to ``path`` (PNG). Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = list(results)
    labels = list(labels) if labels is not None else [r.input for r in results]
    height = max(3.0, 0.22 * max(len(r.top) for r in results) + 1.0)
    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), height), squeeze=False)
    for ax, result, label in zip(axes[0], results, labels):
        tokens = [repr(t.token)[1:-1] or "''" for t in result.top][::-1]
        ax.barh(range(len(tokens)), [t.logit for t in result.top][::-1], color="#4c72b0")
        ax.set_yticks(range(len(tokens)), tokens, fontsize=7)
        ax.set_xlabel("logit")
        ax.set_title(str(label)[:60], fontsize=9)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return os.fspath(path)
