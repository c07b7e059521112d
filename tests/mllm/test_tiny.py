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


def test_text_only_writes_a_causal_lm_that_chats_through_its_template(tmp_path, capsys):
    """`--text-only`: a Qwen2 causal LM folder (no vision tower), as `transformers serve` loads it:
    AutoModelForCausalLM, and a tokenizer whose chat template ends in the assistant turn."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "lm"
    assert main([str(out), "--text-only", "--hidden", "48", "--layers", "1"]) == 0
    assert f"transformers serve {out}" in capsys.readouterr().out
    config = AutoConfig.from_pretrained(out)
    assert config.model_type == "qwen2" and not hasattr(config, "vision_config")
    assert (config.hidden_size, config.num_hidden_layers) == (48, 1)
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                  return_dict=True, return_tensors="pt")["input_ids"]
    assert tok.decode(ids[0]).endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    model = AutoModelForCausalLM.from_pretrained(out)
    with torch.no_grad():
        new = model.generate(ids, max_new_tokens=3, do_sample=False)[0, ids.shape[1]:]
    assert 1 <= len(new) <= 3
