"""blip_retrieval_textonly built from the plugin's configs, offline, with a tiny text tower."""

from __future__ import annotations

import pytest

pytest.importorskip("lavis", reason="LAVIS lives in its own environment (docs/lavis.md)")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

import vlr_plugins.integrations.lavis  # noqa: E402,F401
from vlr_plugins.integrations.lavis.launcher import prepare_config  # noqa: E402
from _lavis_run import train_one_epoch  # noqa: E402


def _long_benchmark(tiny_world) -> dict:
    return {"vlr_retrieval": {
        "reader": "retrieval_jsonl", "name": "long", "max_tokens": 128,
        "build_info": {"annotations": {"test": {"storage": tiny_world["eval_long"]}},
                       "item_embeddings": {"storage": tiny_world["image_embeddings"]}}}}


@pytest.fixture
def built(write_run_config, tiny_world, tiny_model_options):
    import lavis.tasks as tasks

    cfg = prepare_config(write_run_config(_long_benchmark(tiny_world)), tiny_model_options,
                         train=tiny_world["train"], image_embeddings=tiny_world["image_embeddings"])
    task = tasks.setup_task(cfg)
    datasets = task.build_datasets(cfg)
    model = task.build_model(cfg)
    return cfg, task, datasets, model


def test_builds_offline_from_the_plugins_configs(built):
    cfg, task, datasets, model = built
    from vlr_plugins.integrations.lavis import (
        BlipRetrievalTextOnly,
        VlrParagraphDataset,
        VlrRetrievalSuite,
        VlrRetrievalTask,
    )

    assert isinstance(task, VlrRetrievalTask) and isinstance(model, BlipRetrievalTextOnly)
    assert isinstance(datasets["vlr_paragraph"]["train"], VlrParagraphDataset)
    assert isinstance(datasets["vlr_benchmarks"]["test"], VlrRetrievalSuite)
    assert model.text_encoder.config.hidden_size == 32
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(n.startswith(("text_encoder.", "text_proj.")) for n in trainable)
    assert not any("crossattention" in n for n in trainable)


def test_training_steps_change_only_the_text_side(built):
    _, task, datasets, model = built
    torch.manual_seed(0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    stats = train_one_epoch(task, model, datasets["vlr_paragraph"]["train"])  # 48 samples: 6 steps
    assert math.isfinite(float(stats["loss"]))
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    frozen = {k for k in before if k.startswith(("visual_encoder.", "vision_proj.", "itm_head."))
              or "crossattention" in k}
    assert frozen and not changed & frozen  # vision side bit-identical
    assert any(k.startswith("text_proj.") for k in changed)
    assert any(k.startswith("text_encoder.encoder.layer.") and "attention.self" in k for k in changed)


def _long_paragraph(tiny_world, n_words: int) -> str:
    words = [w for w in tiny_world["object"].vocabulary() if w.isalpha()]
    return " ".join(words[i % len(words)] for i in range(n_words))


def test_a_128_token_paragraph_reaches_the_encoder_whole(built, tiny_world, tmp_path):
    """LAVIS' BLIP path cuts it twice (blip_caption at 50 words, evaluation at 35 tokens);
    through the plugin, with C5's views, all 128 tokens go into the text encoder."""
    from lavis.common.registry import registry

    _, _, _, model = built
    paragraph = _long_paragraph(tiny_world, 126)  # + [CLS] and [SEP] = 128 tokens
    assert len(model.tokenizer(paragraph)["input_ids"]) == 128
    # LAVIS' own processor would drop 76 of the 126 words
    assert len(registry.get_processor_class("blip_caption").from_config(None)(paragraph).split()) == 50

    record = json.loads(Path(tiny_world["train"]).read_text().splitlines()[0])
    record["paragraph"] = paragraph
    ann = tmp_path / "one.jsonl"
    ann.write_text(json.dumps(record) + "\n")
    from vlr_plugins.integrations.lavis import VlrParagraphDataset, VlrTextProcessor
    from vlr_plugins.recipe import load_recipe

    ds = VlrParagraphDataset(str(ann), tiny_world["image_embeddings"], load_recipe("paragraph/c5").text_views,
                             VlrTextProcessor())
    batch = ds.collater([ds[0]])
    seen = {}

    def grab(module, args, kwargs, output):
        seen["input_ids"] = kwargs.get("input_ids", args[0] if args else None)

    handle = model.text_encoder.embeddings.register_forward_hook(grab, with_kwargs=True)
    blocks, model.length_blocks = model.length_blocks, 1  # both texts in one call, read below
    try:
        model.eval()
        model(batch)
    finally:
        handle.remove()
        model.length_blocks = blocks
    ids = seen["input_ids"]
    assert ids.shape == (2, 128)  # the caption (padded) and the whole paragraph
    assert ids[1].tolist() == model.tokenizer(paragraph)["input_ids"]
    assert ids[1, -1].item() == model.tokenizer.sep_token_id

    # and the last word changes the embedding: nothing after position 35 or 50 words is lost
    words = paragraph.split()
    other = " ".join(words[:-1] + [next(w for w in words if w != words[-1])])
    with torch.no_grad():
        a, b = model.encode_text([paragraph, other], 128)
    assert not torch.allclose(a, b)


def _save(obj, path: Path) -> str:
    torch.save(obj, path)
    return str(path)


def test_checkpoints_load_weights_only_and_trained_weights_overlay_the_base(built, tmp_path, tiny_world,
                                                                          tiny_model_options, write_run_config):
    import lavis.tasks as tasks

    cfg, task, datasets, model = built
    base = _save({"model": model.state_dict(), "config": {"note": "plain data only"}}, tmp_path / "base.pth")
    train_one_epoch(task, model, datasets["vlr_paragraph"]["train"])
    # what LAVIS' RunnerBase saves: only parameters that require grad (+ buffers), optimizer, config
    grad = {n for n, p in model.named_parameters() if p.requires_grad}
    state = {k: v for k, v in model.state_dict().items()
             if k in grad or k not in dict(model.named_parameters())}
    trained = _save({"model": state, "optimizer": {}, "config": {}, "scaler": None, "epoch": 0},
                    tmp_path / "checkpoint_0.pth")

    run_cfg = write_run_config(_long_benchmark(tiny_world))
    opts = [o for o in tiny_model_options if not o.startswith("model.finetuned")]
    cfg2 = prepare_config(str(run_cfg), opts + [f"model.finetuned={base}"], checkpoint=trained,
                          train=tiny_world["train"], image_embeddings=tiny_world["image_embeddings"])
    reloaded = tasks.setup_task(cfg2).build_model(cfg2)
    expected, got = model.state_dict(), reloaded.state_dict()
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)

    # a LAVIS blip_retrieval checkpoint: momentum encoders and queues are ignored
    extra = {**expected, "visual_encoder_m.cls_token": torch.zeros(1), "image_queue": torch.zeros(2, 2),
             "temp": torch.tensor(0.07)}
    reloaded.load_checkpoint(_save({"model": extra}, tmp_path / "blip_retrieval.pth"))

    # a pickle that needs code to load is refused, not executed
    evil = _save({"model": expected, "args": argparse.Namespace(lr=1)}, tmp_path / "evil.pth")
    with pytest.raises(RuntimeError, match="weights_only"):
        reloaded.load_checkpoint(evil)
    with pytest.raises(FileNotFoundError, match="no such file"):
        reloaded.load_checkpoint(str(tmp_path / "missing.pth"))


def test_tokenizer_gives_lavis_blip_tokenizer_ids(built, tiny_world):
    """LAVIS' own BLIP tokenizer (slow BertTokenizer from bert-base-uncased, here from the
    offline HF cache) and the plugin's fast one agree, special tokens included."""
    from lavis.models.blip_models.blip import BlipBase

    ours, theirs = built[3].tokenizer, BlipBase.init_tokenizer()
    texts = [_long_paragraph(tiny_world, 40), "A dog, running!", json.loads(
        Path(tiny_world["train"]).read_text().splitlines()[0])["paragraph"]]
    for budget in (35, 77, 128):
        assert (ours(texts, truncation=True, max_length=budget)["input_ids"]
                == theirs(texts, truncation=True, max_length=budget)["input_ids"])
    assert ours.enc_token_id == theirs.enc_token_id and ours.bos_token_id == theirs.bos_token_id


def test_resume_strictly_loads_what_lavis_saves_and_features_match_the_encoder(built):
    """RunnerBase saves only trainable tensors and resumes with a strict load_state_dict."""
    _, _, _, model = built
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    params = dict(model.named_parameters())
    saved = {k: v.clone() + 1 for k, v in model.state_dict().items() if k in trainable or k not in params}
    vit_before = model.visual_encoder.pos_embed.clone()
    model.load_state_dict(saved)  # strict, as RunnerBase._load_checkpoint calls it
    assert torch.equal(model.text_proj.weight, saved["text_proj.weight"])
    assert torch.equal(model.visual_encoder.pos_embed, vit_before)
    with pytest.raises(RuntimeError, match="Missing key"):
        model.load_state_dict({k: v for k, v in saved.items() if k != "text_proj.weight"})
    with pytest.raises(RuntimeError, match="Unexpected key"):
        model.load_state_dict({**saved, "text_decoder.x": torch.zeros(1)})

    model.eval()
    feats = model.extract_features({"text_input": ["a red car", "two dogs"]}, mode="text")
    assert torch.allclose(feats.text_embeds_proj, model.encode_text(["a red car", "two dogs"]))
    image = torch.randn(2, 3, 32, 32)
    assert torch.allclose(model.extract_features({"image": image}, mode="image").image_embeds_proj,
                          model.encode_image(image))
    with pytest.raises(ValueError, match="mode"):
        model.extract_features({}, mode="multimodal")


def test_lavis_export_writes_a_text_encoder_that_vlr_export_rebuilds(built, tmp_path, tiny_world,
                                                                      tiny_model_options):
    """`vlr lavis-export` -> load_text_encoder (what `vlr export` reads): transformers'
    BlipTextModel with the converted weights embeds exactly as the LAVIS model does."""
    from transformers import AutoTokenizer

    from vlr_plugins.cli import main
    from vlr_plugins.specs import load_text_encoder

    cfg, task, datasets, model = built
    base = _save({"model": model.state_dict()}, tmp_path / "base.pth")
    train_one_epoch(task, model, datasets["vlr_paragraph"]["train"])
    grad = {n for n, p in model.named_parameters() if p.requires_grad}
    trained = _save({"model": {k: v for k, v in model.state_dict().items() if k in grad}},
                    tmp_path / "checkpoint_0.pth")
    opts = [o for o in tiny_model_options if not o.startswith("model.finetuned")] + [f"model.finetuned={base}"]
    # with VLR_LAVIS_ARTIFACTS set (CI), the export is kept for the main environment's
    # test_lavis_hub_roundtrip.py: `vlr export` + AutoModel under transformers 5
    shared = os.environ.get("VLR_LAVIS_ARTIFACTS")
    out = Path(shared) / "c5-text.pth" if shared else tmp_path / "c5-text.pth"
    assert main(["lavis-export", "--cfg-path", "lavis/c5", "--checkpoint", trained, "--out", str(out),
                 "--image-embeddings", tiny_world["image_embeddings"], "--options", *opts]) == 0

    encoder = load_text_encoder(out)
    meta = torch.load(out, weights_only=True)["meta"]
    assert meta["vlr_recipe"]["name"] == "C5" and meta["vlr_recipe"]["loss"]["type"] == "MultiPositiveInfoNCELoss"
    # the store it trained against, from which `vlr export` takes the image side to bundle
    assert meta["vlr_recipe"]["data"]["image_embeddings"] == os.path.abspath(tiny_world["image_embeddings"])
    # the card's loss line: the model's loss object as configured, defaults included
    assert meta["vlr_loss"] == json.loads(json.dumps({"type": "MultiPositiveInfoNCELoss",
                                                      **model.loss_fn.get_config_dict()}))
    assert "variant" in meta["vlr_loss"] and "variant" not in meta["vlr_recipe"]["loss"]
    tok = AutoTokenizer.from_pretrained(meta["vlr_text_encoder"]["tokenizer"])
    texts = ["a red car", _long_paragraph(tiny_world, 126), json.loads(
        Path(tiny_world["train"]).read_text().splitlines()[0])["paragraph"]]
    model.eval()
    with torch.no_grad():
        expected = model.encode_text(texts, 128)
        batch = tok(texts, truncation=True, max_length=128, padding=True, return_tensors="pt")
        got = encoder(batch["input_ids"], batch["attention_mask"])
    assert batch["input_ids"].tolist() == model.tokenize(texts, 128)[0].tolist()
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    if shared:
        torch.save({"texts": texts, "embeddings": expected}, Path(shared) / "c5-text-expected.pt")
