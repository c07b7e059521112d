"""What ``vlr eval`` scores: a text side that embeds texts into the space of the stored item
embeddings, and optionally a matching head that re-ranks each query's best candidates.

The protocol a model follows (``--model module:callable``, docs/eval.md):

======================================  ========  ============================================
member                                  needed    meaning
======================================  ========  ============================================
``encode_text(texts) -> (N, D)``        yes       one finite row per text (a list of N str);
                                                  rows need not be normalised
``encode_text(..., max_tokens=)``       no        taken if named: the benchmark's token budget
``encode_text(..., view=)``             no        taken if named: the protocol's text view
                                                  (``"summary"`` or ``"detailed"``)
``embed_dim: int``                      no        checked against every store before encoding
                                                  (without it the first benchmark's first text
                                                  is encoded to learn D)
``max_positions: int``                  no        the largest budget it takes
``match_scores(item_ids, item_emb,      no        a matching head (ITM): the score of P (item,
texts) -> (P,)``                                  text) pairs, higher is a better match;
                                                  ``item_emb`` (P, D) are the store's rows.
                                                  ``--rerank-k K`` re-ranks each query's top K
======================================  ========  ============================================

The spec ``--model`` gives is read by :mod:`vlr_plugins.specs`: our checkpoints (``vlr
train``, ``blip:``) are scored through their tokenizer; ``open_clip:MODEL:CHECKPOINT_OR_TAG``
through :class:`~vlr_plugins.integrations.open_clip.text_model.OpenCLIPTextModel`;
``mllm:FOLDER[:PROMPT]`` (CaRe, E5-V) through :meth:`~vlr_plugins.mllm.EOLEmbedder.encode_text`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from tqdm.auto import tqdm

from vlr_plugins.errors import ConfigError, UsageError
from vlr_plugins.eval.rerank import rerank_pairs

__all__ = ["TextModel", "encode_with_model", "imported_text_model", "match_reranker", "takes_keyword",
           "text_model_dim"]

_PROBE = "a person walks a dog along the beach"


@runtime_checkable
class TextModel(Protocol):
    """A text side ``vlr eval`` can score: ``encode_text(texts: list[str]) -> (N, D)``.

    The optional members (``max_tokens=``/``view=`` keywords, ``embed_dim``,
    ``max_positions``, ``match_scores``) are listed in the module docstring.
    ``isinstance(obj, TextModel)`` checks the name only.

    Example::

        class Bag:
            embed_dim = 4

            def encode_text(self, texts):
                return torch.stack([torch.tensor([t.count(w) for w in ("dog", "cat", "car", "sea")],
                                                 dtype=torch.float32) for t in texts])
    """

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor: ...


def _name(model: Any) -> str:
    return str(getattr(model, "name", None) or type(model).__name__)


def takes_keyword(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` has a parameter called ``name`` that can be passed by keyword."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params and params[name].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                    inspect.Parameter.KEYWORD_ONLY)


def _rows(out: Any, count: int, what: str) -> torch.Tensor:
    """``out`` as a (count, D) float32 CPU tensor of finite rows, or a ConfigError naming ``what``."""
    try:
        emb = torch.as_tensor(out)
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(f"{what} returned a {type(out).__name__}; expected a tensor ({count}, D)") from None
    if emb.ndim != 2 or emb.shape[0] != count or emb.shape[1] < 1:
        raise ConfigError(f"{what} returned shape {tuple(emb.shape)} for {count} texts; expected ({count}, D)")
    emb = emb.detach().float().cpu()
    if not bool(torch.isfinite(emb).all()):
        row = int((~torch.isfinite(emb).all(dim=1)).nonzero()[0])
        raise ConfigError(f"{what} returned a row that is not finite (NaN or inf), row {row} of {count}")
    return emb


def encode_with_model(model: Any, texts: Sequence[str], *, max_tokens: int | None = None, view: str | None = None,
                      batch_size: int = 256, progress: bool = True, desc: str = "encode texts") -> torch.Tensor:
    """``model.encode_text`` over ``texts`` (M,) in batches -> (M, D) float32 on the CPU.

    ``max_tokens`` and ``view`` are passed when given and when ``encode_text`` names them
    (:func:`takes_keyword`). Each batch must come back as (batch, D) with finite rows, or
    a :class:`~vlr_plugins.errors.ConfigError` names the model.
    """
    options = {key: value for key, value in (("max_tokens", max_tokens), ("view", view))
               if value is not None and takes_keyword(model.encode_text, key)}
    if len(texts) == 0:
        raise ValueError("no texts to encode")
    out = []
    with torch.no_grad():
        for start in tqdm(range(0, len(texts), batch_size), desc=desc, disable=not progress, unit="batch",
                          leave=False):
            batch = list(texts[start:start + batch_size])
            out.append(_rows(model.encode_text(batch, **options), len(batch), f"{_name(model)}.encode_text"))
    if len({e.shape[1] for e in out}) > 1:
        raise ConfigError(f"{_name(model)}.encode_text returned rows of different widths: "
                          f"{sorted({e.shape[1] for e in out})}")
    return torch.cat(out)


def text_model_dim(model: Any, text: str = _PROBE) -> int:
    """The width D of ``model``'s text embeddings: its ``embed_dim``, else that of ``text`` encoded."""
    dim = getattr(model, "embed_dim", None)
    if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0:
        return dim
    return int(encode_with_model(model, [text], progress=False).shape[1])


def match_reranker(model: Any, item_ids: Sequence[str], texts: Sequence[str],
                   item_emb: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor, str], torch.Tensor]:
    """The ``rerank`` hook of :func:`~vlr_plugins.eval.retrieval_recall` from ``model.match_scores``.

    For each query and each of its candidates the hook forms the (item, text) pair (the
    query is the item for ``"i2t"``, the text for ``"t2i"``) and asks
    ``model.match_scores(item_ids (P,), item_emb (P, D), texts (P,)) -> (P,)`` for their
    scores; ``item_emb`` are the rows of the store, in the order of ``item_ids``.
    """
    name = f"{_name(model)}.match_scores"

    def rerank(queries: torch.Tensor, candidates: torch.Tensor, direction: str) -> torch.Tensor:
        q, k = candidates.shape
        items, text_rows = rerank_pairs(queries, candidates, direction)
        items, text_rows = items.cpu(), text_rows.cpu()
        with torch.no_grad():
            out = model.match_scores([item_ids[i] for i in items.tolist()], item_emb[items],
                                     [texts[j] for j in text_rows.tolist()])
        scores = torch.as_tensor(out).detach().float().cpu()
        if scores.shape != (q * k,):
            raise ConfigError(f"{name} returned shape {tuple(scores.shape)} for {q * k} pairs; expected ({q * k},)")
        if not bool(torch.isfinite(scores).all()):
            raise ConfigError(f"{name} returned a score that is not finite (NaN or inf)")
        return scores.reshape(q, k).to(candidates.device)

    return rerank


def imported_text_model(module_name: str, attr: str, *, spec: str, setting: str) -> Any:
    """``attr`` (may be dotted) of ``module_name``, imported with the current folder first: an
    object with ``encode_text``, or a class or function that returns one when called without
    arguments (``--model module:callable``; :func:`vlr_plugins.specs.load_text_model` reads
    the spec). An ``nn.Module`` is put in eval mode, not moved."""
    from vlr_plugins._imports import import_attr

    obj = import_attr(module_name, attr, lambda problem, _: UsageError(setting, f"{spec!r}: {problem}"))
    if inspect.isclass(obj) or (callable(obj) and not hasattr(obj, "encode_text")):
        obj = obj()
    if not callable(getattr(obj, "encode_text", None)):
        raise UsageError(setting, f"{spec!r} gives a {type(obj).__name__}, which has no encode_text(texts) -> "
                                  "(N, D); see docs/eval.md (the text model protocol)")
    if isinstance(obj, torch.nn.Module):
        obj.eval()
    return obj
