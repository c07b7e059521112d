"""Which of FlexibleRunner's strategies ``vlr train`` gives its fixes, and under which name.

The fixes themselves run in tests/integrations/mmengine/test_care_cpu_distributed.py (FSDP
and DeepSpeed on two CPU processes, killed and resumed); FlexibleRunner's one-device path in
test_mllm_training.py.
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
