"""`vlr export`: a training checkpoint becomes a Hub-ready folder whose card comes from the run."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("mmengine")
from vlr_plugins.cli import main  # noqa: E402


def test_export_writes_model_card_and_results_and_loads_back(tiny_checkpoint, tiny_world, tmp_path, capsys):
    import torch
    from huggingface_hub import ModelCard
    from transformers import AutoModel

    import vlr_plugins.hf  # noqa: F401  (registers the Auto classes)
    from vlr_plugins.specs import load_text_encoder

    results = tmp_path / "results.json"
    results.write_text(json.dumps({"recall": {"short": {"i2t_r1": 12.5, "t2i_r1": 6.25, "i2t_r5": 50.0,
                                                        "t2i_r5": 30.0}}, "budgets": {"short": 77}}))
    out = tmp_path / "c5-tiny"
    assert main(["export", str(tiny_checkpoint), str(out), "--eval", str(results), "--repo-id", "me/c5-tiny"]) == 0
    assert "with model card" in capsys.readouterr().out
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "README.md", "eval_results.json", "modeling_vlr.py"} <= names
    assert not any(n.endswith((".bin", ".pt", ".pth", ".pkl")) for n in names)
    card = ModelCard.load(out / "README.md")
    assert {(r.dataset_name, r.metric_type, r.metric_value) for r in card.data.eval_results} >= {("short", "i2t-r1", 12.5)}
    assert "recipe **C5**" in card.text and "me/c5-tiny" in card.text
    assert json.loads((out / "eval_results.json").read_text())["recall"]["short"]["t2i_r1"] == 6.25
    config = json.loads((out / "config.json").read_text())
    assert config["recipe"] == "C5" and config["token_budgets"] == {"caption": 77, "paragraph": 128}

    model = AutoModel.from_pretrained(out)
    encoder = load_text_encoder(tiny_checkpoint)
    ids = torch.randint(5, 40, (2, 12))
    with torch.no_grad():
        assert torch.equal(model.get_text_features(ids, torch.ones_like(ids)), encoder(ids, torch.ones_like(ids)))


def test_export_refuses_to_overwrite_and_reports_a_bad_eval_file(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "x"
    out.mkdir()
    assert main(["export", str(tiny_checkpoint), str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["export", str(tiny_checkpoint), str(tmp_path / "y"), "--eval", str(bad)]) == 2
    assert "results.json of `vlr eval`" in capsys.readouterr().err and not (tmp_path / "y").exists()
