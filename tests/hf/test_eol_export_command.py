"""`vlr export FOLDER OUT` for an MLLM folder: an EOL-embedder export with a model card that
carries the `vlr eval` results and CaRe's unified score, embedding as the folder did."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torchvision")

import torch  # noqa: E402

from _tiny_mllm import save_tiny_qwen2vl  # noqa: E402

from vlr_plugins.cli import main  # noqa: E402
from vlr_plugins.mllm import EOLEmbedder, load_eol_embedder  # noqa: E402

TEXTS = ["a dog runs on the grass", "Two people sit near a window, slowly."]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny_qwen2vl(tmp_path_factory.mktemp("trained") / "care-tiny", seed=11)


def test_an_mllm_folder_exports_with_its_card(folder, tmp_path, capsys):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"model": str(folder), "recall": {"carebench/general": {
        "t2i_r1": 40.0, "t2i_r5": 70.0, "i2t_r1": 50.0, "i2t_r5": 80.0}}, "budgets": {"carebench/general": None},
        "unified": {"avg_r1": 45.0, "avg_f1": 25.0, "unified": 35.0, "benchmark": "carebench/general"}}))
    out = tmp_path / "CaRe-tiny"
    assert main(["export", str(folder), str(out), "--eval", str(results), "--prompt", "e5v",
                 "--recipe", "care/stage2_paper", "--repo-id", "me/CaRe-tiny"]) == 0
    assert "MLLM embedder" in capsys.readouterr().out
    config = json.loads((out / "config.json").read_text())
    assert config["auto_map"] == {"AutoModel": "modeling_vlr_eol.VlrEOLEmbeddingModel"}
    assert config["vlr_eol"]["recipe"] == "care/stage2_paper" and config["vlr_eol"]["prompt"]["name"] == "e5v"
    card = (out / "README.md").read_text()
    assert "me/CaRe-tiny" in card and "| carebench/general | 40.0 | 70.0 |" in card
    assert "Avg R@1 45.0, Avg F1 25.0, unified 35.0" in card
    assert json.loads((out / "eval_results.json").read_text())["recall"]["carebench/general"]["t2i_r1"] == 40.0
    expected = EOLEmbedder(folder, prompt="e5v").encode_text(TEXTS)
    torch.testing.assert_close(load_eol_embedder(out).encode_text(TEXTS), expected, atol=1e-6, rtol=0)
    # a second export to the same place needs --overwrite
    assert main(["export", str(folder), str(out)]) == 2
    assert main(["export", str(folder), str(out), "--overwrite"]) == 0


@pytest.mark.parametrize("extra, where", [
    (["--no-remote-code"], "--no-remote-code"),
    (["--tokenizer", "bert-base-uncased"], "--tokenizer"),
    (["--eval", "missing.json"], "missing.json"),
    (["--config", "missing.py"], "--config"),
])
def test_an_mllm_export_refuses_options_it_cannot_honour(folder, tmp_path, capsys, extra, where):
    out = tmp_path / "out"
    assert main(["export", str(folder), str(out), *extra]) == 2
    assert where in capsys.readouterr().err and not out.exists()


def test_mllm_options_are_refused_for_a_text_encoder_checkpoint(tmp_path, capsys):
    ckpt = tmp_path / "epoch_1.pth"
    ckpt.write_bytes(b"")
    assert main(["export", str(ckpt), str(tmp_path / "out"), "--prompt", "care"]) == 2
    assert "--prompt" in capsys.readouterr().err
