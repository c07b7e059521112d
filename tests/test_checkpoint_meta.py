"""What a checkpoint records for `vlr export`: the loss as an object configures itself, and meta read back."""

from __future__ import annotations

import json

import pytest
import torch

from vlr_plugins.checkpoint_meta import loss_config, read_checkpoint_meta
from vlr_plugins.errors import MissingFileError
from vlr_plugins.losses import HardNegativeInfoNCELoss
from vlr_plugins.registry import LOSSES


def test_loss_config_is_the_registered_name_and_every_setting_in_json_types():
    loss = HardNegativeInfoNCELoss(temperature=0.05, learnable_temperature=True)
    with torch.no_grad():
        loss.temperature.fill_(0.03)  # as training leaves it
    got = loss_config(loss)
    assert got["type"] == "HardNegativeInfoNCELoss" and LOSSES.get(got["type"]) is HardNegativeInfoNCELoss
    # every setting the object holds, defaults included, as JSON gives them back
    assert got == json.loads(json.dumps({"type": "HardNegativeInfoNCELoss", **loss.get_config_dict()}))
    assert got["temperature"] == pytest.approx(0.03) and got["variant"] == loss.variant
    rebuilt = LOSSES.build(got)
    assert rebuilt.temperature.item() == pytest.approx(0.03) and rebuilt.variant == loss.variant


def test_loss_config_is_none_for_a_module_that_does_not_describe_itself():
    assert loss_config(torch.nn.MSELoss()) is None and loss_config(None) is None


def test_read_checkpoint_meta(tmp_path):
    path = tmp_path / "c.pth"
    torch.save({"meta": {"vlr_loss": {"type": "InfoNCELoss"}}, "state_dict": {"w": torch.ones(2)}}, path)
    assert read_checkpoint_meta(path) == {"vlr_loss": {"type": "InfoNCELoss"}}
    torch.save({"state_dict": {}}, tmp_path / "bare.pth")
    assert read_checkpoint_meta(tmp_path / "bare.pth") == {}
    assert read_checkpoint_meta("blip:Salesforce/blip-itm-base-coco") == {}
    with pytest.raises(MissingFileError, match="no checkpoint at .*absent.pth"):
        read_checkpoint_meta(tmp_path / "absent.pth")
