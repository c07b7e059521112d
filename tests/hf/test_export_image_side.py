"""A paragraph-supervision export is a whole retrieval model: the trained text tower and the
frozen BLIP image side its store was made with (``vlr precompute``), found from the checkpoint.

The world: a tiny ``BlipForImageTextRetrieval`` saved with ``save_pretrained`` (and its
``BlipImageProcessor``), five images, ``vlr precompute --encoder blip:TINY`` into a store, and a
checkpoint in the layout ``WeightsOnlyCheckpointHook`` writes whose recipe trained against that
store. ``vlr export`` of it must give ``get_image_features`` equal to the store's rows (in a
fresh interpreter that cannot import vlr_plugins, and through sentence-transformers), and
``get_text_features`` equal to the trained encoder's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from _blip_world import paragraph_checkpoint, save_tiny_blip, tiny_blip_text_encoder
from _refusal import run_vlr

transformers = pytest.importorskip("transformers")

IDS = [f"img{i}" for i in range(5)]
TEXTS = ["A red car near the beach.", "an old man rides a horse", "two dogs, a cat and a bird"]


CHILD = textwrap.dedent("""
    import json, sys
    sys.modules["vlr_plugins"] = None  # any import of vlr_plugins now raises
    import torch
    from PIL import Image
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    folder, paths, texts = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    processor = AutoImageProcessor.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    images = [Image.open(p).convert("RGB") for p in paths]
    batch = tok(texts, truncation=True, max_length=model.config.max_tokens_for("paragraph"), padding=True,
                return_tensors="pt")
    with torch.no_grad():
        image = model.get_image_features(**processor(images, return_tensors="pt"))
        text = model.get_text_features(**batch)
    print("\\nREPORT " + json.dumps({"image": image.double().tolist(), "text": text.double().tolist(),
                                    "ids": batch["input_ids"].tolist(),
                                    "vlr": sorted(m for m, v in sys.modules.items()
                                                  if m.startswith("vlr_plugins") and v is not None)}))
""")


@pytest.fixture(scope="module")
def world(tiny_tokenizer, tiny_tokenizer_dir, tmp_path_factory) -> dict:
    from PIL import Image

    root = tmp_path_factory.mktemp("image-side")
    (root / "images").mkdir()
    rng = np.random.RandomState(0)
    for i in IDS:  # sizes differ, so the processor's resize is part of what is compared
        Image.fromarray(rng.randint(0, 255, (30 + 7 * len(i), 41, 3), dtype=np.uint8)).save(root / "images" / f"{i}.png")
    blip = save_tiny_blip(root / "blip")
    code, out, err = run_vlr(["precompute", "--images", root / "images", "--encoder", f"blip:{blip}",
                              "--out", root / "store"])
    assert code == 0, err
    encoder = tiny_blip_text_encoder(tiny_tokenizer, tiny_tokenizer_dir)
    ckpt = paragraph_checkpoint(root / "epoch_1.pth", encoder, str(root / "store"))
    return {"root": root, "blip": blip, "encoder": encoder, "ckpt": ckpt}


@pytest.fixture(scope="module")
def exported(world) -> tuple[Path, str]:
    out = world["root"] / "blip-c5"
    code, stdout, err = run_vlr(["export", world["ckpt"], out])
    assert code == 0, err
    return out, err


def _store_rows(world) -> torch.Tensor:
    from vlr_plugins.data import EmbeddingStore

    return EmbeddingStore(world["root"] / "store").get(IDS)


def _images(world) -> list:
    from PIL import Image

    return [Image.open(world["root"] / "images" / f"{i}.png").convert("RGB") for i in IDS]


def test_the_store_it_trained_against_names_the_image_side(world, exported):
    out, err = exported
    assert f"blip:{world['blip']}, the encoder of the store the recipe trained against" in err
    config = json.loads((out / "config.json").read_text())
    assert config["vision_config"]["hidden_size"] == 32
    assert config["image_embedding_space"] == {"dim": 16, "normalized": True, "store": str(world["root"] / "store"),
                                               "model": str(world["blip"]), "projection": "vision_proj",
                                               "encoder": f"blip:{world['blip']}"}
    assert (out / "processor_config.json").is_file() and (out / "preprocessor_config.json").is_file()


def test_image_features_are_the_store_rows_and_text_features_the_trained_encoders(world, exported):
    out, _ = exported
    root = Path(__file__).resolve().parents[2]
    paths = [str(world["root"] / "images" / f"{i}.png") for i in IDS]
    proc = subprocess.run([sys.executable, "-I", "-c", CHILD, str(out), json.dumps(paths), json.dumps(TEXTS)],
                          cwd=root, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.split("REPORT ", 1)[1])
    assert report["vlr"] == []
    image = torch.tensor(report["image"], dtype=torch.float32)
    torch.testing.assert_close(image, _store_rows(world), rtol=0, atol=1e-6)
    ids = torch.tensor(report["ids"])
    with torch.no_grad():
        expected = world["encoder"](ids, (ids != 0).long())
    torch.testing.assert_close(torch.tensor(report["text"], dtype=torch.float32), expected, rtol=0, atol=1e-6)


def test_sentence_transformers_encodes_texts_and_images_as_the_model(world, exported):
    st = pytest.importorskip("sentence_transformers", minversion="6.0")
    from transformers import AutoModel, AutoTokenizer

    out, _ = exported
    model = st.SentenceTransformer(str(out), trust_remote_code=True, device="cpu")
    ours = AutoModel.from_pretrained(out, trust_remote_code=True).eval()
    batch = AutoTokenizer.from_pretrained(out)(TEXTS, truncation=True, max_length=ours.config.max_tokens_for(),
                                               padding=True, return_tensors="pt")
    with torch.no_grad():
        text = ours.get_text_features(**batch)
    torch.testing.assert_close(model.encode(TEXTS, convert_to_tensor=True), text, rtol=0, atol=1e-6)
    images = model.encode(_images(world), convert_to_tensor=True)
    torch.testing.assert_close(images, _store_rows(world), rtol=0, atol=1e-6)
    # retrieval with both towers: each image's own row ranks itself first among the stored rows
    assert model.similarity(images, _store_rows(world)).argmax(dim=1).tolist() == list(range(len(IDS)))


def test_a_store_of_a_python_encoder_exports_the_text_side_and_says_why(world, tmp_path):
    from vlr_plugins.data import EmbeddingStoreWriter

    store = tmp_path / "store"
    with EmbeddingStoreWriter(store, 16, meta={"encoder": "my_encoders:clip_like"}) as writer:
        writer.add(IDS, torch.nn.functional.normalize(torch.randn(len(IDS), 16), dim=-1))
    ckpt = paragraph_checkpoint(tmp_path / "epoch_1.pth", world["encoder"], str(store))
    code, _, err = run_vlr(["export", ckpt, tmp_path / "out"])
    assert code == 0, err
    assert "my_encoders:clip_like, which is not a BLIP image side and cannot be bundled" in err
    from transformers import AutoModel

    model = AutoModel.from_pretrained(tmp_path / "out", trust_remote_code=True)
    assert model.config.vision_config is None and model.config.image_embedding_space["encoder"] == "my_encoders:clip_like"
    assert not any(k.startswith("vision") for k in model.state_dict())
    with pytest.raises(ValueError, match="my_encoders:clip_like"):
        model.get_image_features(torch.zeros(1, 3, 32, 32))


def test_text_only_and_a_named_image_side(world, tmp_path):
    from transformers import AutoModel, BlipForImageTextRetrieval

    code, _, err = run_vlr(["export", world["ckpt"], tmp_path / "text", "--text-only"])
    assert code == 0, err
    assert AutoModel.from_pretrained(tmp_path / "text", trust_remote_code=True).config.vision_config is None
    # a checkpoint whose store is gone: the image side is named on the command line
    other = save_tiny_blip(tmp_path / "other", seed=2)
    ckpt = paragraph_checkpoint(tmp_path / "moved.pth", world["encoder"], str(tmp_path / "gone"))
    code, _, err = run_vlr(["export", ckpt, tmp_path / "named", "--image-encoder", f"blip:{other}"])
    assert code == 0, err
    model = AutoModel.from_pretrained(tmp_path / "named", trust_remote_code=True).eval()
    pixels = torch.randn(2, 3, 32, 32)
    blip = BlipForImageTextRetrieval.from_pretrained(other).eval()
    with torch.no_grad():
        expected = torch.nn.functional.normalize(blip.vision_proj(blip.vision_model(pixels)[0][:, 0]), dim=-1)
        assert torch.equal(model.get_image_features(pixels), expected)


def test_pretrained_blip_exports_both_of_its_sides(tiny_tokenizer, tmp_path):
    """``blip:<folder>`` (BLIP0): the text side and, from the same folder, the image side."""
    from transformers import AutoModel, BlipForImageTextRetrieval

    blip = save_tiny_blip(tmp_path / "blip")
    tiny_tokenizer.save_pretrained(blip)
    code, _, err = run_vlr(["export", f"blip:{blip}", tmp_path / "blip0"])
    assert code == 0, err
    assert "the model the text encoder started from" in err
    model = AutoModel.from_pretrained(tmp_path / "blip0", trust_remote_code=True).eval()
    ref = BlipForImageTextRetrieval.from_pretrained(blip).eval()
    pixels = torch.randn(3, 3, 32, 32)
    ids = tiny_tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        image = torch.nn.functional.normalize(ref.vision_proj(ref.vision_model(pixels)[0][:, 0]), dim=-1)
        text_hidden = ref.text_encoder(input_ids=ids["input_ids"], attention_mask=ids["attention_mask"])[0]
        text = torch.nn.functional.normalize(ref.text_proj(text_hidden[:, 0]), dim=-1)
        assert torch.equal(model.get_image_features(pixels), image)
        assert torch.equal(model.get_text_features(**ids), text)


def test_a_store_written_through_the_python_api_names_its_blip_by_folder(world, tmp_path):
    """``precompute_image_embeddings(BlipImageEncoder(folder))`` records the bare folder; a name of an
    encoder's own (not a BLIP folder, not a Hub id) is not taken for one."""
    from vlr_plugins.data import EmbeddingStoreWriter
    from vlr_plugins.precompute.images import BlipImageEncoder, list_images, precompute_image_embeddings

    precompute_image_embeddings(BlipImageEncoder(world["blip"]), list_images(world["root"] / "images"),
                                tmp_path / "store", progress=False)
    ckpt = paragraph_checkpoint(tmp_path / "api.pth", world["encoder"], str(tmp_path / "store"))
    code, _, err = run_vlr(["export", ckpt, tmp_path / "api"])
    assert code == 0 and f"image side: {world['blip']}, the encoder of the store" in err, err
    with EmbeddingStoreWriter(tmp_path / "own", 16, meta={"encoder": "my-encoder"}) as writer:
        writer.add(IDS, torch.nn.functional.normalize(torch.randn(len(IDS), 16), dim=-1))
    ckpt = paragraph_checkpoint(tmp_path / "own.pth", world["encoder"], str(tmp_path / "own"))
    code, _, err = run_vlr(["export", ckpt, tmp_path / "own-export"])
    assert code == 0 and "made by my-encoder, which is not a BLIP image side" in err, err


def test_a_vlr_train_run_exports_with_the_image_side_its_store_was_made_with(tiny_world, tiny_encoder_cfg,
                                                                              tmp_path):
    """MMEngine end to end: `vlr precompute --encoder blip:TINY` -> `vlr train paragraph/c5` on that
    store -> `vlr export`: the image side is the store's, its features the store's rows."""
    pytest.importorskip("mmengine")
    import logging

    from mmengine.config import Config
    from mmengine.runner import Runner
    from PIL import Image
    from transformers import AutoModel, BlipImageProcessor

    from vlr_plugins.data import EmbeddingStore, read_paragraph_samples
    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.recipe import load_recipe

    ids = sorted({s.id for s in read_paragraph_samples(tiny_world["train"])})
    (tmp_path / "images").mkdir()
    rng = np.random.RandomState(5)
    for i in ids:
        Image.fromarray(rng.randint(0, 255, (32, 32, 3), dtype=np.uint8)).save(tmp_path / "images" / f"{i}.png")
    blip = save_tiny_blip(tmp_path / "blip", proj=tiny_encoder_cfg["embed_dim"])
    code, _, err = run_vlr(["precompute", "--images", tmp_path / "images", "--encoder", f"blip:{blip}",
                            "--out", tmp_path / "store"])
    assert code == 0, err
    recipe = load_recipe("paragraph/c5", {
        "model": tiny_encoder_cfg,
        "data": {"train": tiny_world["train"], "image_embeddings": str(tmp_path / "store")},
        "train": {"batch_size": 16, "epochs": 1, "lr": 1e-3, "warmup_steps": 1, "num_workers": 0},
    })
    try:
        Runner.from_cfg(Config(recipe_to_mmengine_config(recipe, str(tmp_path / "run"), log_level="WARNING"))).train()
    finally:
        logging.getLogger("mmengine").handlers.clear()
    code, _, err = run_vlr(["export", tmp_path / "run" / "epoch_1.pth", tmp_path / "hub"])
    assert code == 0 and "the encoder of the store the recipe trained against" in err, err
    model = AutoModel.from_pretrained(tmp_path / "hub", trust_remote_code=True).eval()
    some = ids[:6]
    images = [Image.open(tmp_path / "images" / f"{i}.png").convert("RGB") for i in some]
    with torch.no_grad():
        got = model.get_image_features(**BlipImageProcessor.from_pretrained(tmp_path / "hub")(images, return_tensors="pt"))
    torch.testing.assert_close(got, EmbeddingStore(tmp_path / "store").get(some), rtol=0, atol=1e-6)
