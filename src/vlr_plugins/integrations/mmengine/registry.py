"""MMEngine registries of the ``vlr_plugins`` scope (children of MMEngine's roots).

``default_scope='vlr_plugins'`` plus ``custom_imports=dict(imports=
['vlr_plugins.integrations.mmengine'])`` in a config makes every name below resolve
without the user importing anything, the way mmpretrain's registries work: each registry
lists, as ``locations=``, every module of this package that registers into it, and
MMEngine imports them on the registry's first lookup. Every root gets a child (most stay
empty) so MMEngine finds the scope in each registry tree instead of warning and falling
back.
"""

from mmengine import registry as root
from mmengine.registry import Registry

__all__ = ["SCOPE", "MODELS", "DATASETS", "METRICS", "FUNCTIONS", "HOOKS", "DATA_SAMPLERS"]

SCOPE = "vlr_plugins"
_HERE = "vlr_plugins.integrations.mmengine"


def _child(parent: Registry, *modules: str) -> Registry:
    return Registry(parent.name, parent=parent, scope=SCOPE, locations=[f"{_HERE}.{m}" for m in modules])


# model: the text-only model and the core's losses and encoders; mllm_model: CaRe stage II /
# E5-V; mllm_sft_model: CaRe stage I; mvc_model: MVC video-text pretraining
MODELS = _child(root.MODELS, "model", "mvc_model", "mllm_model", "mllm_sft_model")
DATASETS = _child(root.DATASETS, "dataset", "mvc_dataset", "nli_dataset", "caption_sft_dataset")
METRICS = _child(root.METRICS, "metric")
FUNCTIONS = _child(root.FUNCTIONS, "dataset", "mvc_dataset", "nli_dataset", "caption_sft_dataset")
RUNNERS = _child(root.RUNNERS)
# present so the scope resolves in every tree; entries come from MMEngine itself
RUNNER_CONSTRUCTORS = _child(root.RUNNER_CONSTRUCTORS)
LOOPS = _child(root.LOOPS)
HOOKS = _child(root.HOOKS, "hooks", "pretrained_export")
STRATEGIES = _child(root.STRATEGIES)
# MVC's mined hard-negative batches; global batches dealt out in contiguous slices
DATA_SAMPLERS = _child(root.DATA_SAMPLERS, "hard_negative_sampler", "global_batch_sampler")
TRANSFORMS = _child(root.TRANSFORMS)
MODEL_WRAPPERS = _child(root.MODEL_WRAPPERS, "cpu_distributed")  # DDP on CPU processes (gloo)
WEIGHT_INITIALIZERS = _child(root.WEIGHT_INITIALIZERS)
OPTIMIZERS = _child(root.OPTIMIZERS)
OPTIM_WRAPPERS = _child(root.OPTIM_WRAPPERS)
OPTIM_WRAPPER_CONSTRUCTORS = _child(root.OPTIM_WRAPPER_CONSTRUCTORS)
PARAM_SCHEDULERS = _child(root.PARAM_SCHEDULERS)
EVALUATOR = _child(root.EVALUATOR)
VISUALIZERS = _child(root.VISUALIZERS)
VISBACKENDS = _child(root.VISBACKENDS)
LOG_PROCESSORS = _child(root.LOG_PROCESSORS)
