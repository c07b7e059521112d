"""Pretrained pieces by name: a folder that is not there, a folder without a tokenizer and a
Hub id that cannot be had (offline here) are each one clear error naming the setting."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from vlr_plugins.errors import OFFLINE_DOC, MissingFileError, ModelLoadError  # noqa: E402
from vlr_plugins.text import build_wordpiece_tokenizer  # noqa: E402
from vlr_plugins.text.pretrained import check_local_folder, load_tokenizer, looks_local  # noqa: E402


def test_what_can_only_be_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "world").mkdir()
    for name in ("/data/tok", "./tok", "../tok", "~/tok", "a/b/c", "has space", "world", "world/tokenizr"):
        assert looks_local(name), name
    for name in ("bert-base-uncased", "Salesforce/blip-itm-base-coco", "elsewhere/tokenizer"):
        assert not looks_local(name), name


def test_a_missing_folder_is_named_with_its_setting(tmp_path):
    with pytest.raises(MissingFileError, match=r"^--tokenizer: no such folder: .*absent"):
        check_local_folder(tmp_path / "absent", "--tokenizer")
    f = tmp_path / "file.json"
    f.write_text("{}")
    with pytest.raises(MissingFileError, match=r"^model.pretrained: .*file.json is a file"):
        check_local_folder(f, "model.pretrained")
    check_local_folder("Salesforce/blip-itm-base-coco", "model.pretrained")  # a Hub id: not a local matter


def test_a_saved_tokenizer_loads_as_saved(tmp_path):
    saved = build_wordpiece_tokenizer(["a", "red", "car"])
    saved.save_pretrained(tmp_path / "tok")
    loaded = load_tokenizer(tmp_path / "tok", "--tokenizer")
    assert loaded.get_vocab() == saved.get_vocab()
    assert loaded("a red bus")["input_ids"] == saved("a red bus")["input_ids"]


def test_a_folder_without_a_tokenizer(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(ModelLoadError) as e:
        load_tokenizer(tmp_path, "model.tokenizer")
    assert str(e.value).startswith(f"model.tokenizer: {tmp_path} holds no tokenizer") and OFFLINE_DOC in str(e.value)


def test_a_hub_id_that_cannot_be_had_names_the_setting_and_the_doc(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError) as e:
        load_tokenizer("someone/no-such-tokenizer", "recipes/x.yaml: model.tokenizer")
    message = str(e.value)
    assert message.startswith("recipes/x.yaml: model.tokenizer: cannot load 'someone/no-such-tokenizer'")
    assert "local folder" in message and OFFLINE_DOC in message and "\n" not in message
