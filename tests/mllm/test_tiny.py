"""``python -m vlr_plugins.mllm.tiny OUT``: the shipped tiny random Qwen2-VL that the docs' offline
CaRe route starts from: a transformers folder the mllm: commands load, and its refusals."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from vlr_plugins.mllm.tiny import main  # noqa: E402


def test_writes_a_folder_transformers_and_the_embedder_load(tmp_path, capsys):
    import torch
    from transformers import AutoConfig

    from vlr_plugins.mllm import load_eol_embedder

    out = tmp_path / "tiny"
    assert main([str(out), "--seed", "3"]) == 0
    assert f"mllm:{out}" in capsys.readouterr().out
    config = AutoConfig.from_pretrained(out)
    assert config.model_type == "qwen2_vl" and config.text_config.hidden_size == 32
    embedder = load_eol_embedder(str(out), device="cpu")
    with torch.no_grad():
        emb = embedder.encode_text(["a dog runs", "a cat sits"])
    assert emb.shape == (2, 32) and torch.allclose(emb.norm(dim=1), torch.ones(2), atol=1e-5)


@pytest.mark.parametrize("argv, words", [(["--hidden", "20"], "--hidden must be a multiple of 16"),
                                         (["--layers", "0"], "--layers >= 1")])
def test_bad_sizes_are_refused(tmp_path, capsys, argv, words):
    assert main([str(tmp_path / "t"), *argv]) == 2
    assert words in capsys.readouterr().err and not (tmp_path / "t").exists()


def test_a_folder_that_holds_files_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "mine.txt").write_text("keep")
    assert main([str(tmp_path / "t")]) == 2
    assert "already there" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["mine.txt"]
