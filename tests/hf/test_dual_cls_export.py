"""The dual-CLS member of the family: export a DualCLSTextEncoder, load it back with AutoModel (with
vlr-plugins, and without it through the folder's own remote code) and get the same embeddings per view."""

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

from vlr_plugins.hf import (  # noqa: E402
    VlrDualCLSTextEncoderConfig,
    VlrDualCLSTextEncoderModel,
    export_text_encoder,
)
from vlr_plugins.text import DualCLSTextEncoder  # noqa: E402

VIDEO_WIDTH = 24
TEXTS = ["A red car near the beach.", "two young people walk on the street with a black dog",
         "an old man rides a horse"]
REMOTE_FILES = {"modeling_vlr_dual_cls.py", "configuration_vlr_dual_cls.py", "modeling_vlr.py", "configuration_vlr.py"}

# Runs in a fresh interpreter where `import vlr_plugins` fails, as on a machine without it.
CHILD = textwrap.dedent("""
    import json, sys
    sys.modules["vlr_plugins"] = None  # any import of vlr_plugins, or of a submodule, now raises
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder, texts = sys.argv[1], json.loads(sys.argv[2])
    model = AutoModel.from_pretrained(folder, trust_remote_code=True, use_safetensors=True)
    tok = AutoTokenizer.from_pretrained(folder)
    batch = tok(texts, truncation=True, max_length=model.config.max_tokens_for(), padding=True, return_tensors="pt")
    video = torch.linspace(-1, 1, len(texts) * 5 * model.config.video_width).view(len(texts), 5, -1)
    with torch.no_grad():
        emb = {view: model.encode_text(**batch, view=view).double().tolist() for view in model.config.views}
        default = model.get_text_features(**batch)
        hidden = model(**batch, view="detailed").last_hidden_state
        fused = model.fuse(hidden, batch["attention_mask"], video)
    print("\\nREPORT " + json.dumps(dict(
        cls=f"{type(model).__module__}.{type(model).__name__}",
        emb=emb,
        default_is_summary=emb["summary"] == default.double().tolist(),
        fused=fused.double().tolist(),
        tied=model.mlm_head.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight,
        vlr_modules=sorted(m for m, v in sys.modules.items() if m.startswith("vlr_plugins") and v is not None),
    )))
""")


def bert_config(tok, layers: int) -> dict:
    # initializer_range 0.5: random weights that tell texts (and CLS tokens) apart clearly
    return dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=160, initializer_range=0.5,
                pad_token_id=tok.pad_token_id)


@pytest.fixture(scope="module")
def bert_dir(tiny_tokenizer, tmp_path_factory):
    """A tiny pretrained BERT (with its MLM head) and its tokenizer, saved like a Hub checkpoint."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("bert")
    BertForMaskedLM(BertConfig(**bert_config(tiny_tokenizer, layers=3))).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


def trained(encoder: DualCLSTextEncoder) -> DualCLSTextEncoder:
    """What training does to the views' CLS embeddings, in one random step: they part."""
    with torch.no_grad():
        encoder.cls_embeddings[-1] += torch.randn(encoder.cls_embeddings.shape[1],
                                                  generator=torch.Generator().manual_seed(1))
    return encoder.eval()


@pytest.fixture(scope="module")
def encoder(bert_dir):
    torch.manual_seed(0)
    return trained(DualCLSTextEncoder(pretrained=str(bert_dir), embed_dim=16, num_fusion_layers=1,
                                      video_width=VIDEO_WIDTH))


@pytest.fixture(scope="module")
def exported(encoder, tmp_path_factory):
    return export_text_encoder(encoder, tmp_path_factory.mktemp("export") / "tiny-mvc")


def reference(encoder, tokenizer, view):
    with torch.no_grad():
        return encoder.encode_text(TEXTS, view=view)


def test_folder_holds_safetensors_config_code_and_tokenizer(exported):
    names = {p.name for p in exported.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} | REMOTE_FILES <= names
    assert not [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl"))]
    config = json.loads((exported / "config.json").read_text())
    assert config["model_type"] == "vlr_dual_cls_text_encoder"
    assert config["auto_map"] == {"AutoConfig": "configuration_vlr_dual_cls.VlrDualCLSTextEncoderConfig",
                                  "AutoModel": "modeling_vlr_dual_cls.VlrDualCLSTextEncoderModel"}
    assert {k: config[k] for k in ("views", "default_view", "dual_cls", "num_fusion_layers", "video_width",
                                   "embed_dim", "default_max_tokens")} == {
        "views": ["summary", "detailed"], "default_view": "summary", "dual_cls": True, "num_fusion_layers": 1,
        "video_width": VIDEO_WIDTH, "embed_dim": 16, "default_max_tokens": 128}
    assert config["text_config"]["num_hidden_layers"] == 3
    # a pretrained BERT names no image (or video) space, unlike a BLIP checkpoint: only its size is known
    assert config["image_embedding_space"] == {"dim": 16, "normalized": True}
    for name in REMOTE_FILES:
        code = (exported / name).read_text()
        assert "import vlr_plugins" not in code and "from vlr_plugins" not in code


def test_automodel_gives_the_encoders_embeddings_for_both_views(encoder, tiny_tokenizer, exported):
    tok = AutoTokenizer.from_pretrained(exported)
    for kwargs in ({}, {"trust_remote_code": True}):  # the registered class wins over the folder's copy
        model = AutoModel.from_pretrained(exported, use_safetensors=True, **kwargs)
        assert type(model) is VlrDualCLSTextEncoderModel
        assert model.mlm_head.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
        batch = tok(TEXTS, truncation=True, max_length=model.config.max_tokens_for(), padding=True,
                    return_tensors="pt")
        with torch.no_grad():
            emb = {view: model.encode_text(**batch, view=view) for view in ("summary", "detailed")}
            for view, got in emb.items():
                assert torch.equal(got, reference(encoder, tiny_tokenizer, view)), view
            assert (emb["summary"] - emb["detailed"]).norm(dim=-1).min() > 1e-3
            assert torch.equal(model.get_text_features(**batch), emb["summary"])  # the default view
            mixed = model(**batch, view_ids=torch.tensor([1, 0, 1])).text_embeds
            assert torch.equal(mixed, encoder(batch["input_ids"], batch["attention_mask"], torch.tensor([1, 0, 1])))


def test_fusion_layers_and_mlm_head_come_along(encoder, exported):
    model = AutoModel.from_pretrained(exported)
    ids = torch.randint(5, 60, (2, 9), generator=torch.Generator().manual_seed(2))
    ids[:, 0] = 2
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    video = torch.randn(2, 5, VIDEO_WIDTH, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = encoder.encode(ids, mask, torch.tensor([0, 1]))
        hidden = model(ids, mask, view_ids=torch.tensor([0, 1])).last_hidden_state
        assert torch.equal(hidden, out.hidden)
        fused = model.fuse(hidden, mask, video)
        assert torch.equal(fused, encoder.fuse(out.hidden, mask, video))
        assert torch.equal(model.mlm_logits(fused), encoder.mlm_logits(fused))


@pytest.fixture(scope="module")
def without_vlr_plugins(exported, tmp_path_factory):
    """What a fresh interpreter that cannot import vlr_plugins makes of the exported folder."""
    root = tmp_path_factory.mktemp("elsewhere")
    folder = root / "tiny-mvc"
    shutil.copytree(exported, folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(root / "modules"), TOKENIZERS_PARALLELISM="false")
    # -I: no PYTHONPATH, no user site, not even the working directory on sys.path
    proc = subprocess.run([sys.executable, "-I", "-c", CHILD, str(folder), json.dumps(TEXTS)],
                          cwd=root, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.rsplit("\nREPORT ", 1)[1])


def test_remote_code_gives_the_same_embeddings_without_vlr_plugins(encoder, tiny_tokenizer, without_vlr_plugins):
    report = without_vlr_plugins
    assert report["vlr_modules"] == []
    assert report["cls"].startswith("transformers_modules.")
    assert report["cls"].endswith("modeling_vlr_dual_cls.VlrDualCLSTextEncoderModel")
    for view in ("summary", "detailed"):
        got = torch.tensor(report["emb"][view], dtype=torch.float64).float()
        assert torch.equal(got, reference(encoder, tiny_tokenizer, view)), view
    assert report["default_is_summary"] and report["tied"]
    batch = tiny_tokenizer(TEXTS, truncation=True, max_length=128, padding=True, return_tensors="pt")
    video = torch.linspace(-1, 1, len(TEXTS) * 5 * VIDEO_WIDTH).view(len(TEXTS), 5, -1)
    with torch.no_grad():
        hidden = encoder.encode(batch["input_ids"], batch["attention_mask"], torch.ones(3, dtype=torch.long)).hidden
        expected = encoder.fuse(hidden, batch["attention_mask"], video)
    assert torch.equal(torch.tensor(report["fused"], dtype=torch.float64).float(), expected)


def test_a_single_cls_encoder_exports_as_one(tiny_tokenizer, tiny_tokenizer_dir, tmp_path):
    torch.manual_seed(0)
    single = trained(DualCLSTextEncoder(config=bert_config(tiny_tokenizer, layers=2), embed_dim=16, num_fusion_layers=1, dual_cls=False,
                                        tokenizer=str(tiny_tokenizer_dir)))
    out = export_text_encoder(single, tmp_path / "single", token_budgets={"summary": 64, "detailed": 128})
    model = AutoModel.from_pretrained(out)
    assert model.config.dual_cls is False and model.cls_embeddings.shape == (1, 32)
    assert model.config.default_max_tokens == 128 and model.config.max_tokens_for("summary") == 64
    batch = tiny_tokenizer(TEXTS, truncation=True, max_length=64, padding=True, return_tensors="pt")
    with torch.no_grad():
        summary, detailed = (model.encode_text(**batch, view=view) for view in ("summary", "detailed"))
        assert torch.equal(summary, detailed)
        assert torch.equal(summary, single(batch["input_ids"], batch["attention_mask"]))


def test_the_config_round_trips_through_save_pretrained(tiny_tokenizer, tmp_path):
    from transformers import AutoConfig, BertConfig

    config = VlrDualCLSTextEncoderConfig(text_config=bert_config(tiny_tokenizer, layers=3), embed_dim=16,
                                         num_fusion_layers=1, video_width=VIDEO_WIDTH, dual_cls=False,
                                         default_view="detailed", token_budgets={"summary": 64, "detailed": 128})
    config.save_pretrained(tmp_path)
    back = AutoConfig.from_pretrained(tmp_path)
    assert type(back) is VlrDualCLSTextEncoderConfig
    assert {**back.to_dict(), "_name_or_path": ""} == {**config.to_dict(), "_name_or_path": ""}
    assert isinstance(back.text_config, BertConfig) and back.text_config.num_hidden_layers == 3
    assert (back.num_text_layers, back.video_width, back.dual_cls, back.view_index()) == (2, VIDEO_WIDTH, False, 1)
    assert back.max_positions == 160 and back.max_tokens_for() == 128
    with pytest.raises(ValueError, match=r"token budgets \{'detailed': 200, 'default_max_tokens': 200\} exceed "
                                         r"the text encoder's 160 positions"):
        VlrDualCLSTextEncoderConfig(text_config=bert_config(tiny_tokenizer, layers=3), num_fusion_layers=1,
                                    token_budgets={"detailed": 200})


def test_config_and_view_arguments_are_checked(encoder, exported):
    with pytest.raises(ValueError, match=r"num_fusion_layers must be an int in 0..11, found 12"):
        VlrDualCLSTextEncoderConfig(num_fusion_layers=12)
    with pytest.raises(ValueError, match="default_view 'long' is not one of the views"):
        VlrDualCLSTextEncoderConfig(default_view="long")
    model = AutoModel.from_pretrained(exported)
    ids = torch.full((2, 5), 7)
    with pytest.raises(ValueError, match="unknown view 'long'; the views are summary, detailed"):
        model.encode_text(ids, view="long")
    with pytest.raises(TypeError, match="give view= or view_ids=, not both"):
        model(ids, view="summary", view_ids=torch.zeros(2, dtype=torch.long))
    with pytest.raises(TypeError, match="comes from the encoder"):
        VlrDualCLSTextEncoderModel.from_vlr_encoder(encoder, dual_cls=False)


def test_vlr_export_of_a_dual_cls_checkpoint_writes_its_card(encoder, tiny_tokenizer, tmp_path, capsys):
    from huggingface_hub import ModelCard

    from vlr_plugins.cli import main
    from vlr_plugins.recipe import load_recipe

    # the layout WeightsOnlyCheckpointHook writes, with the recipe beside the architecture
    ckpt = tmp_path / "epoch_20.pth"
    torch.save({"meta": {"vlr_text_encoder": encoder.to_config(), "vlr_recipe": load_recipe("paragraph/c5").to_dict()},
                "state_dict": {f"text_encoder.{k}": v for k, v in encoder.state_dict().items()}}, ckpt)
    out = tmp_path / "mvc-tiny"
    assert main(["export", str(ckpt), str(out), "--repo-id", "me/mvc-tiny"]) == 0
    assert "with model card" in capsys.readouterr().out
    card = ModelCard.load(out / "README.md")
    assert "a BERT text encoder (2 text + 1 fusion layers) with one CLS token per caption view" in card.text
    assert "BLIP text encoder" not in card.text
    model = AutoModel.from_pretrained(out)
    assert type(model) is VlrDualCLSTextEncoderModel
    batch = tiny_tokenizer(TEXTS, truncation=True, max_length=128, padding=True, return_tensors="pt")
    with torch.no_grad():
        for view in ("summary", "detailed"):
            assert torch.equal(model.encode_text(**batch, view=view), reference(encoder, tiny_tokenizer, view))
