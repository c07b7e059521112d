"""``vlr export open_clip:...``: the folder is a sentence-transformers model too, whose ``encode`` of
texts and of images equals the checkpoint's own normalised encode_text / encode_image."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

pytest.importorskip("open_clip_train")
pytest.importorskip("sentence_transformers", minversion="6.0")
import numpy as np  # noqa: E402
import open_clip  # noqa: E402
from PIL import Image  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

from vlr_plugins.cli import main  # noqa: E402

TEXTS = ["a red square", "a green square on a white background, drawn with a thick brush " * 12, ""]

# a fresh interpreter where vlr_plugins cannot be imported: the folder's own module is what runs
_CHILD = textwrap.dedent("""
    import json, sys
    sys.modules["vlr_plugins"] = None
    import torch
    from sentence_transformers import SentenceTransformer
    folder, cache, images, texts, out = sys.argv[1:]
    st = SentenceTransformer(folder, trust_remote_code=True, device="cpu", cache_folder=cache or None)
    result = {"text": st.encode(json.loads(texts), convert_to_tensor=True),
              "image": st.encode(json.loads(images), convert_to_tensor=True),
              "module": type(st[0]).__module__}
    assert not [m for m, v in sys.modules.items() if m.startswith("vlr_plugins") and v is not None]
    torch.save(result, out)
""")


def _images(tmp_path, seed: int) -> list[Image.Image]:
    """PIL images of odd sizes (open_clip's preprocess resizes and crops them)."""
    g = np.random.default_rng(seed)
    return [Image.fromarray(g.integers(0, 256, size, dtype=np.uint8)) for size in ((40, 52, 3), (64, 33, 3))]


def _export(tiny_model, tmp_path, *, context: str = "", seed: int = 1) -> tuple[str, str, torch.nn.Module]:
    """A checkpoint (saved as open_clip_train saves one) exported; returns (folder, checkpoint, its model)."""
    torch.manual_seed(seed)
    length = int(context.removeprefix("-ctx")) if context else None
    trained = open_clip.create_model(tiny_model, **({"force_context_length": length} if length else {}))
    ckpt = tmp_path / "epoch_1.pt"
    torch.save({"epoch": 1, "name": "run", "state_dict": trained.state_dict(), "optimizer": {}}, ckpt)
    out = tmp_path / "export"
    assert main(["export", f"open_clip:{tiny_model}{context}:{ckpt}", str(out)]) == 0
    reference = open_clip.create_model(tiny_model, pretrained=str(ckpt),
                                       **({"force_context_length": length} if length else {})).eval()
    return str(out), str(ckpt), reference


def _preprocess(tiny_model):
    """open_clip's own eval transform for the model (its default preprocess config)."""
    return open_clip.create_model_and_transforms(tiny_model)[2]


def _want(reference, tokenizer, preprocess, texts, images):
    with torch.no_grad():
        return (reference.encode_text(tokenizer(texts), normalize=True),
                reference.encode_image(torch.stack([preprocess(i) for i in images]), normalize=True))


@pytest.mark.parametrize("context", ["", "-ctx248"], ids=["77-tokens", "long-clip-248"])
def test_sentence_transformers_encodes_texts_and_images_as_the_checkpoint(tiny_model, tmp_path, context):
    out, _, reference = _export(tiny_model, tmp_path, context=context)
    files = {p for p in os.listdir(out)}
    assert {"modules.json", "config_sentence_transformers.json", "open_clip_sentence_transformers.py"} <= files
    st = SentenceTransformer(out, trust_remote_code=True, device="cpu")
    length = 248 if context else 77
    assert st.max_seq_length == length and st.get_embedding_dimension() == 16
    tokenizer = open_clip.get_tokenizer(tiny_model, context_length=length)
    assert tokenizer(TEXTS)[1].count_nonzero() > 77 or not context  # the long text uses its 248 positions
    images = _images(tmp_path, seed=0)
    want_text, want_image = _want(reference, tokenizer, _preprocess(tiny_model), TEXTS, images)
    torch.testing.assert_close(st.encode(TEXTS, convert_to_tensor=True), want_text, rtol=0, atol=1e-6)
    torch.testing.assert_close(st.encode(images, convert_to_tensor=True), want_image, rtol=0, atol=1e-6)
    single = st.encode(TEXTS[0], convert_to_tensor=True)  # one input, no batch axis
    torch.testing.assert_close(single, want_text[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(st.similarity(st.encode(TEXTS[:1]), st.encode(images)),
                               want_text[:1] @ want_image.T, rtol=0, atol=1e-5)


def test_images_as_paths_arrays_tensors_and_dicts_embed_as_the_pil_image(tiny_model, tmp_path):
    out, _, reference = _export(tiny_model, tmp_path, seed=3)
    st = SentenceTransformer(out, trust_remote_code=True, device="cpu")
    image = _images(tmp_path, seed=4)[0]
    path = tmp_path / "photo.png"
    image.save(path)
    array = np.array(image)
    with torch.no_grad():
        want = reference.encode_image(_preprocess(tiny_model)(image)[None], normalize=True)[0]
    forms = {"path": str(path), "array HWC": array, "tensor CHW": torch.from_numpy(array).permute(2, 0, 1),
             "float HWC in [0, 1]": array.astype(np.float32) / 255.0, "dict": {"image": image}}
    got = st.encode(list(forms.values()), convert_to_tensor=True)
    for name, row in zip(forms, got):
        torch.testing.assert_close(row, want, rtol=0, atol=1e-6, msg=name)
    with pytest.raises(ValueError, match="mixes multiple modalities"):
        st.encode(["a caption", image])  # one kind per call


def _run_child(model_id: str, cache: str, paths: list[str], tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "hf_modules"))
    subprocess.run([sys.executable, "-c", _CHILD, model_id, cache, json.dumps(paths), json.dumps(TEXTS),
                    str(tmp_path / "r.pt")], check=True, env=env, cwd=tmp_path, timeout=300)
    return torch.load(tmp_path / "r.pt", weights_only=True)


def _as_hub_cache(folder: str, cache, repo_id: str) -> None:
    """``folder`` as huggingface_hub's cache holds a downloaded repository (what a pushed export becomes)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)


@pytest.mark.parametrize("where", ["folder", "hub-id"])
def test_a_fresh_interpreter_without_vlr_plugins_loads_it_from_the_folder(tiny_model, tmp_path, where):
    out, _, reference = _export(tiny_model, tmp_path, context="-ctx248", seed=5)
    images = _images(tmp_path, seed=6)
    paths = []
    for i, image in enumerate(images):
        paths.append(str(tmp_path / f"{i}.png"))
        image.save(paths[-1])
    if where == "hub-id":  # SentenceTransformer("me/longclip-tiny") after `vlr push`, read from the cache offline
        _as_hub_cache(out, tmp_path / "hub", "me/longclip-tiny")
        shutil.rmtree(out)
        got = _run_child("me/longclip-tiny", str(tmp_path / "hub"), paths, tmp_path)
    else:
        got = _run_child(out, "", paths, tmp_path)
    assert got["module"].startswith("transformers_modules.")  # the folder's copy of the module ran
    tokenizer = open_clip.get_tokenizer(tiny_model, context_length=248)
    want_text, want_image = _want(reference, tokenizer, _preprocess(tiny_model), TEXTS, images)
    torch.testing.assert_close(got["text"], want_text, rtol=0, atol=1e-6)
    torch.testing.assert_close(got["image"], want_image, rtol=0, atol=1e-6)


def test_save_writes_a_folder_that_loads_again(tiny_model, tmp_path):
    out, _, reference = _export(tiny_model, tmp_path, seed=7)
    st = SentenceTransformer(out, trust_remote_code=True, device="cpu")
    again = tmp_path / "saved"
    st.save(str(again))
    model, preprocess = open_clip.create_model_from_pretrained(f"local-dir:{again}")  # still an open_clip folder
    reloaded = SentenceTransformer(str(again), trust_remote_code=True, device="cpu")
    images = _images(tmp_path, seed=8)
    want_text, want_image = _want(reference, open_clip.get_tokenizer(tiny_model), preprocess, TEXTS, images)
    torch.testing.assert_close(reloaded.encode(TEXTS, convert_to_tensor=True), want_text, rtol=0, atol=1e-6)
    torch.testing.assert_close(reloaded.encode(images, convert_to_tensor=True), want_image, rtol=0, atol=1e-6)
