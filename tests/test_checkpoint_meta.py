"""What a checkpoint records for `vlr export`: the loss as an object configures itself, and meta read back;
files that are no weights-only checkpoint refused by name."""

from __future__ import annotations

import json
import pickle
import re

import pytest
import torch
from _pickled import AttrDict, payloads, saved_as

from vlr_plugins.checkpoint_meta import (
    check_text_encoder_checkpoint,
    load_weights_only,
    loss_config,
    read_checkpoint_meta,
)
from vlr_plugins.errors import DataFormatError, MissingFileError, UserError
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
    with pytest.raises(MissingFileError, match="no checkpoint at .*absent.pth"):
        read_checkpoint_meta(tmp_path / "absent.pth")


def test_load_weights_only_reads_what_torch_save_wrote(tmp_path):
    ckpt = {"meta": {"epoch": 3}, "state_dict": {"text_encoder.w": torch.arange(4.0)}}
    for legacy in (False, True):  # the zip format (mapped with mmap=True) and the format before it
        path = tmp_path / f"c{legacy}.pth"
        torch.save(ckpt, path, _use_new_zipfile_serialization=not legacy)
        for mmap in (False, True):
            back = load_weights_only(path, mmap=mmap)
            assert back["meta"] == {"epoch": 3} and torch.equal(back["state_dict"]["text_encoder.w"], torch.arange(4.0))


class Temperature:  # a Python object: only a full unpickle rebuilds it
    value = 0.05


@pytest.mark.parametrize("write, problem", [
    (lambda p: p.write_text("not a checkpoint\n"), "not a PyTorch checkpoint"),
    (lambda p: p.write_bytes(b""), "not a PyTorch checkpoint (torch.load: EOFError)"),
    (lambda p: p.write_bytes(pickle.dumps({"w": [1.0]})), "not a PyTorch checkpoint"),
    (lambda p: torch.save({"meta": {"t": Temperature()}}, p), "not a weights-only checkpoint"),
    (lambda p: torch.save(torch.nn.Linear(2, 2), p), "torch.nn.modules.linear.Linear"),
    (lambda p: p.mkdir(), "is a folder"),
])
def test_load_weights_only_refuses_by_name_what_it_will_not_read(tmp_path, write, problem):
    path = tmp_path / "model.pth"
    write(path)
    with pytest.raises(DataFormatError, match=re.escape(problem)) as info:
        load_weights_only(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and isinstance(info.value, UserError)
    assert "weights_only=False" not in message  # torch's advice to run the file's code is not passed on
    with pytest.raises(MissingFileError, match="no checkpoint at .*absent.pth"):
        load_weights_only(tmp_path / "absent.pth")


def test_load_weights_only_reads_a_pickled_training_config_as_dicts(tmp_path):
    # UMT / SMILE save their run's config beside the weights: read as dicts, nothing run
    config = AttrDict({"model": {"vision_encoder": {"name": "vit_b16"}}, "lr": 1e-4})
    path = saved_as({"model": {"w": torch.ones(2)}, "config": config, "epoch": 3}, tmp_path / "umt.pth",
                    {AttrDict: "utils.easydict.EasyDict"})
    back = load_weights_only(path, mmap=True)
    assert back["config"] == {"model": {"vision_encoder": {"name": "vit_b16"}}, "lr": 1e-4}
    assert type(back["config"]) is dict and type(back["config"]["model"]) is dict and back["epoch"] == 3


@pytest.mark.parametrize("named", ["mmengine.config.ConfigDict", "utils.config.Config"])
def test_load_weights_only_refuses_a_config_class_it_does_not_read(tmp_path, named):
    path = saved_as({"config": AttrDict({"lr": 1e-4})}, tmp_path / "c.pth", {AttrDict: named})
    with pytest.raises(DataFormatError, match=re.escape(f"not a weights-only checkpoint: it holds pickled Python "
                                                        f"objects (e.g. {named})")) as info:
        load_weights_only(path)
    assert "weights_only=False" not in str(info.value)


def test_load_weights_only_never_runs_a_payload(tmp_path):
    marker = tmp_path / "ran"
    for i, (named, payload) in enumerate(payloads(marker).items()):
        for ckpt in ({"state_dict": {}, "meta": {"x": payload}}, {"config": AttrDict({"lr": payload})}):
            path = saved_as(ckpt, tmp_path / f"{i}.pth", {AttrDict: "easydict.EasyDict"})
            with pytest.raises(DataFormatError, match=re.escape(f"not a weights-only checkpoint: it holds "
                                                                f"pickled Python objects (e.g. {named})")):
                load_weights_only(path)
            assert not marker.exists(), f"the {named} payload ran"


def test_check_text_encoder_checkpoint(tmp_path):
    arch = {"type": "BlipTextEncoder", "embed_dim": 8}
    good = tmp_path / "good.pth"
    torch.save({"meta": {"vlr_text_encoder": arch}, "state_dict": {"text_encoder.text_proj.weight": torch.ones(2)}}, good)
    assert check_text_encoder_checkpoint(good) == {"vlr_text_encoder": arch}
    cases = {
        "tensor.pth": (torch.zeros(3), "expected a checkpoint mapping"),
        "no-meta.pth": ({"state_dict": {"text_encoder.w": torch.ones(1)}}, "field 'meta.vlr_text_encoder'"),
        "meta-list.pth": ({"meta": [1], "state_dict": {}}, "field 'meta'"),
        "no-weights.pth": ({"meta": {"vlr_text_encoder": arch}, "state_dict": {"head.w": torch.ones(1)}},
                           "field 'state_dict': holds no 'text_encoder.*' weights"),
    }
    for name, (obj, problem) in cases.items():
        torch.save(obj, tmp_path / name)
        with pytest.raises(DataFormatError, match=re.escape(problem)):
            check_text_encoder_checkpoint(tmp_path / name)
