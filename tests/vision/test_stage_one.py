"""Stage I weights into a Stage II tower: the pooled head and projection start fresh, any other gap
or stray key is refused naming the file (MVC / UMT two-stage pretraining)."""

from __future__ import annotations

import logging

import pytest
import torch

from _tiny_towers import TINY_VIT

from vlr_plugins.errors import ConfigError
from vlr_plugins.vision import STAGE_TWO_HEADS, SpaceTimeViT, load_stage_one

pytest.importorskip("timm")


def _stage_one(tmp_path, drop=(), extra=None):
    """A native checkpoint of a video-only tower (no pooled head, no projection), as a file."""
    torch.manual_seed(0)
    state = SpaceTimeViT(**TINY_VIT).state_dict()
    state = {k: v for k, v in state.items() if not k.startswith(tuple(drop))}
    state.update(extra or {})
    path = tmp_path / "stage1.pth"
    torch.save(state, path)
    return state, str(path)


def test_the_stage_two_heads_start_fresh_and_the_rest_is_loaded(tmp_path, caplog):
    state, path = _stage_one(tmp_path)
    tower = SpaceTimeViT(**TINY_VIT, pool_norm=True, embed_dim=16)
    with caplog.at_level(logging.INFO, logger="vlr_plugins.vision.stage_one"):
        missing = load_stage_one(tower, path, layout="native")
    assert missing and all(k.startswith(STAGE_TWO_HEADS) for k in missing)
    assert {k.split(".")[0] for k in missing} == {"pool_norm", "proj"}
    own = tower.state_dict()
    assert all(torch.equal(own[k], v) for k, v in state.items())
    assert "start fresh" in caplog.text and path in caplog.text
    assert load_stage_one(SpaceTimeViT(**TINY_VIT), path) == [], "a tower without the heads lacks nothing"


def test_a_gap_or_a_stray_key_is_refused_naming_the_file(tmp_path):
    _, path = _stage_one(tmp_path, drop=["blocks.1."])
    with pytest.raises(ConfigError, match=rf"^video checkpoint {path} \(native layout\) does not fit video.encoder: "
                                          r"the tower has no weights for \['blocks.1"):
        load_stage_one(SpaceTimeViT(**TINY_VIT), path)
    _, path = _stage_one(tmp_path, extra={"head.weight": torch.zeros(2, 32)})
    with pytest.raises(ConfigError, match=r"the tower has no place for \['head.weight'\] \(check width, depth"):
        load_stage_one(SpaceTimeViT(**TINY_VIT), path, layout="native")


def test_a_file_that_is_not_there_or_does_not_fit_is_refused_naming_it(tmp_path):
    missing = str(tmp_path / "nowhere.pth")
    with pytest.raises(ConfigError) as e:
        load_stage_one(SpaceTimeViT(**TINY_VIT), missing)
    assert str(e.value) == f"video checkpoint {missing}: no checkpoint file at {missing}"
    _, path = _stage_one(tmp_path)
    with pytest.raises(ConfigError, match="does not fit this SpaceTimeViT's shapes") as e:
        load_stage_one(SpaceTimeViT(**{**TINY_VIT, "width": 64, "num_heads": 2}), path, layout="native")
    assert str(e.value).startswith(f"video checkpoint {path} ") and str(e.value).count(path) == 1
