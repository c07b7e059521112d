"""Gradient caching (GradCache): a contrastive batch of any size in the memory of one chunk.

A contrastive loss couples every row of the batch with every other, so the batch cannot
be split into independent micro-batches the way gradient accumulation splits a
classification batch. GradCache (Gao et al., 2021) splits the *encoder* instead:

1. encode the batch chunk by chunk without a graph (the embeddings are small);
2. compute the loss on all the embeddings and back-propagate it to them, once;
3. re-encode each chunk with a graph and back-propagate its rows' gradient from step 2.

The encoder's graph then exists for one chunk at a time, and the parameter gradients are
those of the uncached loss: step 3 replays the random state (dropout) and the autocast
state that step 1 ran under, so every chunk computes the same function twice.

:func:`cached_encode` is steps 1 and 3 as one autograd node: it returns the embeddings
of step 1, and the trainer's own ``loss.backward()`` (or ``scaler.scale(loss).backward()``,
or MMEngine's ``optim_wrapper.update_params(loss)``) performs step 2 and then, reaching
the node, step 3. The node hands the summed parameter gradients of all chunks to autograd
as its own gradients, so each parameter's gradient is accumulated once per backward, as
without caching: gradient accumulation, loss scaling, ``DistributedDataParallel`` (whose
hooks fire once per parameter) and the distributed gather of the losses work unchanged.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

__all__ = ["cached_encode"]

_WHERE = "cached_encode"
_AUTOCAST_DEVICES = ("cpu", "cuda")
_warned_unused = False


def _check_cache_chunk(where: str, cache_chunk: int | None, name: str = "cache_chunk") -> None:
    """``cache_chunk`` is ``None`` (no caching) or an integer >= 1; else a ``ValueError``
    naming ``where`` and the argument ``name``."""
    if cache_chunk is None:
        return
    if isinstance(cache_chunk, bool) or not isinstance(cache_chunk, int) or cache_chunk < 1:
        raise ValueError(f"{where}: {name} must be an integer >= 1 (rows encoded at once) or "
                         f"None (no caching); found {cache_chunk!r}")


def cached_encode(
    encode_fn: Callable[..., Tensor],
    *inputs: Tensor,
    chunk_size: int | None,
    parameters: nn.Module | Iterable[Tensor],
) -> Tensor:
    """``encode_fn(*inputs)``, computed ``chunk_size`` rows at a time with gradient caching.

    Expects:
        encode_fn: maps row slices of ``inputs`` to ``(n, D)`` embeddings, one per row
            (e.g. ``text_encoder``, ``partial(model.encode_text, normalize=True)``); rows
            must not interact (no batch statistics).
        inputs: tensors sharing their first dimension ``N`` (token ids, attention masks,
            pixels); they may not require gradient.
        chunk_size: rows per encoder call; ``None`` = one plain call ``encode_fn(*inputs)``.
        parameters: the trainable tensors ``encode_fn`` reads, or the module holding them
            (those with ``requires_grad``; a module with batch normalisation in training
            mode is refused: its rows interact). Only these get gradients through the cache; a
            trainable tensor the encoder reaches that is not among them is an error at
            backward, and one it does not reach gets ``None`` (and a warning: under
            ``DistributedDataParallel(find_unused_parameters=True)`` it would stall).

    Returns ``(N, D)``: the embeddings of the chunks, concatenated. With gradient enabled
    and trainable ``parameters``, no encoder graph is kept; back-propagating into the
    result re-encodes each chunk with a graph, under the random state (CPU and the CUDA
    devices of ``inputs`` and ``parameters``) and the autocast state of its first pass,
    and the parameters receive the gradient the uncached encoding would give them.
    Without gradient, or without trainable parameters, the chunks are simply encoded one
    after the other; a batch of at most ``chunk_size`` rows is one plain call.

    Reference: Gao et al., "Scaling Deep Contrastive Learning Batch Size under Memory
    Limited Setup", RepL4NLP 2021 (github.com/luyug/GradCache).

    Relations: the loss needs nothing special: any function of the embeddings (the
    InfoNCE losses, primary-component matching, their distributed gather) back-propagates
    into the result. ``MultiPositiveInfoNCELoss(cache_chunk=32)`` and the
    ``Cached*`` losses carry the chunk size for the trainer integrations, which call this.
    The encoder runs twice per chunk (about a third more compute for a transformer), and a
    module that updates state in its forward (batch-norm running statistics) updates it
    twice. Unlike sentence-transformers' ``CachedMultipleNegativesRankingLoss``, which
    back-propagates each chunk from a hook on the loss, the chunks' gradients reach the
    parameters through this node's own return values.

    Example:
        >>> import torch
        >>> from vlr_plugins.losses import cached_encode, multi_positive_infonce
        >>> encoder = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.1))
        >>> x, images = torch.randn(10, 8), torch.randn(10, 16)
        >>> text = cached_encode(encoder, x, chunk_size=4, parameters=encoder)
        >>> multi_positive_infonce(images, text, torch.arange(10)).backward()
        >>> encoder[0].weight.grad.shape
        torch.Size([16, 8])
    """
    _check_cache_chunk(_WHERE, chunk_size, "chunk_size")
    if chunk_size is None:
        return encode_fn(*inputs)
    rows = _check_inputs(inputs)
    if rows <= chunk_size:
        return encode_fn(*inputs)
    chunks = list(zip(*(x.split(chunk_size) for x in inputs)))
    _refuse_batch_statistics(parameters)
    params = _trainable(parameters)
    if not (torch.is_grad_enabled() and params):
        return torch.cat([_checked_output(encode_fn(*chunk), chunk, i) for i, chunk in enumerate(chunks)])
    devices = sorted({t.device.index for t in (*inputs, *params) if t.is_cuda})
    return _CachedEncode.apply(encode_fn, chunks, devices, *params)


class _RandomState:
    """The CPU generator's and some CUDA generators' states at one moment, to run code again
    under exactly those states without moving the generators (GradCache's ``RandContext``)."""

    def __init__(self, cuda_devices: Sequence[int]) -> None:
        self.cuda_devices = list(cuda_devices)
        self.cpu = torch.get_rng_state()
        self.cuda = [torch.cuda.get_rng_state(d) for d in self.cuda_devices]

    @contextmanager
    def replay(self) -> Iterator[None]:
        with torch.random.fork_rng(devices=self.cuda_devices):
            torch.set_rng_state(self.cpu)
            for device, state in zip(self.cuda_devices, self.cuda):
                torch.cuda.set_rng_state(state, device)
            yield


def _autocast_state() -> dict[str, torch.dtype | None]:
    """Per device type: the autocast dtype when autocast is on, else ``None``."""
    return {d: torch.get_autocast_dtype(d) if torch.is_autocast_enabled(d) else None
            for d in _AUTOCAST_DEVICES}


@contextmanager
def _autocast_as(state: dict[str, torch.dtype | None]) -> Iterator[None]:
    """Autocast on (with its dtype) or off for each device type as in ``state``."""
    with ExitStack() as stack:
        for device, dtype in state.items():
            if dtype is not None:
                stack.enter_context(torch.autocast(device, dtype=dtype))
            elif torch.is_autocast_enabled(device):
                stack.enter_context(torch.autocast(device, enabled=False))
        yield


class _CachedEncode(torch.autograd.Function):
    """Steps 1 and 3 of GradCache as one node whose inputs are the encoder's parameters."""

    @staticmethod
    def forward(ctx, encode_fn, chunks, devices, *params):  # type: ignore[override]
        states, outputs = [], []
        for i, chunk in enumerate(chunks):  # autograd runs forward without a graph
            states.append(_RandomState(devices))
            outputs.append(_checked_output(encode_fn(*chunk), chunk, i))
        ctx.encode_fn, ctx.chunks, ctx.states = encode_fn, chunks, states
        ctx.autocast = _autocast_state()
        ctx.params = params  # inputs, not outputs: no reference cycle
        return torch.cat(outputs)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        if ctx.chunks is None:  # cleared by the first backward, which freed the chunks' graphs
            raise RuntimeError(f"{_WHERE}: a second backward through the same cached encoding "
                               f"(retain_graph=True) is not supported; encode again for each backward")
        params = ctx.params
        totals: list[Tensor | None] = [None] * len(params)
        start, graphed = 0, False
        with torch.enable_grad(), _autocast_as(ctx.autocast):
            for chunk, state in zip(ctx.chunks, ctx.states):
                with state.replay():
                    out = ctx.encode_fn(*chunk)
                rows = grad[start : start + out.shape[0]]
                start += out.shape[0]
                if not out.requires_grad:
                    continue
                if not graphed:
                    _check_outside(out, params)
                    graphed = True
                grads = torch.autograd.grad(out, params, rows, allow_unused=True)
                for k, g in enumerate(grads):
                    if g is not None:
                        totals[k] = g if totals[k] is None else totals[k].add_(g)
        if graphed:
            _warn_unused([p for p, total in zip(params, totals) if total is None], len(params))
        ctx.chunks = ctx.states = ctx.encode_fn = ctx.params = None
        return (None, None, None, *totals)


def _refuse_batch_statistics(parameters: nn.Module | Iterable[Tensor]) -> None:
    if not isinstance(parameters, nn.Module):
        return
    for name, module in parameters.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training:
            raise ValueError(
                f"{_WHERE}: {type(parameters).__name__}.{name} ({type(module).__name__}) normalises "
                f"with the statistics of the rows it sees, so encoding in chunks changes the result; "
                f"train without cache_chunk, or freeze the module (eval mode)"
            )


def _trainable(parameters: nn.Module | Iterable[Tensor]) -> list[Tensor]:
    tensors = parameters.parameters() if isinstance(parameters, nn.Module) else parameters
    out, seen = [], set()
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{_WHERE}: parameters must be a module or tensors; found {type(t).__name__}")
        if t.requires_grad and id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _check_inputs(inputs: Sequence[Tensor]) -> int:
    if not inputs:
        raise ValueError(f"{_WHERE}: no inputs to encode")
    for k, x in enumerate(inputs):
        if not isinstance(x, Tensor) or x.ndim == 0:
            raise TypeError(f"{_WHERE}: inputs[{k}] must be a tensor with a batch dimension; found "
                            f"{type(x).__name__}{'' if not isinstance(x, Tensor) else ' of shape ()'}")
        if x.requires_grad:
            raise ValueError(f"{_WHERE}: inputs[{k}] requires gradient, which the cache does not carry "
                             f"back to it; encode from data (token ids, pixels, stored embeddings)")
    rows = {x.shape[0] for x in inputs}
    if len(rows) != 1:
        raise ValueError(f"{_WHERE}: inputs must share their first dimension (rows); found "
                         f"{[x.shape[0] for x in inputs]}")
    return rows.pop()


def _checked_output(out: Tensor, chunk: Sequence[Tensor], index: int) -> Tensor:
    if not isinstance(out, Tensor) or out.ndim == 0 or out.shape[0] != chunk[0].shape[0]:
        found = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        raise ValueError(f"{_WHERE}: encode_fn must return one embedding per input row; chunk {index} "
                         f"has {chunk[0].shape[0]} rows and it returned {found}")
    return out


def _check_outside(out: Tensor, params: Sequence[Tensor]) -> None:
    """The trainable leaves of ``out``'s graph must be among ``params``: one outside them
    would lose its gradient (the first pass kept no graph)."""
    given = {id(p) for p in params}
    reached, stack, seen = {}, [out.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)  # an AccumulateGrad node
        if leaf is not None:
            reached[id(leaf)] = leaf
        stack.extend(next_node for next_node, _ in node.next_functions)
    outside = [tuple(t.shape) for k, t in reached.items() if k not in given]
    if outside:
        raise RuntimeError(
            f"{_WHERE}: the encoder reads {len(outside)} trainable tensors that are not in `parameters` "
            f"(shapes {outside[:5]}{' ...' if len(outside) > 5 else ''}); their gradient would be lost. "
            f"Pass the module that holds them as `parameters`"
        )


def _warn_unused(unused: Sequence[Tensor], n_params: int) -> None:
    """Parameters that no chunk of the step reached get no gradient: warned once. Counted over
    every chunk, since one chunk may rightly skip some (a dual-CLS encoder's chunk of one view)."""
    global _warned_unused
    if unused and not _warned_unused:
        _warned_unused = True
        shapes = [tuple(p.shape) for p in unused]
        warnings.warn(
            f"{_WHERE}: {len(unused)} of the {n_params} tensors in `parameters` are not read by the "
            f"encoder (shapes {shapes[:5]}{' ...' if len(shapes) > 5 else ''}) and get no gradient from "
            f"it; under DistributedDataParallel(find_unused_parameters=True) that stalls the step. "
            f"Pass only the encoder's parameters. (Warned once per process.)",
            UserWarning,
            stacklevel=3,
        )
