"""An MVC export is the whole retrieval model: ``vlr export`` of a ``vlr train mvc/mvc_b`` checkpoint
carries the trained video tower, whose ``get_video_features`` of the folder's video processor's
clips equals the rows ``vlr precompute --encoder vlr:CHECKPOINT`` writes -- here and in a fresh
interpreter without vlr-plugins (or timm) -- while the text features stay those of the text encoder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("transformers")
pytest.importorskip("mmengine")
pytest.importorskip("av")
pytest.importorskip("torchvision")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _mvc_world import mvc_run, mvc_world  # noqa: E402
from _videos import torchcodec_missing  # noqa: E402
from transformers import AutoModel, AutoTokenizer, AutoVideoProcessor  # noqa: E402

from vlr_plugins.cli import main  # noqa: E402

TEXTS = ["a cyan bar stays in place", "The video shows a navy background. A white bar moves left."]
REMOTE = ("modeling_vlr_video.py", "configuration_vlr_video.py", "video_processing_vlr.py")

# A fresh interpreter where vlr_plugins and timm cannot be imported, as on a machine without them.
CHILD = textwrap.dedent("""
    import json, sys
    sys.modules["vlr_plugins"] = None
    sys.modules["timm"] = None
    import numpy as np, torch
    from transformers import AutoModel, AutoTokenizer, AutoVideoProcessor

    folder, frames_file, paths, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
    model = AutoModel.from_pretrained(folder, trust_remote_code=True, use_safetensors=True).eval()
    processor = AutoVideoProcessor.from_pretrained(folder, trust_remote_code=True)
    tok = AutoTokenizer.from_pretrained(folder)
    data = np.load(frames_file)
    frames = [data[k] for k in sorted(data.files)]
    batch = tok(texts, truncation=True, max_length=64, padding=True, return_tensors="pt")
    with torch.no_grad():
        videos = model.get_video_features(**processor(videos=frames, return_tensors="pt"))
        files = model.get_video_features(**processor(videos=paths, return_tensors="pt")) if paths else None
        text = {v: model.encode_text(**batch, view=v).double().tolist() for v in model.config.views}
    print("\\nREPORT " + json.dumps(dict(
        model=f"{type(model).__module__}.{type(model).__name__}",
        processor=f"{type(processor).__module__}.{type(processor).__name__}",
        videos=videos.double().tolist(), files=None if files is None else files.double().tolist(), text=text,
        loaded=sorted(m for m, v in sys.modules.items() if m.split(".")[0] in ("vlr_plugins", "timm") and v is not None),
    )))
""")


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """The trained checkpoint, the eval clips, their store rows (PyAV, and torchcodec when it
    loads), and the export."""
    world, work = mvc_world(), mvc_run()
    ckpt = str(work / "epoch_1.pth")
    out = tmp_path_factory.mktemp("mvc_video_export")
    root = world["eval_videos"].rsplit("/", 1)[0]
    records = [json.loads(line) for line in open(world["eval_videos"])]
    videos = {r["id"]: f"{root}/{r['path']}" for r in records}
    stores = {}
    for backend in ("pyav", "torchcodec") if torchcodec_missing() is None else ("pyav",):
        stores[backend] = out / f"store-{backend}"
        assert main(["precompute", "--videos", world["eval_videos"], "--encoder", f"vlr:{ckpt}", "--out",
                     str(stores[backend]), "--frames", "4", "--sampler", "middle", "--backend", backend,
                     "--workers", "0"]) == 0
    assert main(["export", ckpt, str(out / "export")]) == 0
    return {"ckpt": ckpt, "videos": videos, "stores": stores, "export": out / "export", "root": out}


def rows(chain, backend="pyav") -> torch.Tensor:
    from vlr_plugins.data import EmbeddingStore

    return EmbeddingStore(chain["stores"][backend]).get(list(chain["videos"])).float()


def same_rows(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal up to float32 rounding: the clips' values are the same (the processor's output equals
    precompute's transform, tests/hf/test_mvc_video_tower_export.py), but precompute's clips are
    laid out channels-last, which changes the patch convolution's summation order."""
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def decoded(chain) -> list[torch.Tensor]:
    """Every frame of each eval clip, decoded as vlr precompute decodes them (PyAV)."""
    from vlr_plugins.data import read_frames

    return [read_frames(path) for path in chain["videos"].values()]


def test_the_folder_holds_the_tower_its_config_and_its_processor(chain):
    from vlr_plugins.hf.configuration_vlr_video import ARCHITECTURE_KEYS

    ckpt = torch.load(chain["ckpt"], map_location="cpu", weights_only=True)
    recorded = ckpt["meta"]["vlr_video_encoder"]
    config = json.loads((chain["export"] / "config.json").read_text())
    assert config["video_config"] == {"type": "SpaceTimeViT", "frame_sampling": "middle",
                                      **{k: recorded[k] for k in ARCHITECTURE_KEYS if k in recorded}}
    assert config["video_config"]["num_frames"] == 4 and config["video_config"]["image_size"] == 32
    processor = json.loads((chain["export"] / "video_preprocessor_config.json").read_text())
    assert processor["auto_map"] == {"AutoVideoProcessor": "video_processing_vlr.VlrVideoProcessor"}
    assert {k: processor[k] for k in ("num_frames", "size", "crop_size", "resample", "image_mean", "image_std",
                                      "do_sample_frames")} == {
        "num_frames": 4, "size": {"shortest_edge": 32}, "crop_size": {"height": 32, "width": 32}, "resample": 3,
        "image_mean": recorded["image_mean"], "image_std": recorded["image_std"], "do_sample_frames": True}
    for name in REMOTE:
        code = (chain["export"] / name).read_text()
        assert "import vlr_plugins" not in code and "from vlr_plugins" not in code and "import timm" not in code and "from timm" not in code
    card = (chain["export"] / "README.md").read_text()
    assert "model.get_video_features(**clips)" in card and "not in this\nexport" not in card
    # the tower's weights, 1:1 under video_model.
    from safetensors.torch import load_file

    saved = load_file(chain["export"] / "model.safetensors")
    tower = {k[len("video_encoder."):]: v for k, v in ckpt["state_dict"].items() if k.startswith("video_encoder.")}
    assert {k[len("video_model."):] for k in saved if k.startswith("video_model.")} == set(tower)
    for key, value in tower.items():
        assert torch.equal(saved[f"video_model.{key}"], value), key


def test_video_features_equal_the_store_rows_of_vlr_precompute(chain):
    model = AutoModel.from_pretrained(chain["export"]).eval()
    want = rows(chain)
    for kwargs in ({}, {"trust_remote_code": True}):  # vlr_plugins.hf registers it; the folder's copy too
        processor = AutoVideoProcessor.from_pretrained(chain["export"], **kwargs)
        batch = processor(videos=decoded(chain), return_tensors="pt")
        assert batch["pixel_values_videos"].shape == (len(want), 4, 3, 32, 32)
        with torch.no_grad():
            same_rows(model.get_video_features(**batch), want)
            assert torch.equal(model.encode_video(batch["pixel_values_videos"]), model.get_video_features(**batch))
    # the fusion layers read the tower's tokens as the trained model did
    with torch.no_grad():
        tokens = model.video_tokens(batch["pixel_values_videos"])
    assert tokens.shape == (len(want), 8, model.config.video_width)


def test_text_features_are_the_trained_text_encoders(chain):
    from vlr_plugins.specs import load_text_encoder

    model = AutoModel.from_pretrained(chain["export"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(chain["export"])
    trained = load_text_encoder(chain["ckpt"]).eval()
    batch = tokenizer(TEXTS, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        for view in ("summary", "detailed"):
            assert torch.equal(model.encode_text(**batch, view=view), trained.encode_text(TEXTS, view=view)), view


@pytest.fixture(scope="module")
def without_vlr_plugins(chain):
    root = chain["root"] / "elsewhere"
    folder = root / "mvc-export"
    shutil.copytree(chain["export"], folder)
    frames = root / "frames.npz"
    np.savez(frames, **{f"{i:03d}": f.numpy() for i, f in enumerate(decoded(chain))})
    paths = list(chain["videos"].values()) if "torchcodec" in chain["stores"] else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(root / "modules"), TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([sys.executable, "-I", "-c", CHILD, str(folder), str(frames), json.dumps(paths),
                           json.dumps(TEXTS)], cwd=root, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.rsplit("\nREPORT ", 1)[1])


def test_without_vlr_plugins_the_folder_gives_the_store_rows(chain, without_vlr_plugins):
    from vlr_plugins.specs import load_text_encoder

    report = without_vlr_plugins
    assert report["loaded"] == []
    assert report["model"].startswith("transformers_modules.") and report["model"].endswith("VlrDualCLSTextEncoderModel")
    assert report["processor"].endswith("video_processing_vlr.VlrVideoProcessor")
    same_rows(torch.tensor(report["videos"]).float(), rows(chain))
    trained = load_text_encoder(chain["ckpt"]).eval()
    with torch.no_grad():
        for view in ("summary", "detailed"):
            assert torch.equal(torch.tensor(report["text"][view]).float(), trained.encode_text(TEXTS, view=view))


def test_video_files_decoded_by_transformers_give_the_torchcodec_rows(chain, without_vlr_plugins):
    if "torchcodec" not in chain["stores"]:
        pytest.skip(torchcodec_missing())
    # transformers decodes files with torchcodec: the rows of `vlr precompute --backend torchcodec`
    same_rows(torch.tensor(without_vlr_plugins["files"]).float(), rows(chain, "torchcodec"))


def test_the_cards_use_snippets_run_and_retrieve_with_both_towers(chain, monkeypatch):
    import re

    card = (chain["export"] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", card, flags=re.S)
    assert len(blocks) == 3 and 'from_pretrained("export"' in blocks[0] and "SentenceTransformer" in blocks[2]  # the repo id defaults to the folder's name
    monkeypatch.chdir(chain["root"])  # where "export" is the exported folder
    scope = {"frames": decoded(chain)[0]}  # the decoded frames the card's text asks for
    for block in blocks:
        exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 - the card we wrote
    assert scope["text_emb"].shape == (1, 16) and scope["scores"].shape == (1, 1)
    same_rows(scope["video_emb"], rows(chain)[:1])
    torch.testing.assert_close(scope["st_scores"], scope["scores"], rtol=0, atol=1e-6)  # sentence-transformers
