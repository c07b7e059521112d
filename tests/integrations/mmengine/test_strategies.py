"""Which of FlexibleRunner's strategies ``vlr train`` gives its fixes, and under which name.

The fixes themselves run in tests/integrations/mmengine/test_care_cpu_distributed.py and
test_care_cpu_sharded.py (FSDP and DeepSpeed on two CPU processes, killed and resumed);
FlexibleRunner's one-device path in test_mllm_training.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("mmengine")

from mmengine._strategy import BaseStrategy, DDPStrategy, SingleDeviceStrategy  # noqa: E402

from vlr_plugins.integrations.mmengine.strategies import (  # noqa: E402
    CpuProcessGroup,
    DeepSpeedFixes,
    StrategyFixes,
    with_fixes,
)


def test_ddp_and_fsdp_get_the_fixes_under_their_own_names():
    from mmengine._strategy import FSDPStrategy

    for kind in (DDPStrategy, FSDPStrategy):
        fixed = with_fixes(kind)
        # FlexibleRunner tells strategies apart by class name
        assert fixed.__name__ == kind.__name__ and issubclass(fixed, kind)
        assert fixed.__mro__[1] is StrategyFixes
        assert with_fixes(fixed) is fixed  # once


def test_deepspeed_gets_the_process_group_and_the_checkpoint_hooks_by_name():
    # MMEngine's DeepSpeedStrategy cannot be imported without deepspeed: a subclass of the
    # same name stands for it, as FlexibleRunner (which matches the name) would see it
    kind = type("DeepSpeedStrategy", (BaseStrategy,), {})
    fixed = with_fixes(kind)
    assert fixed.__name__ == "DeepSpeedStrategy" and fixed.__mro__[1] is DeepSpeedFixes
    assert issubclass(fixed, CpuProcessGroup) and not issubclass(fixed, StrategyFixes)


def test_a_single_device_strategy_is_left_alone():
    assert with_fixes(SingleDeviceStrategy) is SingleDeviceStrategy


def test_layer_classes_resolve_names_of_the_models_modules_and_import_paths():
    from torch import nn

    from vlr_plugins.integrations.mmengine.strategies import layer_classes

    class DecoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(2, 2)

    model = nn.Sequential(DecoderLayer(), DecoderLayer(), nn.LayerNorm(2))
    assert layer_classes(model, ["DecoderLayer"]) == {DecoderLayer}
    assert layer_classes(model, "torch.nn.LayerNorm") == {nn.LayerNorm}  # a dotted path, imported
    assert layer_classes(model, [DecoderLayer, "Linear"]) == {DecoderLayer, nn.Linear}


@pytest.mark.parametrize("names, where", [
    (["EncoderLayer"], "'EncoderLayer' is not the class of any module of the model (its layer classes: DecoderLayer)"),
    (["torch.nn.NoSuchLayer"], "'torch.nn.NoSuchLayer' is not the class"),
    ([], "empty"),
])
def test_a_layer_class_that_is_not_one_is_refused_naming_the_field(names, where):
    from torch import nn

    from vlr_plugins.errors import ConfigError
    from vlr_plugins.integrations.mmengine.strategies import layer_classes

    DecoderLayer = type("DecoderLayer", (nn.Module,), {})
    with pytest.raises(ConfigError, match="strategy.model_wrapper.auto_wrap_policy.transformer_layer_cls") as e:
        layer_classes(nn.Sequential(DecoderLayer()), names)
    assert where in str(e.value)


def test_runners_import_without_deepspeed_which_a_deepspeed_strategy_then_gets():
    """In a fresh interpreter (this one has imported MMEngine's strategies already): the
    runners import without loading deepspeed, and deepspeed still imports afterwards; building
    DeepSpeedFixes' strategy hands it to MMEngine's strategy module."""
    import os
    import subprocess
    import sys

    pytest.importorskip("deepspeed")
    child = (
        "import sys\n"
        "from vlr_plugins.integrations.mmengine.strategies import _hand_deepspeed_to_mmengine, import_runners\n"
        "import_runners()\n"
        "import mmengine._strategy.deepspeed as m\n"
        "print('REPORT', 'loaded' if 'deepspeed' in sys.modules else 'held back', m.deepspeed)\n"
        "_hand_deepspeed_to_mmengine()\n"
        "import deepspeed\n"
        "print('REPORT', m.deepspeed is deepspeed, hasattr(deepspeed, 'initialize'))\n")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    # (deepspeed prints its accelerator's choice to stdout)
    assert [x for x in out.stdout.splitlines() if x.startswith("REPORT ")] == [
        "REPORT held back None", "REPORT True True"]
