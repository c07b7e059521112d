"""``vlr export open_clip:MODEL:CHECKPOINT OUT``: a folder plain open_clip loads, embedding as the checkpoint does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytest.importorskip("open_clip_train")
import open_clip  # noqa: E402
from safetensors import safe_open  # noqa: E402

from vlr_plugins.cli import main  # noqa: E402

TEXTS = ["a red square", "a green square on a white background, drawn with a thick brush", ""]

# run with a clean environment: plain open_clip, vlr_plugins never imported
_LOAD = textwrap.dedent("""
    import sys, torch, open_clip
    folder, images, out = sys.argv[1:]
    model, preprocess = open_clip.create_model_from_pretrained("local-dir:" + folder)
    tokenizer = open_clip.get_tokenizer("local-dir:" + folder)
    texts = %r
    tokens = tokenizer(texts)
    with torch.no_grad():
        result = {"image": model.encode_image(torch.load(images, weights_only=True)),
                  "text": model.encode_text(tokens), "tokens": tokens,
                  "context_length": torch.tensor(model.context_length)}
    assert not [m for m in sys.modules if m.startswith("vlr_plugins")], "plain open_clip imported vlr_plugins"
    torch.save(result, out)
""" % (TEXTS,))


def _save_checkpoint(model: torch.nn.Module, path, *, ddp: bool) -> str:
    """A checkpoint as open_clip_train saves one: {"epoch", "name", "state_dict", "optimizer"},
    the keys "module."-prefixed when trained under DDP."""
    state = {("module." + k if ddp else k): v for k, v in model.state_dict().items()}
    torch.save({"epoch": 1, "name": "run", "state_dict": state, "optimizer": {}}, path)
    return str(path)


def _load_plainly(folder, images, tmp_path) -> dict[str, torch.Tensor]:
    torch.save(images, tmp_path / "images.pt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HUB_OFFLINE"] = "1"
    script = tmp_path / "load.py"
    script.write_text(_LOAD)
    subprocess.run([sys.executable, str(script), str(folder), str(tmp_path / "images.pt"),
                    str(tmp_path / "out.pt")], check=True, env=env, cwd=tmp_path, timeout=300)
    return torch.load(tmp_path / "out.pt", weights_only=True)


def _export(spec: str, out, *more: str) -> None:
    assert main(["export", spec, str(out), *more]) == 0


@pytest.mark.parametrize("ddp", [False, True], ids=["plain", "ddp-module-prefix"])
def test_a_checkpoint_loads_in_plain_open_clip_and_embeds_as_it_does(tiny_model, tmp_path, ddp):
    torch.manual_seed(1)
    trained = open_clip.create_model(tiny_model)
    ckpt = _save_checkpoint(trained, tmp_path / "epoch_1.pt", ddp=ddp)
    out = tmp_path / "export"
    _export(f"open_clip:{tiny_model}:{ckpt}", out)

    assert sorted(p.name for p in out.iterdir()) == [  # the card, open_clip's files, then sentence-transformers'
        "README.md", "config_sentence_transformers.json", "modules.json", "open_clip_config.json", "open_clip_model.safetensors",
        "open_clip_sentence_transformers.py", "sentence_bert_config.json"]
    config = json.loads((out / "open_clip_config.json").read_text())
    assert config["model_cfg"] == open_clip.get_model_config(tiny_model)
    assert set(config["preprocess_cfg"]) >= {"mean", "std"}

    reference = open_clip.create_model(tiny_model, pretrained=ckpt).eval()  # open_clip's own load of it
    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    got = _load_plainly(out, images, tmp_path)
    tokens = open_clip.get_tokenizer(tiny_model)(TEXTS)
    assert torch.equal(got["tokens"], tokens)
    with torch.no_grad():
        torch.testing.assert_close(got["image"], reference.encode_image(images), rtol=0, atol=1e-6)
        torch.testing.assert_close(got["text"], reference.encode_text(tokens), rtol=0, atol=1e-6)


def test_a_long_context_checkpoint_keeps_its_248_positions_without_vlr_plugins(tiny_model, tmp_path):
    torch.manual_seed(2)
    trained = open_clip.create_model(tiny_model, force_context_length=248)  # a long fine-tune's weights
    ckpt = _save_checkpoint(trained, tmp_path / "epoch_6.pt", ddp=True)
    out = tmp_path / "export"
    _export(f"open_clip:{tiny_model}-ctx248:{ckpt}", out)

    config = json.loads((out / "open_clip_config.json").read_text())
    assert config["model_cfg"]["text_cfg"]["context_length"] == 248
    with safe_open(str(out / "open_clip_model.safetensors"), framework="pt") as f:
        assert f.get_slice("positional_embedding").get_shape()[0] == 248

    reference = open_clip.create_model(tiny_model, pretrained=ckpt, force_context_length=248).eval()
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    got = _load_plainly(out, images, tmp_path)
    assert int(got["context_length"]) == 248
    tokens = open_clip.get_tokenizer(tiny_model, context_length=248)(TEXTS)
    assert tokens.shape[1] == 248 and torch.equal(got["tokens"], tokens)
    with torch.no_grad():
        torch.testing.assert_close(got["image"], reference.encode_image(images), rtol=0, atol=1e-6)
        torch.testing.assert_close(got["text"], reference.encode_text(tokens), rtol=0, atol=1e-6)


def test_a_77_token_checkpoint_exports_stretched_as_vlr_eval_scores_it(tiny_model, tmp_path):
    from vlr_plugins.specs import load_text_model

    torch.manual_seed(4)
    ckpt = _save_checkpoint(open_clip.create_model(tiny_model), tmp_path / "epoch_1.pt", ddp=False)
    spec = f"open_clip:{tiny_model}-ctx96:{ckpt}"
    out = tmp_path / "export"
    _export(spec, out)
    evaluated = load_text_model(spec)  # the model `vlr eval --model SPEC` scores
    got = _load_plainly(out, torch.zeros(1, 3, 32, 32), tmp_path)
    assert int(got["context_length"]) == 96
    torch.testing.assert_close(got["text"], evaluated.encode_text(TEXTS), rtol=0, atol=1e-6)


def test_overwrite_replaces_an_earlier_export(tiny_model, tmp_path):
    out = tmp_path / "export"
    first = _save_checkpoint(open_clip.create_model(tiny_model), tmp_path / "a.pt", ddp=False)
    torch.manual_seed(5)
    second = open_clip.create_model(tiny_model)
    _export(f"open_clip:{tiny_model}:{first}", out)
    _export(f"open_clip:{tiny_model}:{_save_checkpoint(second, tmp_path / 'b.pt', ddp=False)}", out, "--overwrite")
    with safe_open(str(out / "open_clip_model.safetensors"), framework="pt") as f:
        assert torch.equal(f.get_tensor("text_projection"), second.state_dict()["text_projection"])
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [], "a temporary folder was left"


def test_no_remote_code_leaves_out_the_sentence_transformers_module(tiny_model, tmp_path):
    ckpt = _save_checkpoint(open_clip.create_model(tiny_model), tmp_path / "epoch_1.pt", ddp=False)
    out = tmp_path / "export"
    _export(f"open_clip:{tiny_model}:{ckpt}", out, "--no-remote-code")
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "open_clip_config.json", "open_clip_model.safetensors"]
    reference = open_clip.create_model(tiny_model, pretrained=ckpt).eval()
    images = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(9))
    got = _load_plainly(out, images, tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(got["image"], reference.encode_image(images), rtol=0, atol=1e-6)


def test_a_local_dir_model_exports_with_its_trained_checkpoint(tmp_path):
    """``open_clip:local-dir:FOLDER:CHECKPOINT`` (the folder's config, an open_clip_train
    checkpoint's weights): the export holds the checkpoint's weights under the folder's config."""
    from vlr_plugins.integrations.open_clip.tiny import write_local_dir_model

    folder = write_local_dir_model(tmp_path / "tiny-clip")
    torch.manual_seed(4)
    trained = open_clip.create_model(f"local-dir:{folder}", load_weights=False)
    ckpt = _save_checkpoint(trained, tmp_path / "epoch_1.pt", ddp=True)
    out = tmp_path / "export"
    _export(f"open_clip:local-dir:{folder}:{ckpt}", out, "--no-remote-code")
    config = json.loads((out / "open_clip_config.json").read_text())
    assert config["model_cfg"] == json.loads((folder / "open_clip_config.json").read_text())["model_cfg"]
    with safe_open(str(out / "open_clip_model.safetensors"), framework="pt") as f:
        for key, value in trained.state_dict().items():
            assert torch.equal(f.get_tensor(key), value), key
