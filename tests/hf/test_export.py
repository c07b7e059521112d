"""export_text_encoder: train -> export -> AutoModel.from_pretrained gives the same embeddings,
with vlr-plugins (registered classes) and without it (the folder's own remote code)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch  # noqa: E402
from transformers import AutoModel, AutoTokenizer  # noqa: E402

from vlr_plugins.errors import DataFormatError, OutputExistsError  # noqa: E402
from vlr_plugins.hf import VlrTextEncoderModel, check_export_target, export_text_encoder  # noqa: E402

BUDGETS = {"caption": 24, "paragraph": 64}
SPACE = {"model": "Salesforce/blip-itm-base-coco", "projection": "vision_proj", "dim": 16, "normalized": True}

# Runs in a fresh interpreter where `import vlr_plugins` fails, as on a machine without it.
CHILD = textwrap.dedent("""
    import json, sys
    sys.modules["vlr_plugins"] = None  # any import of vlr_plugins, or of a submodule, now raises
    import torch
    from transformers import AutoModel, AutoTokenizer

    remote, plain, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    report = {}
    try:
        import vlr_plugins  # noqa: F401
        report["vlr_plugins_importable"] = True
    except ImportError:
        report["vlr_plugins_importable"] = False
    for key, folder in (("no_trust", remote), ("plain", plain)):
        try:
            AutoModel.from_pretrained(folder)
            report[key] = "loaded"
        except Exception as e:
            report[key] = f"{type(e).__name__}: {e}"
    model = AutoModel.from_pretrained(remote, trust_remote_code=True, use_safetensors=True)
    tok = AutoTokenizer.from_pretrained(remote)
    batch = tok(texts, truncation=True, max_length=model.config.max_tokens_for("caption"), padding=True,
                return_tensors="pt")
    with torch.no_grad():
        emb = model.encode_text(**batch)
        features = model.get_text_features(**batch)
    report.update(
        cls=f"{type(model).__module__}.{type(model).__name__}",
        ids=batch["input_ids"].tolist(),
        emb=emb.double().tolist(),
        features_equal=bool(torch.equal(emb, features)),
        vlr_modules=sorted(m for m, v in sys.modules.items() if m.startswith("vlr_plugins") and v is not None),
    )
    print("\\nREPORT " + json.dumps(report))  # on a line of its own: transformers' prompt has no newline
""")


@pytest.fixture(scope="module")
def exported(tiny_encoder, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "tiny-blip-c5"
    path = export_text_encoder(tiny_encoder, out, token_budgets=BUDGETS, image_embedding_space=SPACE, recipe="C5")
    assert path == out
    return out


@pytest.fixture(scope="module")
def exported_plain(tiny_encoder, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "tiny-blip-plain"
    return export_text_encoder(tiny_encoder, out, token_budgets=BUDGETS, remote_code=False)


TEXTS = ["A red car near the beach.", "an old man rides a horse", "two dogs, a cat and a bird"]


def reference(encoder, tokenizer, budget=BUDGETS["caption"]):
    batch = tokenizer(TEXTS, truncation=True, max_length=budget, padding=True, return_tensors="pt")
    with torch.no_grad():
        return batch["input_ids"], encoder(batch["input_ids"], batch["attention_mask"])


def test_folder_holds_safetensors_config_code_and_tokenizer(exported):
    names = sorted(p.name for p in exported.iterdir())
    assert {"config.json", "model.safetensors", "modeling_vlr.py", "configuration_vlr.py",
            "tokenizer.json", "tokenizer_config.json"} <= set(names)
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl"))], "nothing to unpickle"
    assert not [p for p in exported.parent.iterdir() if p.name.startswith(".")], "no temporary folder left"
    config = json.loads((exported / "config.json").read_text())
    assert config["model_type"] == "vlr_blip_text_encoder"
    assert config["auto_map"] == {"AutoConfig": "configuration_vlr.VlrTextEncoderConfig",
                                  "AutoModel": "modeling_vlr.VlrTextEncoderModel"}
    assert config["token_budgets"] == BUDGETS and config["default_max_tokens"] == 64
    assert config["image_embedding_space"] == SPACE and config["recipe"] == "C5"
    # the shipped code runs without vlr-plugins: it must not even mention an import of it
    for name in ("modeling_vlr.py", "configuration_vlr.py"):
        code = (exported / name).read_text()
        assert "import vlr_plugins" not in code and "from vlr_plugins" not in code
    # the tokenizer cannot hand the encoder more tokens than its 160 positions
    assert AutoTokenizer.from_pretrained(exported).model_max_length == 160


def test_automodel_returns_our_class_with_identical_embeddings(tiny_encoder, tiny_tokenizer, exported):
    ids, expected = reference(tiny_encoder, tiny_tokenizer)
    tok = AutoTokenizer.from_pretrained(exported)
    for kwargs in ({}, {"trust_remote_code": True}):  # the registered class wins over the folder's copy
        model = AutoModel.from_pretrained(exported, use_safetensors=True, **kwargs)
        assert type(model) is VlrTextEncoderModel
        batch = tok(TEXTS, truncation=True, max_length=model.config.max_tokens_for("caption"), padding=True,
                    return_tensors="pt")
        assert torch.equal(batch["input_ids"], ids)
        with torch.no_grad():
            assert torch.equal(model.encode_text(**batch), expected)


def test_export_leaves_no_remote_code_switch_on(exported, tiny_encoder, tmp_path):
    assert VlrTextEncoderModel._auto_class is None
    VlrTextEncoderModel.from_vlr_encoder(tiny_encoder).save_pretrained(tmp_path)
    assert not list(tmp_path.glob("*.py"))
    assert "auto_map" not in json.loads((tmp_path / "config.json").read_text())


@pytest.fixture(scope="module")
def without_vlr_plugins(exported, exported_plain, tmp_path_factory):
    """What a fresh interpreter that cannot import vlr_plugins makes of the exported folders."""
    root = tmp_path_factory.mktemp("elsewhere")
    remote, plain = root / "tiny-blip-c5", root / "tiny-blip-plain"
    shutil.copytree(exported, remote)
    shutil.copytree(exported_plain, plain)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(root / "modules"), TOKENIZERS_PARALLELISM="false")
    # -I: no PYTHONPATH, no user site, not even the working directory on sys.path
    proc = subprocess.run([sys.executable, "-I", "-c", CHILD, str(remote), str(plain), json.dumps(TEXTS)],
                          cwd=root, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.rsplit("\nREPORT ", 1)[1])


def test_remote_code_gives_identical_embeddings_without_vlr_plugins(tiny_encoder, tiny_tokenizer,
                                                                    without_vlr_plugins):
    report = without_vlr_plugins
    assert report["vlr_plugins_importable"] is False and report["vlr_modules"] == []
    assert report["cls"].startswith("transformers_modules.") and report["cls"].endswith(".VlrTextEncoderModel")
    ids, expected = reference(tiny_encoder, tiny_tokenizer)
    assert report["ids"] == ids.tolist()
    assert torch.equal(torch.tensor(report["emb"], dtype=torch.float64).float(), expected)
    assert report["features_equal"]


def test_without_trust_remote_code_loading_fails_clearly(without_vlr_plugins):
    assert without_vlr_plugins["no_trust"].startswith("ValueError")
    assert "trust_remote_code=True" in without_vlr_plugins["no_trust"]
    # an export without remote code needs vlr-plugins, and says the model type is unknown
    assert "vlr_blip_text_encoder" in without_vlr_plugins["plain"]
    assert "does not recognize this architecture" in without_vlr_plugins["plain"]


def test_export_without_remote_code_loads_with_vlr_plugins(tiny_encoder, tiny_tokenizer, exported_plain):
    assert not list(exported_plain.glob("*.py"))
    assert "auto_map" not in json.loads((exported_plain / "config.json").read_text())
    model = AutoModel.from_pretrained(exported_plain)
    assert type(model) is VlrTextEncoderModel
    ids, expected = reference(tiny_encoder, tiny_tokenizer)
    with torch.no_grad():
        assert torch.equal(model.encode_text(ids, (ids != 0).long()), expected)


def test_export_from_a_vlr_train_checkpoint(tiny_encoder, tiny_tokenizer, tmp_path):
    # the layout WeightsOnlyCheckpointHook writes: model weights under text_encoder., architecture in meta
    ckpt = tmp_path / "epoch_1.pth"
    torch.save({"meta": {"vlr_text_encoder": tiny_encoder.to_config()},
                "state_dict": {f"text_encoder.{k}": v for k, v in tiny_encoder.state_dict().items()}}, ckpt)
    out = export_text_encoder(ckpt, tmp_path / "from-ckpt", token_budgets=BUDGETS)
    model = AutoModel.from_pretrained(out)
    ids, expected = reference(tiny_encoder, tiny_tokenizer)
    with torch.no_grad():
        assert torch.equal(model.encode_text(ids, (ids != 0).long()), expected)
    # the image space is unknown for a random-init encoder, but its size is not
    assert model.config.image_embedding_space == {"dim": 16, "normalized": True}


def test_an_existing_folder_is_replaced_only_when_it_is_an_export(tiny_encoder, tmp_path):
    out = tmp_path / "model"
    export_text_encoder(tiny_encoder, out)
    check_export_target(out, overwrite=True)  # an earlier export: may be replaced
    with pytest.raises(OutputExistsError, match=f"{out} exists; pass --overwrite to replace it"):
        check_export_target(out, flag="--overwrite")
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("years of work")
    with pytest.raises(OutputExistsError, match="refusing to replace it even with overwrite=True"):
        export_text_encoder(tiny_encoder, thesis, overwrite=True)
    assert [p.name for p in thesis.iterdir()] == ["chapter1.tex"]
    (tmp_path / "file").write_text("a file")
    with pytest.raises(OutputExistsError, match="it is a file"):
        export_text_encoder(tiny_encoder, tmp_path / "file", overwrite=True)
    (tmp_path / "empty").mkdir()
    check_export_target(tmp_path / "empty", overwrite=True)


def test_a_checkpoint_that_is_not_one_of_vlr_train_is_refused_by_name(tmp_path):
    text = tmp_path / "model.pth"
    text.write_text("not weights")
    with pytest.raises(DataFormatError, match=f"{text}: not a PyTorch checkpoint"):
        export_text_encoder(text, tmp_path / "out")
    torch.save({"state_dict": {"w": torch.zeros(1)}}, tmp_path / "other.pth")
    with pytest.raises(DataFormatError, match="field 'meta.vlr_text_encoder'"):
        export_text_encoder(tmp_path / "other.pth", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pth", "other.pth"]


def test_export_is_all_or_nothing(tiny_encoder, tiny_tokenizer, tmp_path):
    out = tmp_path / "model"
    export_text_encoder(tiny_encoder, out)
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        export_text_encoder(tiny_encoder, out)
    # a failing export leaves the earlier folder as it was, and no temporary folder
    big = tiny_tokenizer.__class__.from_pretrained(out)
    big.add_tokens([f"extra{i}" for i in range(5)])
    before = sorted((p.name, p.stat().st_size) for p in out.iterdir())
    with pytest.raises(ValueError, match="the tokenizer has 65 tokens but the text encoder embeds only 60"):
        export_text_encoder(tiny_encoder, out, tokenizer=big, overwrite=True)
    assert sorted((p.name, p.stat().st_size) for p in out.iterdir()) == before
    export_text_encoder(tiny_encoder, out, recipe="C7", overwrite=True)
    assert json.loads((out / "config.json").read_text())["recipe"] == "C7"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_export_refuses_modules_it_has_no_class_for(tmp_path):
    with pytest.raises(TypeError, match="cannot export a Linear: vlr_plugins.hf has transformers classes for "
                                        "BlipTextEncoder"):
        export_text_encoder(torch.nn.Linear(2, 2), tmp_path / "x")


def test_train_then_export_keeps_the_recipe_budgets_and_the_embeddings(tiny_world, tiny_encoder_cfg, tmp_path):
    pytest.importorskip("mmengine")
    import logging

    from mmengine.config import Config
    from mmengine.runner import Runner

    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.recipe import load_recipe
    from vlr_plugins.specs import load_text_encoder

    recipe = load_recipe("paragraph/c5", {
        "model": tiny_encoder_cfg,
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "lr": 1e-3, "warmup_steps": 1, "num_workers": 0},
    })
    try:
        runner = Runner.from_cfg(Config(recipe_to_mmengine_config(recipe, str(tmp_path), log_level="WARNING")))
        runner.train()
    finally:
        logging.getLogger("mmengine").handlers.clear()
    ckpt = tmp_path / "epoch_1.pth"

    out = export_text_encoder(ckpt, tmp_path / "blip-c5", recipe=recipe)
    model = AutoModel.from_pretrained(out, use_safetensors=True)
    assert model.config.recipe == "C5"
    assert model.config.token_budgets == {"caption": 77, "paragraph": 128}
    assert model.config.default_max_tokens == 128

    tok = AutoTokenizer.from_pretrained(out)
    batch = tok(["a red car", "a long paragraph about a red car on a road"], truncation=True,
                max_length=model.config.max_tokens_for("paragraph"), padding=True, return_tensors="pt")
    trained = runner.model.text_encoder.eval()
    with torch.no_grad():
        expected = trained(batch["input_ids"], batch["attention_mask"])
        assert torch.equal(load_text_encoder(ckpt)(batch["input_ids"], batch["attention_mask"]), expected)
        assert torch.equal(model.encode_text(**batch), expected)



def test_export_of_pretrained_blip_names_its_image_space(tiny_tokenizer, tmp_path):
    """``blip:<folder>``: BLIP's own text side (BLIP0), its tokenizer and its image space by default."""
    import torch.nn.functional as F
    from transformers import BlipConfig, BlipForImageTextRetrieval

    text = dict(vocab_size=len(tiny_tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=64, pad_token_id=0, bos_token_id=2, sep_token_id=3)
    vision = dict(hidden_size=48, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2,
                  image_size=32, patch_size=16, initializer_range=0.02)
    torch.manual_seed(0)
    blip = BlipForImageTextRetrieval(BlipConfig(text_config=text, vision_config=vision, image_text_hidden_size=16))
    blip.save_pretrained(tmp_path / "blip")
    tiny_tokenizer.save_pretrained(tmp_path / "blip")

    out = export_text_encoder(f"blip:{tmp_path / 'blip'}", tmp_path / "blip0", token_budgets={"caption": 35})
    model = AutoModel.from_pretrained(out)
    assert model.config.image_embedding_space == {"model": str(tmp_path / "blip"), "projection": "vision_proj",
                                                  "dim": 16, "normalized": True}
    # the cross-attention over BLIP's 48-wide image states came along, frozen
    assert model.text_encoder.encoder.layer[0].crossattention.self.key.in_features == 48
    assert AutoTokenizer.from_pretrained(out).model_max_length == 64
    batch = tiny_tokenizer(TEXTS, truncation=True, max_length=35, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = blip.eval().text_encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])[0]
        expected = F.normalize(blip.text_proj(hidden[:, 0, :]), dim=-1)
        assert torch.equal(model.encode_text(**batch), expected)


def test_named_and_pooled_views_record_their_budgets(tiny_encoder, tmp_path):
    import dataclasses

    from vlr_plugins.recipe import TextView, TextViews, load_recipe

    views = TextViews((TextView(("caption", "paragraph"), 64, "random", 1, name="summary"),
                       TextView(("caption", "positives"), 40, "random", 1)))
    recipe = dataclasses.replace(load_recipe("paragraph/c5"), text_views=views)
    out = export_text_encoder(tiny_encoder, tmp_path / "views", recipe=recipe.to_dict())
    config = json.loads((out / "config.json").read_text())
    assert config["token_budgets"] == {"summary": 64, "caption|positives": 40}
