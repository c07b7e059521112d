"""The contrastive losses with gradient caching on (GradCache): the InfoNCE modules and
primary-component matching under ``Cached*`` names, with ``cache_chunk=32`` by default.

Each is its uncached loss (same ``forward``, same value); the trainer integrations read
``cache_chunk`` and encode through :func:`~vlr_plugins.losses.cached_encode`. A recipe
can equally write ``loss: {type: MultiPositiveInfoNCELoss, cache_chunk: 32}``.
"""

from __future__ import annotations

from collections.abc import Sequence

from vlr_plugins.losses.infonce import HardNegativeInfoNCELoss, InfoNCELoss, MultiPositiveInfoNCELoss
from vlr_plugins.losses.pcm import LONG_CLIP_TEMPERATURE, PrimaryComponentMatchingLoss
from vlr_plugins.registry import LOSSES

__all__ = [
    "CachedInfoNCELoss",
    "CachedMultiPositiveInfoNCELoss",
    "CachedHardNegativeInfoNCELoss",
    "CachedPrimaryComponentMatchingLoss",
]

#: rows per encoder call, as sentence-transformers' ``mini_batch_size``
DEFAULT_CACHE_CHUNK = 32


@LOSSES.register
class CachedInfoNCELoss(InfoNCELoss):
    """``InfoNCELoss`` trained with gradient caching: any batch size in one chunk's memory.

    Expects what ``InfoNCELoss`` expects (``image_emb`` ``(B, D)``, ``text_emb``
    ``(B, D)``); ``cache_chunk`` rows are encoded at a time when a trainer integration
    (MMEngine, open_clip, LAVIS) trains with it.

    Formula: the loss is ``InfoNCELoss``'s; the trainer encodes the batch in chunks without
    a graph, back-propagates the loss to the embeddings once, then re-encodes each chunk
    with a graph (dropout replayed) and back-propagates its rows' gradient. Loss and
    parameter gradients equal the uncached ones (to float rounding).

    Reference: Gao et al., "Scaling Deep Contrastive Learning Batch Size under Memory
    Limited Setup", RepL4NLP 2021.

    Relations: ``InfoNCELoss(cache_chunk=n)`` is the same loss; sentence-transformers'
    ``CachedMultipleNegativesRankingLoss`` is the single-direction text analogue. Outside
    a trainer integration, wrap the encoder in :func:`~vlr_plugins.losses.cached_encode`.

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import CachedInfoNCELoss, cached_encode
        >>> loss_fn = CachedInfoNCELoss(cache_chunk=2)
        >>> encoder = torch.nn.Linear(8, 16)
        >>> text = cached_encode(encoder, torch.randn(5, 8), chunk_size=loss_fn.cache_chunk,
        ...                      parameters=encoder)
        >>> loss_fn(torch.randn(5, 16), text).backward()
    """

    def __init__(
        self,
        cache_chunk: int = DEFAULT_CACHE_CHUNK,
        temperature: float = 0.07,
        learnable_temperature: bool = False,
        temperature_range: Sequence[float] = (0.001, 0.5),
        gather: bool | None = None,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(temperature, learnable_temperature, temperature_range, gather,
                         label_smoothing, cache_chunk)


@LOSSES.register
class CachedMultiPositiveInfoNCELoss(MultiPositiveInfoNCELoss):
    """``MultiPositiveInfoNCELoss`` trained with gradient caching: any batch size in one
    chunk's memory.

    Expects what ``MultiPositiveInfoNCELoss`` expects (``image_emb`` ``(B, D)``,
    ``text_emb`` ``(N, D)``, ``text_owner`` ``(N,)``); the trainer integrations encode
    ``cache_chunk`` texts at a time.

    Formula: ``MultiPositiveInfoNCELoss``'s (``variant`` ``mean_log`` or ``log_sum``),
    computed once on all N captions; the encoder's graph exists one chunk at a time.

    Reference: Gao et al., "Scaling Deep Contrastive Learning Batch Size under Memory
    Limited Setup", RepL4NLP 2021.

    Relations: ``MultiPositiveInfoNCELoss(cache_chunk=n)`` is the same loss; the chunks
    cut across images, so an image's captions may be encoded in different chunks.

    Example:
        >>> from vlr_plugins.losses import CachedMultiPositiveInfoNCELoss
        >>> CachedMultiPositiveInfoNCELoss(cache_chunk=64, variant="log_sum").cache_chunk
        64
    """

    def __init__(
        self,
        cache_chunk: int = DEFAULT_CACHE_CHUNK,
        variant: str = "mean_log",
        temperature: float = 0.07,
        learnable_temperature: bool = False,
        temperature_range: Sequence[float] = (0.001, 0.5),
        gather: bool | None = None,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(variant, temperature, learnable_temperature, temperature_range, gather,
                         label_smoothing, cache_chunk)


@LOSSES.register
class CachedHardNegativeInfoNCELoss(HardNegativeInfoNCELoss):
    """``HardNegativeInfoNCELoss`` trained with gradient caching: captions and hard negatives
    encoded ``cache_chunk`` rows at a time.

    Expects what ``HardNegativeInfoNCELoss`` expects (captions with ``text_owner``, hard
    negatives ``neg_emb`` ``(M, D)`` with ``neg_owner``); the trainer integrations encode
    the N + M texts in one cached pass.

    Formula: ``HardNegativeInfoNCELoss``'s (negatives in the image-to-text denominators,
    ``hard_negative_scope`` ``batch`` or ``own``), computed once on the whole batch.

    Reference: Gao et al., 2021 (GradCache); Yuksekgonul et al., ICLR 2023 (NegCLIP).

    Relations: ``HardNegativeInfoNCELoss(cache_chunk=n)`` is the same loss.

    Example:
        >>> from vlr_plugins.losses import CachedHardNegativeInfoNCELoss
        >>> CachedHardNegativeInfoNCELoss(hard_negative_scope="own").cache_chunk
        32
    """

    def __init__(
        self,
        cache_chunk: int = DEFAULT_CACHE_CHUNK,
        hard_negative_scope: str = "batch",
        variant: str = "mean_log",
        temperature: float = 0.07,
        learnable_temperature: bool = False,
        temperature_range: Sequence[float] = (0.001, 0.5),
        gather: bool | None = None,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(hard_negative_scope, variant, temperature, learnable_temperature,
                         temperature_range, gather, label_smoothing, cache_chunk)


@LOSSES.register
class CachedPrimaryComponentMatchingLoss(PrimaryComponentMatchingLoss):
    """``PrimaryComponentMatchingLoss`` (Long-CLIP) trained with gradient caching.

    Expects what ``PrimaryComponentMatchingLoss`` expects (``image_emb``, ``long_text_emb``,
    ``short_text_emb``, each ``(B, D)``); the trainer integrations encode long and short
    captions ``cache_chunk`` rows at a time.

    Formula: ``PrimaryComponentMatchingLoss``'s; the principal components are those of the
    whole (global) batch, since the loss runs once on all embeddings.

    Reference: Gao et al., 2021 (GradCache); Zhang et al., "Long-CLIP", ECCV 2024.

    Relations: ``PrimaryComponentMatchingLoss(cache_chunk=n)`` is the same loss. Long-CLIP
    trains at batch 2048, which caching brings within one chunk's activation memory.

    Example:
        >>> from vlr_plugins.losses import CachedPrimaryComponentMatchingLoss
        >>> CachedPrimaryComponentMatchingLoss(label_smoothing=0.1).get_config_dict()["cache_chunk"]
        32
    """

    def __init__(
        self,
        cache_chunk: int = DEFAULT_CACHE_CHUNK,
        num_components: int = 32,
        short_weight: float = 1.0,
        temperature: float = LONG_CLIP_TEMPERATURE,
        learnable_temperature: bool = True,
        temperature_range: Sequence[float] = (0.001, 0.5),
        gather: bool | None = None,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(num_components, short_weight, temperature, learnable_temperature,
                         temperature_range, gather, label_smoothing, cache_chunk)
