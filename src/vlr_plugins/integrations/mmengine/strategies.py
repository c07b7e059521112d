"""``FlexibleRunner``'s DDP, FSDP and DeepSpeed strategies as ``vlr train`` builds them: on CPU
processes (gloo) too, and resumable under FSDP, without patching MMEngine or torch.

:func:`~vlr_plugins.integrations.mmengine.console.build_runner` puts :class:`CpuProcessGroup`
in front of a config's ``DDPStrategy``, ``FSDPStrategy`` or ``DeepSpeedStrategy`` (or a
subclass): as :class:`StrategyFixes` for the first two, as :class:`DeepSpeedFixes` for
DeepSpeed, keeping the strategy's class name (:func:`with_fixes`). What they add to
MMEngine 0.10's:

- **CPU processes: the group** (all three). They start their process group through
  ``init_dist``, which calls ``torch.cuda.set_device``. Where no accelerator is visible,
  :func:`~vlr_plugins.integrations.mmengine.cpu_distributed.init_cpu_process_group` starts
  it first (as on the ``Runner`` path), and MMEngine finds it started. DeepSpeed then runs
  on its CPU accelerator (``DS_ACCELERATOR=cpu``, or found so), whose communication backend
  is gloo without Intel's oneCCL bindings.
- **CPU processes: the wrapper.** ``DDPStrategy`` passes ``device_ids=[LOCAL_RANK]``, which
  DDP refuses for a CPU module: a config that names no wrapper gets
  :class:`~vlr_plugins.integrations.mmengine.cpu_distributed.CpuCapableDistributedDataParallel`.
  ``FSDPStrategy`` passes ``device_id=LOCAL_RANK``, which torch's FSDP reads as a CUDA
  index: its wrapper gets ``device_id=torch.device("cpu")`` unless the config names one
  (torch's FSDP shards and trains on CPU processes over gloo once told the device).
- **CPU processes: FSDP's optimizer checkpoint.** With ``state_dict_cfg: full``, MMEngine
  asks for the optimizer state gathered with ``offload_to_cpu=True``; torch's FSDP then
  skips its copy of each gathered state and relies on ``.cpu()`` to make one, which on
  the CPU returns the gather buffer itself: every state of a parameter comes out as the
  last one gathered (AdamW's ``exp_avg`` saved equal to its ``exp_avg_sq``), and a resumed
  run drifts from the uninterrupted one. On CPU processes the gather does not offload
  (the state is on the CPU already).
- **DeepSpeed checkpoints, on any device**: the runner's checkpoint hooks
  (:class:`DeepSpeedFixes`).
- **FSDP's sharded checkpoints (``state_dict_cfg: local``), on any device.** Each rank
  writes ``rank{i}.pth`` into the checkpoint's folder, with torch's ``ShardedTensor`` for
  the flat parameter and for AdamW's moments: ``torch.load(weights_only=True)`` refuses
  the class, and unpickling one needs the process group of the run that saved it. Ours
  saves each as its local shards, plain tensors with their offsets and the global size
  (``{"vlr_sharded_tensor": ...}``), and rebuilds the ``ShardedTensor`` over the process
  group on resume.
- **FSDP's transformer layer policy, on any device.** torch's ``transformer_auto_wrap_policy``
  takes classes; a config holds names. ``transformer_layer_cls`` of a config's
  ``model_wrapper.auto_wrap_policy`` may name them (``[Qwen2VLDecoderLayer]``: a class of
  one of the model's modules, or a dotted import path), resolved on the built model.
- **FSDP gradient clipping, on any device.** MMEngine's ``OptimWrapper`` clips with
  ``torch.nn.utils.clip_grad_norm_`` over the parameters it holds, which under FSDP are each
  rank's shards: each rank clips by its own shard's norm (with a layer wrap policy the LoRA
  adapters of a tiny Qwen2-VL ended 7e-4 from one process's with ``max_norm`` 0.01), a rank
  whose shards hold no gradient skips the clip, and the logged ``grad_norm`` is rank 0's
  share (or missing). Under FSDP ours clips by the whole gradient's norm (FSDP's own
  ``clip_grad_norm_`` on the root module, on every rank) and logs it (:func:`clip_whole_norm`).
- **FSDP resume, on any device.** ``FSDPStrategy.load_optim_state_dict`` calls
  ``FSDP.optim_state_dict_to_load(state_dict, model, optimizer)``, torch 2.0's argument
  order; since torch 2.1 it is ``(model, optim, optim_state_dict)``, and the call stops
  with "unhashable type: 'dict'" on every ``--resume``. Ours passes them by name.

- **Start-up, on any device.** ``mmengine.runner`` imports its strategies, whose DeepSpeed
  module imports deepspeed at its top where it is installed, whether a config uses it or not:
  ~5 s of every MMEngine process's start (9 s instead of 4 s for torch, transformers and
  MMEngine on a 2-core AMD EPYC). :func:`import_runners` imports them with deepspeed held
  back (MMEngine binds ``None``, as where it is absent), and :class:`DeepSpeedFixes` imports
  deepspeed and hands it to MMEngine's module when a DeepSpeed strategy is built.

Which DeepSpeed releases MMEngine 0.10.7 can drive, and on CPU: docs/scaling.md.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import torch

from vlr_plugins.integrations.mmengine.cpu_distributed import (CpuCapableDistributedDataParallel,
                                                               init_cpu_process_group, on_cpu_processes)
from vlr_plugins.integrations.mmengine.registry import SCOPE

__all__ = ["SHARDED_TENSOR", "CpuProcessGroup", "DeepSpeedFixes", "StrategyFixes", "clip_whole_norm", "fsdp_clip_kwargs",
           "import_runners", "layer_classes", "plain_to_sharded", "sharded_to_plain", "with_fixes"]


#: the key of a ShardedTensor saved as plain shards (FSDP's ``state_dict_cfg: local``)
SHARDED_TENSOR = "vlr_sharded_tensor"


def sharded_to_plain(value: Any) -> Any:
    """``value`` (a state dict, nested) with each torch ``ShardedTensor`` replaced by
    ``{SHARDED_TENSOR: {"size": [...], "shards": [{"offsets": [...], "sizes": [...],
    "tensor": t}, ...]}}``: this rank's shards, loadable by ``torch.load(weights_only=True)``."""
    from torch.distributed._shard.sharded_tensor import ShardedTensor

    if isinstance(value, ShardedTensor):
        shards = [{"offsets": list(s.metadata.shard_offsets), "sizes": list(s.metadata.shard_sizes),
                   "tensor": s.tensor.detach()} for s in value.local_shards()]
        return {SHARDED_TENSOR: {"size": list(value.size()), "shards": shards}}
    if isinstance(value, dict):
        return {k: sharded_to_plain(v) for k, v in value.items()}
    return value


def plain_to_sharded(value: Any) -> Any:
    """What :func:`sharded_to_plain` saved, with each ``ShardedTensor`` rebuilt over the
    default process group (collective: every rank rebuilds its checkpoint's, in its order)."""
    if isinstance(value, dict) and set(value) == {SHARDED_TENSOR}:
        import torch.distributed as dist
        from torch.distributed._shard.metadata import ShardMetadata
        from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards

        saved = value[SHARDED_TENSOR]
        rank = dist.get_rank()
        shards = [Shard(s["tensor"], ShardMetadata(list(s["offsets"]), list(s["sizes"]),
                                                   f"rank:{rank}/{s['tensor'].device}"))
                  for s in saved["shards"]]
        return init_from_local_shards(shards, *saved["size"])
    if isinstance(value, dict):
        return {k: plain_to_sharded(v) for k, v in value.items()}
    return value


#: where a config gives FSDP's transformer layer classes
LAYER_CLS_FIELD = "strategy.model_wrapper.auto_wrap_policy.transformer_layer_cls"


def layer_classes(model: Any, names: Any) -> set[type]:
    """The classes ``transformer_auto_wrap_policy`` wraps, from a config's
    ``transformer_layer_cls``: classes, or their names as a config can hold them (a class
    name of one of ``model``'s modules, as ``Qwen2VLDecoderLayer``, or a dotted import path).
    torch's policy takes classes only ("isinstance() arg 2 must be a type"); a name no module
    of ``model`` has is a :class:`~vlr_plugins.errors.ConfigError` naming the field."""
    from vlr_plugins.errors import ConfigError

    names = [names] if isinstance(names, (str, type)) else list(names or [])
    present = {type(m).__name__: type(m) for m in model.modules()}
    found: set[type] = set()
    for name in names:
        if isinstance(name, type):
            found.add(name)
            continue
        kind = present.get(str(name))
        if kind is None and "." in str(name):
            from mmengine.utils import get_object_from_string

            kind = get_object_from_string(str(name))
        if not isinstance(kind, type):
            layers = sorted(n for n in present if n.endswith(("Layer", "Block")))
            raise ConfigError(f"{LAYER_CLS_FIELD}: {name!r} is not the class of any module of the model "
                              f"(its layer classes: {', '.join(layers) or 'none'})")
        found.add(kind)
    if not found:
        raise ConfigError(f"{LAYER_CLS_FIELD}: empty: name the model's layer class (e.g. its decoder layer's)")
    return found


def _is_fsdp(strategy: Any) -> bool:
    from mmengine._strategy import FSDPStrategy

    return isinstance(strategy, FSDPStrategy)


#: the ``clip_grad`` keys FSDP's ``clip_grad_norm_`` takes (besides ``type: norm``)
_FSDP_CLIP_KEYS = ("max_norm", "norm_type")


def fsdp_clip_kwargs(clip_grad: Any) -> dict:
    """The arguments of FSDP's ``clip_grad_norm_`` from an optimizer wrapper's ``clip_grad``
    (without ``type``); a key it does not take is a :class:`~vlr_plugins.errors.ConfigError`
    (``vlr train`` checks a config's before the run starts)."""
    from vlr_plugins.errors import ConfigError

    kwargs = {k: v for k, v in dict(clip_grad).items() if k != "type"}
    unknown = sorted(set(kwargs) - set(_FSDP_CLIP_KEYS))
    if unknown:
        raise ConfigError(f"optim_wrapper.clip_grad: {', '.join(unknown)}: not taken under FSDPStrategy, which "
                          f"clips by the whole gradient's norm with FSDP's clip_grad_norm_ "
                          f"({' and '.join(_FSDP_CLIP_KEYS)} only)")
    return kwargs


def clip_whole_norm(optim_wrapper: Any, model: Any) -> None:
    """Make each of ``optim_wrapper``'s wrappers (an ``OptimWrapperDict``'s too) that clips by
    norm clip ``model``'s gradients (an FSDP root module) by the norm of the whole gradient,
    with FSDP's ``clip_grad_norm_`` (a collective: every rank calls it at each update, whether
    its shards hold gradients or not), and log that norm as MMEngine does (``train/grad_norm``).
    A ``model`` that is not an FSDP module (a config's own wrapper) keeps MMEngine's clip."""
    from mmengine.optim import OptimWrapperDict

    if not hasattr(model, "clip_grad_norm_"):
        return
    wrappers = optim_wrapper.values() if isinstance(optim_wrapper, OptimWrapperDict) else [optim_wrapper]
    for wrapper in wrappers:
        if getattr(wrapper, "clip_func", None) is not torch.nn.utils.clip_grad_norm_:
            continue  # no clipping, or by value (elementwise: each shard's is the whole's)
        kwargs = fsdp_clip_kwargs(wrapper.clip_grad_kwargs)

        def clip(wrapper: Any = wrapper, kwargs: dict = kwargs) -> None:
            total = model.clip_grad_norm_(**kwargs)
            wrapper.message_hub.update_scalar(f"train/{wrapper.grad_name}", float(total))

        wrapper._clip_grad = clip


class CpuProcessGroup:
    """Put before an MMEngine strategy that starts a process group (``DDPStrategy``,
    ``FSDPStrategy``, ``DeepSpeedStrategy``) in the MRO: on CPU processes the group is
    started without ``torch.cuda.set_device``."""

    def _setup_env(self, *, launcher: str | None = None, dist_cfg: dict | None = None, **kwargs: Any) -> None:
        if launcher not in (None, "none"):
            init_cpu_process_group(launcher, {"dist_cfg": dist_cfg})
        super()._setup_env(launcher=launcher, dist_cfg=dist_cfg, **kwargs)  # type: ignore[misc]


class DeepSpeedFixes(CpuProcessGroup):
    """Put before MMEngine's ``DeepSpeedStrategy`` in the MRO: the process group on CPU
    processes, and the runner's checkpoint hooks, which MMEngine's DeepSpeed strategy does not
    call ("``callback`` parameter is not supported yet"): ``before_save_checkpoint`` on what
    the runner adds to DeepSpeed's checkpoint (``meta``, ``message_hub``), and
    ``after_load_checkpoint`` on what a resume reads back, so that
    :class:`~vlr_plugins.integrations.mmengine.hooks.WeightsOnlyCheckpointHook` writes
    DeepSpeed's ``mp_rank_00_model_states.pt`` loadable by ``torch.load(weights_only=True)``.
    The DeepSpeed config is kept as plain dicts (DeepSpeed saves it there too)."""

    config: dict

    def __init__(self, **kwargs: Any) -> None:
        _hand_deepspeed_to_mmengine()
        super().__init__(**kwargs)
        self.config = json.loads(json.dumps(self.config))  # MMEngine's ConfigDicts -> dicts

    def save_checkpoint(self, filename: str, *, extra_ckpt: dict | None = None, callback: Any = None,
                        **kwargs: Any) -> None:
        extra_ckpt = dict(extra_ckpt or {})
        if callback is not None:
            callback(extra_ckpt)
        super().save_checkpoint(filename, extra_ckpt=extra_ckpt, **kwargs)  # type: ignore[misc]

    def resume(self, filename: str, *, callback: Any = None, **kwargs: Any) -> dict:
        checkpoint = super().resume(filename, **kwargs)  # type: ignore[misc]
        if callback is not None:
            callback(checkpoint)
        return checkpoint


class StrategyFixes(CpuProcessGroup):
    """Put before an MMEngine ``DDPStrategy`` or ``FSDPStrategy`` (or a subclass) in the
    MRO; the module's docstring says what each method adds."""

    model_wrapper: dict | None

    def _wrap_model(self, model: Any) -> Any:
        if _is_fsdp(self) and self.model_wrapper:
            policy = self.model_wrapper.get("auto_wrap_policy")
            if isinstance(policy, dict) and "transformer_layer_cls" in policy:
                self.model_wrapper = {**self.model_wrapper, "auto_wrap_policy": {
                    **policy, "transformer_layer_cls": layer_classes(model, policy["transformer_layer_cls"])}}
        if on_cpu_processes():
            if _is_fsdp(self):
                wrapper = dict(self.model_wrapper or {"type": "MMFullyShardedDataParallel"})
                wrapper.setdefault("device_id", torch.device("cpu"))
                self.model_wrapper = wrapper
                optim_cfg = self.optim_state_dict_config  # type: ignore[attr-defined]
                if getattr(optim_cfg, "offload_to_cpu", False):
                    self.optim_state_dict_config = dataclasses.replace(optim_cfg, offload_to_cpu=False)
            elif self.model_wrapper is None:
                self.model_wrapper = dict(type=f"{SCOPE}.{CpuCapableDistributedDataParallel.__name__}",
                                          broadcast_buffers=False)
        return super()._wrap_model(model)  # type: ignore[misc]

    def build_optim_wrapper(self, optim_wrapper: Any, model: Any = None) -> Any:
        built = super().build_optim_wrapper(optim_wrapper, model)  # type: ignore[misc]
        if _is_fsdp(self):
            root = model if model is not None else self.model  # type: ignore[attr-defined]
            clip_whole_norm(built, getattr(root, "_orig_mod", root))  # under torch.compile: the module it compiled
        return built

    def _sharded(self) -> bool:
        return _is_fsdp(self) and not self._is_full_state_dict()  # type: ignore[attr-defined]

    def model_state_dict(self) -> dict:
        state = super().model_state_dict()  # type: ignore[misc]
        return sharded_to_plain(state) if self._sharded() else state

    def optim_state_dict(self) -> dict:
        state = super().optim_state_dict()  # type: ignore[misc]
        return sharded_to_plain(state) if self._sharded() else state

    def load_model_state_dict(self, state_dict: dict, **kwargs: Any) -> None:
        if self._sharded():
            state_dict = plain_to_sharded(state_dict)
        super().load_model_state_dict(state_dict, **kwargs)  # type: ignore[misc]

    def load_optim_state_dict(self, state_dict: dict) -> None:
        if not _is_fsdp(self):
            return super().load_optim_state_dict(state_dict)  # type: ignore[misc]
        if self._sharded():
            state_dict = plain_to_sharded(state_dict)
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        wrapper = self.optim_wrapper  # type: ignore[attr-defined]
        loaded = FSDP.optim_state_dict_to_load(model=self.model, optim=wrapper.optimizer,  # type: ignore[attr-defined]
                                               optim_state_dict=state_dict)
        # what the optimizer wrapper saves beside the optimizer's state (AmpOptimWrapper: loss_scaler)
        loaded.update({k: v for k, v in state_dict.items() if k not in ("state", "param_groups")})
        wrapper.load_state_dict(loaded)


def import_runners() -> None:
    """Import ``mmengine.runner`` (and so MMEngine's strategies) without loading deepspeed:
    while they import, ``import deepspeed`` fails as where it is not installed, so MMEngine's
    DeepSpeed module binds ``None``; afterwards deepspeed imports as usual. Nothing changes
    where MMEngine's strategies or deepspeed are imported already."""
    if "mmengine._strategy" in sys.modules or "deepspeed" in sys.modules:
        return
    sys.modules["deepspeed"] = None  # type: ignore[assignment]  # `import deepspeed` raises ImportError
    try:
        import mmengine.runner  # noqa: F401
    finally:
        if "deepspeed" in sys.modules and sys.modules["deepspeed"] is None:
            del sys.modules["deepspeed"]


def _hand_deepspeed_to_mmengine() -> None:
    """deepspeed, imported now, as MMEngine's DeepSpeed strategy module's ``deepspeed`` where
    :func:`import_runners` held it back (where it is not installed MMEngine says so)."""
    import mmengine._strategy.deepspeed as strategy_module

    if strategy_module.deepspeed is None:
        try:
            import deepspeed
        except ImportError:
            return
        strategy_module.deepspeed = deepspeed


def with_fixes(kind: type) -> type:
    """``kind`` (a strategy class) with :class:`StrategyFixes` in front when it is a
    ``DDPStrategy`` (``FSDPStrategy`` is one), :class:`DeepSpeedFixes` when it is a
    ``DeepSpeedStrategy``, under the same name, which ``FlexibleRunner`` reads (it gives
    DeepSpeed its micro batch by that name); any other strategy comes back unchanged."""
    from mmengine._strategy import DDPStrategy

    if issubclass(kind, CpuProcessGroup):
        return kind
    if issubclass(kind, DDPStrategy):
        fix: type = StrategyFixes
    elif any(k.__name__ == "DeepSpeedStrategy" for k in kind.__mro__):  # importable only with deepspeed
        fix = DeepSpeedFixes
    else:
        return kind
    return type(kind.__name__, (fix, kind), {"__module__": __name__})
