"""load_text_encoder: a `vlr train` checkpoint or blip:<name>; anything else is refused clearly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from vlr_plugins.errors import DataFormatError, MissingFileError, ModelLoadError  # noqa: E402
from vlr_plugins.specs import load_text_encoder  # noqa: E402


def test_a_missing_checkpoint_names_the_option(tmp_path):
    with pytest.raises(MissingFileError, match=r"^--model: no such file: .*absent.pth"):
        load_text_encoder(tmp_path / "absent.pth", setting="--model")
    with pytest.raises(MissingFileError, match="is a folder"):
        load_text_encoder(tmp_path)


@pytest.mark.parametrize("content, words", [
    ({"state_dict": {}, "meta": {"where": Path("/tmp")}}, "pickled Python objects"),
    (b"plain text, not a checkpoint\n", "not a PyTorch checkpoint"),
    ({"weights": torch.zeros(2)}, "holds no 'state_dict'"),
    ({"state_dict": {"text_encoder.w": torch.zeros(2)}, "meta": {}}, "meta['vlr_text_encoder'] is missing"),
])
def test_a_file_that_is_no_vlr_train_checkpoint(tmp_path, content, words):
    p = tmp_path / "c.pth"
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        torch.save(content, p)
    with pytest.raises(DataFormatError) as e:
        load_text_encoder(p)
    assert str(e.value).startswith(f"{p}: ") and words in str(e.value)
    assert isinstance(e.value, ValueError)  # callers that catch ValueError still do


def test_a_blip_model_that_cannot_be_had_is_named_with_the_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match=r"^--model: cannot load 'someone/no-such-blip'.*offline use"):
        load_text_encoder("blip:someone/no-such-blip", setting="--model")
    with pytest.raises(MissingFileError, match=r"^blip:\./absent: no such folder"):
        load_text_encoder("blip:./absent")
