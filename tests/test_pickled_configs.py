"""Training configs pickled beside the weights (UMT's and SMILE's EasyDict, VideoMAE-code
trainers' argparse.Namespace) come back as plain dicts, with nothing the file names imported
or run; every other object, and every payload, is still refused by torch's weights-only unpickler."""

from __future__ import annotations

import argparse
import pickle
import sys

import pytest
import torch
from _pickled import AttrDict, Payload, importable_as, payloads, saved_as

from vlr_plugins import pickled_configs
from vlr_plugins.pickled_configs import CONFIG_CLASSES, torch_load_weights_only

# a UMT multi-modality config, as its yaml files nest it
CONFIG = {
    "model": {"model_cls": "UMT", "vision_encoder": {"name": "vit_b16", "num_frames": 4, "tubelet_size": 1,
                                                     "checkpoint_num": [0, 0]},
              "text_encoder": {"name": "bert_base", "d_model": 768}},
    "optimizer": {"opt": "adamW", "lr": 1e-4, "different_lr": {"enable": False, "module_names": []}},
    "train_file": [{"anno": "webvid.json", "media": "videos/", "type": "video"}],
    "inputs": {"image_res": 224, "video_input": {"num_frames": 4, "sample_type": "rand"}},
    "max_txt_l": 32, "seed": 42, "output_dir": "exp/umt", "use_flash_attn": None,
}


def _assert_plain(obj) -> None:
    """Only the builtin containers all the way down: no stand-in, no OrderedDict left."""
    if isinstance(obj, dict):
        assert type(obj) is dict, type(obj)
        for v in obj.values():
            _assert_plain(v)
    elif isinstance(obj, (list, tuple)):
        assert type(obj) in (list, tuple)
        for v in obj:
            _assert_plain(v)


@pytest.mark.parametrize("legacy", [False, True])
def test_umt_config_comes_back_as_nested_plain_dicts(tmp_path, legacy):
    class EasyDict(AttrDict):  # UMT's own copy: multi_modality/utils/easydict.py
        pass

    ckpt = {"model": {"w": torch.arange(3.0)}, "config": EasyDict(CONFIG), "epoch": 3}
    path = saved_as(ckpt, tmp_path / "ckpt_best.pth", {EasyDict: "utils.easydict.EasyDict"},
                    _use_new_zipfile_serialization=not legacy)
    assert "utils.easydict" not in sys.modules and "utils" not in sys.modules
    assert b"utils.easydict\nEasyDict" in path.read_bytes()  # the file names the class (GLOBAL)
    for mmap in ((False,) if legacy else (False, True)):
        back = torch_load_weights_only(path, mmap=mmap)
        assert back["config"] == CONFIG and back["epoch"] == 3 and torch.equal(back["model"]["w"], torch.arange(3.0))
        _assert_plain(back["config"])
        assert "utils.easydict" not in sys.modules and "utils" not in sys.modules  # nothing was imported


def test_the_easydict_package_config_comes_back_as_plain_dicts(tmp_path):
    easydict = pytest.importorskip("easydict")  # SMILE's video-text trainer pickles PyPI's EasyDict
    cfg = easydict.EasyDict(CONFIG)
    assert isinstance(cfg.model.vision_encoder, easydict.EasyDict)
    torch.save({"model": {}, "config": cfg}, tmp_path / "smile.pth")
    back = torch_load_weights_only(tmp_path / "smile.pth")["config"]
    assert back == CONFIG
    _assert_plain(back)


def test_a_namespace_of_args_comes_back_as_a_dict_of_its_attributes(tmp_path):
    args = argparse.Namespace(model="pretrain_videomae_base_patch16_224", num_frames=16, tubelet_size=2,
                              window_size=(8, 14, 14), lr=1.5e-4, mask_ratio=0.9, finetune="", dist_url="env://")
    torch.save({"model": {"w": torch.ones(1)}, "args": args, "epoch": 799}, tmp_path / "checkpoint-799.pth")
    back = torch_load_weights_only(tmp_path / "checkpoint-799.pth")
    assert back["args"] == vars(args) and type(back["args"]) is dict and back["epoch"] == 799


def test_a_config_named_twice_stays_one_dict_and_a_whole_file_may_be_a_config(tmp_path):
    class EasyDict(AttrDict):
        pass

    cfg = EasyDict({"a": {"b": 1}})
    saved_as({"config": cfg, "meta": {"config": cfg}, "keep": (cfg, 2)}, tmp_path / "c.pth",
             {EasyDict: "easydict.EasyDict"})
    back = torch_load_weights_only(tmp_path / "c.pth")
    assert back["config"] is back["meta"]["config"] is back["keep"][0] and back["config"] == {"a": {"b": 1}}
    saved_as(cfg, tmp_path / "bare.pth", {EasyDict: "easydict.EasyDict"})
    assert torch_load_weights_only(tmp_path / "bare.pth") == {"a": {"b": 1}}


def test_a_checkpoint_without_configs_comes_back_as_torch_gives_it(tmp_path):
    state = torch.nn.Linear(2, 3).state_dict()  # an OrderedDict with its _metadata
    torch.save({"state_dict": state, "meta": {"epoch": 1}}, tmp_path / "c.pth")
    back = torch_load_weights_only(tmp_path / "c.pth")
    ref = torch.load(tmp_path / "c.pth", weights_only=True)
    assert type(back["state_dict"]) is type(ref["state_dict"]) and back["state_dict"]._metadata == state._metadata
    assert all(torch.equal(back["state_dict"][k], v) for k, v in ref["state_dict"].items())


@pytest.mark.parametrize("name", ["mmengine.config.ConfigDict", "omegaconf.dictconfig.DictConfig",
                                  "utils.config.Config", "easydict.EasyDict2"])
def test_any_other_config_class_is_refused_by_name(tmp_path, name):
    class Config(AttrDict):
        pass

    saved_as({"model": {}, "config": Config({"lr": 1e-4})}, tmp_path / "c.pth", {Config: name})
    with pytest.raises(pickle.UnpicklingError, match=f"GLOBAL {name.replace('.', '[.]')} was not an allowed"):
        torch_load_weights_only(tmp_path / "c.pth")


def test_a_subclass_of_a_listed_config_is_refused(tmp_path):
    class Args(argparse.Namespace):
        pass

    saved_as({"args": Args(lr=1)}, tmp_path / "c.pth", {Args: "main.Args"})
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL main.Args"):
        torch_load_weights_only(tmp_path / "c.pth")


def _places(marker):
    """Each payload at the top, as a config item, and as a Namespace attribute."""
    for named, payload in payloads(marker).items():
        yield named, {"model": {}, "x": payload}
        yield named, {"config": AttrDict({"optimizer": {"lr": payload}})}
        yield named, {"args": argparse.Namespace(lr=payload)}


def test_no_payload_ever_runs(tmp_path):
    marker = tmp_path / "ran"
    for i, (named, ckpt) in enumerate(_places(marker)):
        path = saved_as(ckpt, tmp_path / f"{i}.pth", {AttrDict: "easydict.EasyDict"})
        with pytest.raises(pickle.UnpicklingError, match=f"GLOBAL {named} ") as info:
            torch_load_weights_only(path)
        assert not marker.exists(), f"{named} in {list(ckpt)}: the payload ran"
        assert "easydict" not in str(info.value)  # the config itself was fine; the payload is named


def test_the_payloads_do_run_when_unpickled_for_real(tmp_path):
    # the control: each payload would have run (so the test above can fail)
    for how, payload in payloads(tmp_path / "ran").items():
        pickle.loads(pickle.dumps(payload))
        assert (tmp_path / "ran").exists(), how
        (tmp_path / "ran").unlink()


def test_a_config_class_called_with_arguments_is_refused(tmp_path):
    # GLOBAL easydict.EasyDict, ({"lr": ...},), REDUCE: the stand-in is never fed what a file gives it
    with importable_as(AttrDict, "easydict.EasyDict"):
        torch.save({"config": Payload(AttrDict, {"lr": 1})}, tmp_path / "c.pth")
        torch.save({"config": Payload(AttrDict, {"lr": Payload(print, "ran")})}, tmp_path / "d.pth")
    for name in ("c.pth", "d.pth"):
        with pytest.raises(pickle.UnpicklingError, match="GLOBAL easydict.EasyDict built with arguments|GLOBAL print "):
            torch_load_weights_only(tmp_path / name)


def test_the_allow_list_lasts_only_for_the_load(tmp_path):
    before = set(map(str, torch.serialization.get_safe_globals()))
    saved_as({"config": AttrDict({"a": 1})}, tmp_path / "c.pth", {AttrDict: "easydict.EasyDict"})
    assert torch_load_weights_only(tmp_path / "c.pth") == {"config": {"a": 1}}
    assert set(map(str, torch.serialization.get_safe_globals())) == before
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL easydict.EasyDict"):
        torch.load(tmp_path / "c.pth", weights_only=True)  # torch alone refuses it, as before


def test_a_load_that_is_not_ours_is_refused_while_the_names_are_allowed(tmp_path):
    # what another thread's torch.load sees during one of ours: the stand-ins refuse it
    saved_as({"config": AttrDict({"a": 1})}, tmp_path / "c.pth", {AttrDict: "easydict.EasyDict"})
    with torch.serialization.safe_globals(pickled_configs._STAND_INS):
        with pytest.raises(pickle.UnpicklingError, match="GLOBAL easydict.EasyDict"):
            torch.load(tmp_path / "c.pth", weights_only=True)


def test_config_keys_named_like_dict_methods_are_read_as_keys(tmp_path):
    # the attributes the file sets (an EasyDict's items again) cannot stand in for dict methods
    cfg = {"keys": 1, "values": [2], "update": {"get": 3}, "copy": "x", "_metadata": None}
    saved_as({"config": AttrDict(cfg)}, tmp_path / "c.pth", {AttrDict: "utils.easydict.EasyDict"})
    assert torch_load_weights_only(tmp_path / "c.pth")["config"] == cfg


@pytest.mark.parametrize("name", CONFIG_CLASSES)
def test_each_listed_name_is_read(tmp_path, name):
    class Config(AttrDict):
        pass

    if name == "argparse.Namespace":  # the real class
        saved_as({"c": argparse.Namespace(a={"b": 1})}, tmp_path / "c.pth", {})
    else:
        saved_as({"c": Config({"a": {"b": 1}})}, tmp_path / "c.pth", {Config: name})
    assert torch_load_weights_only(tmp_path / "c.pth") == {"c": {"a": {"b": 1}}}


def test_loads_in_two_threads_at_once_each_read_their_configs(tmp_path):
    # torch's allow-list is one for the process: one thread's load ending must not refuse the other's
    import threading

    saved_as({"config": AttrDict({"a": {"b": 1}})}, tmp_path / "c.pth", {AttrDict: "easydict.EasyDict"})
    start, results = threading.Barrier(4), []

    def load() -> None:
        start.wait()
        for _ in range(25):
            try:
                results.append(torch_load_weights_only(tmp_path / "c.pth"))
            except Exception as e:  # noqa: BLE001 -- reported below
                results.append(e)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [{"config": {"a": {"b": 1}}}] * 100
