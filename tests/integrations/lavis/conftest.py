"""Fixtures of the LAVIS suite, which runs in the LAVIS environment (docs/lavis.md).

LAVIS' BLIP builds ``bert-base-uncased``'s tokenizer from the Hub by name. With
``HF_HUB_OFFLINE=1`` the tests supply it through a private Hugging Face cache: a vocabulary
made from the synthetic world's words, filed under ``models--bert-base-uncased`` the way
the Hub client stores a download. The cache location is set before transformers is
imported (its cache constants are read at import).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

HAVE_LAVIS = importlib.util.find_spec("lavis") is not None

_HF_HOME = Path(tempfile.mkdtemp(prefix="vlr-lavis-hf-"))
if HAVE_LAVIS:
    os.environ.update(HF_HOME=str(_HF_HOME), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    os.environ.pop("TRANSFORMERS_CACHE", None)
    os.environ.pop("HUGGINGFACE_HUB_CACHE", None)
    if "transformers.utils.hub" in sys.modules:  # imported by an earlier conftest: point it here
        sys.modules["transformers.utils.hub"].TRANSFORMERS_CACHE = str(_HF_HOME / "hub")

TINY_WIDTH = 32


@pytest.fixture(scope="session")
def bert_cache(tiny_world) -> Path:
    """``bert-base-uncased`` in the private HF cache: the world's WordPiece vocabulary."""
    vocab = tiny_world["object"].tokenizer().get_vocab()
    repo = _HF_HOME / "hub" / "models--bert-base-uncased"
    commit = "0" * 40
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "vocab.txt").write_text("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])))
    (snap / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "model_max_length": 512}))
    (snap / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": len(vocab)}))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snap


@pytest.fixture(scope="session")
def tiny_med_config(tmp_path_factory, bert_cache) -> str:
    """A 2-layer, 32-wide BLIP text tower (LAVIS' med config format), 160 positions."""
    n_vocab = len((bert_cache / "vocab.txt").read_text().splitlines()) + 2  # + [DEC], [ENC]
    cfg = {
        "architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
        "attention_probs_dropout_prob": 0.0, "hidden_dropout_prob": 0.0, "initializer_range": 0.02,
        "hidden_size": TINY_WIDTH, "intermediate_size": 64, "num_attention_heads": 2, "num_hidden_layers": 2,
        "layer_norm_eps": 1e-12, "max_position_embeddings": 160, "pad_token_id": 0,
        "add_type_embeddings": False, "vocab_size": n_vocab, "encoder_width": TINY_WIDTH,
        "add_cross_attention": True,
    }
    path = tmp_path_factory.mktemp("med") / "tiny_med_config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


@pytest.fixture(scope="session")
def tiny_model_options(tiny_med_config) -> list[str]:
    """LAVIS ``--options`` that shrink ``blip_retrieval_textonly`` to a CPU-sized random model."""
    return [
        f"model.med_config_path={tiny_med_config}",
        f"model.vit.width={TINY_WIDTH}", "model.vit.depth=1", "model.vit.heads=2", "model.vit.patch_size=16",
        "model.image_size=32", f"model.embed_dim={TINY_WIDTH}", "model.finetuned=null",
        "model.pretrained=null",
    ]


@pytest.fixture
def write_run_config(tmp_path):
    """``write(datasets=None, **run)``: the shipped ``lavis/c5`` as a small CPU run config,
    with extra ``datasets`` entries and ``run`` keys; returns the written file's path."""
    import yaml

    from vlr_plugins.recipe import list_recipes

    def write(datasets: dict | None = None, **run) -> str:
        cfg = yaml.safe_load(list_recipes()["lavis/c5"].read_text())
        cfg["datasets"].update(datasets or {})
        cfg["run"].update({"device": "cpu", "distributed": False, "batch_size_train": 8, "batch_size_eval": 8,
                           "num_workers": 0, "test_splits": ["test"], "warmup_steps": 2, "init_lr": 1e-3,
                           "output_dir": str(tmp_path / "out"), "progress": False, **run})
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return str(path)

    return write
