"""export_eol_embedder: an MLLM embedder -> a folder that AutoModel (trust_remote_code) and
sentence-transformers turn back into the same embeddings, in a fresh interpreter without
vlr-plugins; full weights, and a LoRA adapter over a base folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torchvision")  # Qwen2-VL's video processor

import torch  # noqa: E402

from _tiny_mllm import clip, save_tiny_qwen2vl  # noqa: E402

from vlr_plugins.errors import ConfigError, OutputExistsError  # noqa: E402
from vlr_plugins.hf.export_eol import ADAPTER_FOLDER, export_eol_embedder  # noqa: E402
from vlr_plugins.mllm import EOLEmbedder  # noqa: E402

TEXTS = ["a dog runs on the grass", "the red table", "Two people sit near a window, slowly."]

# A fresh interpreter where any import of vlr_plugins fails, as on a machine without it:
# it loads the folder with AutoModel and prints the embeddings of the texts and clips given.
CHILD = textwrap.dedent("""
    import json, sys
    sys.modules["vlr_plugins"] = None
    import torch
    from transformers import AutoModel, AutoModelForImageTextToText

    folder = sys.argv[1]
    with open(sys.argv[2], encoding="utf-8") as f:
        texts, clips = json.load(f)
    model = AutoModel.from_pretrained(folder, trust_remote_code=True)
    report = {"cls": type(model).__name__}
    with torch.no_grad():
        report["text"] = model.encode_text(texts).double().tolist()
        if clips:
            frames = [torch.tensor(c, dtype=torch.uint8) for c in clips]
            report["video"] = model.encode_video(frames).double().tolist()
    try:
        AutoModelForImageTextToText.from_pretrained(folder)
        report["plain"] = "loaded"
    except Exception as e:
        report["plain"] = type(e).__name__
    report["vlr_modules"] = sorted(m for m, v in sys.modules.items() if m.startswith("vlr_plugins") and v is not None)
    print("\\nREPORT " + json.dumps(report))
""")


def load_in_fresh_interpreter(folder, texts, clips=()):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_MODULES_CACHE": str(folder.parent / "hf_modules")}
    env.pop("PYTHONPATH", None)  # vlr-plugins' src must not be reachable
    inputs = folder.parent / f"{folder.name}-inputs.json"
    inputs.write_text(json.dumps([texts, [c.tolist() for c in clips]]), encoding="utf-8")
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(inputs)],
                         capture_output=True, text=True, env=env, cwd=str(folder.parent), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("REPORT ")][-1]
    return json.loads(line[len("REPORT "):])


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory):
    return save_tiny_qwen2vl(tmp_path_factory.mktemp("base") / "tiny-qwen2vl", seed=3)


@pytest.fixture(scope="module")
def embedder(base_folder):
    return EOLEmbedder(base_folder, prompt="care")


def test_full_weights_load_back_with_automodel_alone_and_embed_the_same(embedder, tmp_path):
    out = export_eol_embedder(embedder, tmp_path / "care-tiny", recipe="care/stage2_paper")
    config = json.loads((out / "config.json").read_text())
    assert config["auto_map"] == {"AutoModel": "modeling_vlr_eol.VlrEOLEmbeddingModel"}
    assert config["vlr_eol"]["prompt"]["name"] == "care" and config["vlr_eol"]["recipe"] == "care/stage2_paper"
    assert config["architectures"] == ["Qwen2VLForConditionalGeneration"]  # the MLLM's own folder still
    assert (out / "model.safetensors").is_file() and not list(out.rglob("*.bin"))
    clips = [clip(4, seed=1), clip(4, seed=2)]
    report = load_in_fresh_interpreter(out, TEXTS, clips)
    assert report["cls"] == "VlrEOLEmbeddingModel" and report["plain"] == "loaded"
    assert report["vlr_modules"] == []
    torch.testing.assert_close(torch.tensor(report["text"]).float(), embedder.encode_text(TEXTS), atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.tensor(report["video"]).float(), embedder.encode_video(clips), atol=1e-6,
                               rtol=0)


def test_a_lora_adapter_names_its_base_and_loads_over_it(base_folder, tmp_path):
    pytest.importorskip("peft")
    pytest.importorskip("mmengine")
    from vlr_plugins.integrations.mmengine.mllm_model import EOLContrastiveModel

    model = EOLContrastiveModel(embedder=EOLEmbedder(base_folder), finetune="lora",
                                lora=dict(r=4, lora_alpha=8, lora_dropout=0.0))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # trained adapters: lora_B away from its zero init
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    model.eval()
    expected = model.embedder.encode_text(TEXTS)
    assert not torch.allclose(expected, EOLEmbedder(base_folder).encode_text(TEXTS), atol=1e-3)
    out = export_eol_embedder(model, tmp_path / "care-lora", base_model=str(base_folder))
    adapter = json.loads((out / ADAPTER_FOLDER / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(base_folder)
    assert (out / ADAPTER_FOLDER / "adapter_model.safetensors").is_file() and not (out / "model.safetensors").exists()
    settings = json.loads((out / "config.json").read_text())["vlr_eol"]
    assert settings["adapter"] == ADAPTER_FOLDER and settings["base_model"] == str(base_folder)
    report = load_in_fresh_interpreter(out, TEXTS)
    assert report["cls"] == "VlrEOLEmbeddingModel"
    torch.testing.assert_close(torch.tensor(report["text"]).float(), expected, atol=1e-5, rtol=0)
    # the same adapter folder, as peft loads it
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    merged = PeftModel.from_pretrained(AutoModelForImageTextToText.from_pretrained(base_folder), out,
                                       subfolder=ADAPTER_FOLDER).merge_and_unload()
    again = EOLEmbedder(model=merged, processor=model.embedder.processor).encode_text(TEXTS)
    torch.testing.assert_close(again, expected, atol=1e-5, rtol=0)
    # the export as a subfolder of a repository (a Hub repo of several exports): the adapter is
    # found inside the caller's subfolder, which peft is given once
    import shutil

    from vlr_plugins.hf.modeling_vlr_eol import VlrEOLEmbeddingModel

    shutil.copytree(out, tmp_path / "repo" / "care-lora")
    nested = VlrEOLEmbeddingModel.from_pretrained(tmp_path / "repo", subfolder="care-lora")
    torch.testing.assert_close(nested.encode_text(TEXTS).float(), expected, atol=1e-5, rtol=0)


def test_sentence_transformers_encodes_as_the_embedder(embedder, tmp_path):
    pytest.importorskip("sentence_transformers", minversion="6.0")
    from PIL import Image
    from sentence_transformers import SentenceTransformer

    out = export_eol_embedder(embedder, tmp_path / "care-st")
    st = SentenceTransformer(str(out), trust_remote_code=True, device="cpu")
    torch.testing.assert_close(st.encode(TEXTS, convert_to_tensor=True), embedder.encode_text(TEXTS), atol=1e-6,
                               rtol=0)
    image = Image.fromarray(clip(1, seed=5)[0].permute(1, 2, 0).numpy())
    torch.testing.assert_close(st.encode([image], convert_to_tensor=True), embedder.encode_image([image]),
                               atol=1e-6, rtol=0)
    # clips go as given: CaRe's doubled frames are the caller's to repeat
    frames = clip(4, seed=6)
    doubled = frames.repeat_interleave(embedder.video_input.frame_repeat, dim=0)
    torch.testing.assert_close(st.encode([{"video": doubled}], convert_to_tensor=True),
                               embedder.encode_video([frames]), atol=1e-6, rtol=0)


def test_exports_refuse_what_they_cannot_write(embedder, base_folder, tmp_path):
    out = export_eol_embedder(embedder, tmp_path / "a", sentence_transformers=False, remote_code=False)
    assert not (out / "modules.json").exists() and not (out / "modeling_vlr_eol.py").exists()
    assert "auto_map" not in json.loads((out / "config.json").read_text())
    with pytest.raises(OutputExistsError, match="pass overwrite=True"):
        export_eol_embedder(embedder, out)
    export_eol_embedder(embedder, out, overwrite=True)  # an earlier export is replaced
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="something other than an export"):
        export_eol_embedder(embedder, tmp_path / "notes", overwrite=True)
    with pytest.raises(ConfigError, match="LoRA-trained"):
        export_eol_embedder(embedder, tmp_path / "b", adapter=True)
    with pytest.raises(TypeError, match="EOLEmbedder"):
        export_eol_embedder(torch.nn.Linear(2, 2), tmp_path / "c")
    assert not (tmp_path / "b").exists() and not (tmp_path / "c").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
