"""Every model card's "Use" snippets run as written, against the export they describe.

``vlr export ... --repo-id <the export folder>`` makes the card's ``from_pretrained("<repo id>")``
load the folder itself; each ```python block of README.md then runs in a fresh interpreter that
cannot import vlr_plugins (as on a user's machine), in a folder holding the files the snippet
names (``dog.jpg``, ``car.jpg``). What a snippet prints must be what the model computes.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _blip_world import paragraph_checkpoint, save_tiny_blip, tiny_blip_text_encoder
from _refusal import run_vlr

pytest.importorskip("transformers")

BLOCKER = "import sys; sys.modules['vlr_plugins'] = None  # as where vlr-plugins is not installed\n"
TEXTS = ["a dog running on a beach", "a red car parked on a street"]  # the texts the card's snippets use


def snippets(card: Path) -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", card.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, f"{card} shows no python snippet"
    return blocks


def run_snippet(code: str, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-I", "-c", BLOCKER + code], cwd=cwd, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, f"the snippet failed:\n{code}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory) -> Path:
    from PIL import Image

    folder = tmp_path_factory.mktemp("user")
    rng = np.random.RandomState(3)
    for name in ("dog.jpg", "car.jpg"):
        Image.fromarray(rng.randint(0, 255, (40, 52, 3), dtype=np.uint8)).save(folder / name)
    return folder


@pytest.fixture(scope="module")
def paragraph_exports(tiny_tokenizer, tiny_tokenizer_dir, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("card-snippets")
    blip = save_tiny_blip(root / "blip")
    encoder = tiny_blip_text_encoder(tiny_tokenizer, tiny_tokenizer_dir)
    ckpt = paragraph_checkpoint(root / "epoch_1.pth", encoder, None)
    out = {}
    for kind, extra in (("both", ["--image-encoder", f"blip:{blip}"]), ("text", ["--text-only"])):
        out[kind] = root / f"blip-c5-{kind}"
        code, _, err = run_vlr(["export", ckpt, out[kind], "--repo-id", out[kind], *extra])
        assert code == 0, err
    return out


def test_the_two_tower_card_retrieves_as_the_model(paragraph_exports, user_folder):
    from PIL import Image
    from transformers import AutoModel, AutoProcessor

    folder = paragraph_exports["both"]
    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    processor = AutoProcessor.from_pretrained(folder)
    images = [Image.open(user_folder / n).convert("RGB") for n in ("dog.jpg", "car.jpg")]
    with torch.no_grad():
        text = model.get_text_features(**processor(text=TEXTS, truncation=True, padding=True,
                                                   max_length=model.config.max_tokens_for(), return_tensors="pt"))
        image = model.get_image_features(**processor(images=images, return_tensors="pt"))
    expected = str((text @ image.T).argmax(dim=1))
    blocks = snippets(folder / "README.md")
    assert len(blocks) == 2 and "SentenceTransformer" in blocks[1]
    for code in blocks:
        assert run_snippet(code, user_folder).strip().splitlines()[-1] == expected


def test_the_text_only_card_runs(paragraph_exports, user_folder):
    card = paragraph_exports["text"] / "README.md"
    assert "that image side is not in this export" in card.read_text()
    for code in snippets(card):
        run_snippet(code + "\nprint(text_emb.shape)\n", user_folder)


def test_the_mllm_card_runs(tmp_path, user_folder):
    pytest.importorskip("torchvision")
    from _tiny_mllm import save_tiny_qwen2vl

    folder = save_tiny_qwen2vl(tmp_path / "care-tiny", seed=11)
    out = tmp_path / "CaRe-tiny"
    code, _, err = run_vlr(["export", folder, out, "--repo-id", out, "--recipe", "care/stage2_paper"])
    assert code == 0, err
    frames = "frames = torch.randint(0, 256, (4, 3, 28, 28), dtype=torch.uint8)\n"
    blocks = snippets(out / "README.md")
    score = run_snippet(blocks[0].replace("import torch\n", "import torch\n" + frames, 1) + "\nprint(score)\n",
                        user_folder)
    # the clip is the user's (random here): the snippet must run and give one finite score
    assert np.isfinite(float(score.strip().splitlines()[-1]))
    for code in blocks[1:]:
        run_snippet(code, user_folder)


def test_the_open_clip_card_retrieves_as_the_model(tmp_path, user_folder):
    open_clip = pytest.importorskip("open_clip")
    import json

    from _tiny_towers import TINY_OPEN_CLIP
    from PIL import Image

    name = "vlr-card-snippets-clip"
    (tmp_path / f"{name}.json").write_text(json.dumps(TINY_OPEN_CLIP))
    open_clip.add_model_config(tmp_path / f"{name}.json")
    torch.manual_seed(0)
    torch.save({"state_dict": open_clip.create_model(name).state_dict()}, tmp_path / "epoch_1.pt")
    out = tmp_path / "clip-export"
    code, _, err = run_vlr(["export", f"open_clip:{name}:{tmp_path / 'epoch_1.pt'}", out, "--repo-id", out])
    assert code == 0, err
    model, preprocess = open_clip.create_model_from_pretrained(f"local-dir:{out}")
    tokenizer = open_clip.get_tokenizer(f"local-dir:{out}")
    images = torch.stack([preprocess(Image.open(user_folder / n).convert("RGB")) for n in ("dog.jpg", "car.jpg")])
    with torch.no_grad():
        scores = model.eval().encode_text(tokenizer(TEXTS), normalize=True) @ model.encode_image(images,
                                                                                                   normalize=True).T
    blocks = snippets(out / "README.md")
    assert len(blocks) == 2 and "SentenceTransformer" in blocks[1]
    for code in blocks:
        # the card names the Hub repository; here its id is the export folder, which open_clip reads as local-dir:
        code = code.replace(f"hf-hub:{out}", f"local-dir:{out}")
        assert run_snippet(code, user_folder).strip().splitlines()[-1] == str(scores.argmax(dim=1))
