"""The logit lens of EOL embeddings: the top tokens equal the model's own next-token logits at
the EOL prompt's last position (a plain forward of the whole MLLM), through the API, through
`vlr lens` (printed, JSON, PNG), and for a `vlr` export loaded back."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torchvision")

import torch  # noqa: E402

from _tiny_mllm import clip, save_tiny_qwen2vl, write_clip  # noqa: E402

from vlr_plugins.cli import main  # noqa: E402
from vlr_plugins.mllm import EOLEmbedder, load_eol_embedder  # noqa: E402
from vlr_plugins.mllm.lens import logit_lens, plot_lens  # noqa: E402


def manual_top(model, tokenizer, inputs, k):
    """The reference: the whole model's forward, its logits at the last position, softmax, top k."""
    with torch.no_grad():
        logits = model(**inputs).logits[0, -1].float()
    values, ids = logits.topk(k)
    probs = logits.softmax(-1)
    return [(int(i), tokenizer.decode([int(i)]), float(v), float(probs[i])) for v, i in zip(values, ids)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return save_tiny_qwen2vl(tmp_path_factory.mktemp("lens") / "tiny-qwen2vl", seed=7)


@pytest.mark.parametrize("modality", ["text", "video"])
def test_the_lens_is_the_next_token_distribution_at_the_eol_position(tiny_vl, modality):
    model, processor = tiny_vl
    emb = EOLEmbedder(model=model, processor=processor, prompt="care", num_frames=4)
    item = "A chef cuts tomatoes in a kitchen." if modality == "text" else clip(4, seed=3)
    result = logit_lens(emb, modality, item, top_k=8)
    expected = manual_top(model, emb.tokenizer, emb.inputs(modality, [item]), 8)
    assert [(t.id, t.token) for t in result.top] == [(i, s) for i, s, _, _ in expected]
    assert [t.rank for t in result.top] == list(range(1, 9))
    torch.testing.assert_close(torch.tensor([t.logit for t in result.top]), torch.tensor([e[2] for e in expected]),
                               atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.tensor([t.probability for t in result.top]),
                               torch.tensor([e[3] for e in expected]), atol=1e-6, rtol=0)
    assert result.prompt.endswith("<|im_start|>assistant\n")
    assert result.table().splitlines()[1].split()[0] == "1"
    with pytest.raises(ValueError, match="top_k"):
        logit_lens(emb, modality, item, top_k=0)


def test_vlr_lens_prints_writes_and_plots_the_same_tokens(saved, tmp_path, capsys):
    pytest.importorskip("av")
    video = write_clip(tmp_path / "clip.mkv", num_frames=8)
    out = tmp_path / "lens"
    assert main(["lens", "--model", str(saved), "--text", "a dog runs", "--video", video, "--top-k", "5",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    got = json.loads((out / "lens.json").read_text())
    assert [(r["modality"], r["model"]) for r in got] == [("text", str(saved)), ("video", str(saved))]
    assert {r["model_dtype"] for r in got} == {"float32"}  # auto: the folder's own
    emb = EOLEmbedder(saved, prompt="care")
    for record, (modality, item) in zip(got, [("text", "a dog runs"), ("video", video)]):
        expected = manual_top(emb.model, emb.tokenizer, emb.inputs(modality, [item]), 5)
        assert [(t["id"], t["token"]) for t in record["top"]] == [(i, s) for i, s, _, _ in expected]
        for t in record["top"]:
            assert repr(t["token"]) in printed
    assert (out / "lens.png").stat().st_size > 0


def test_an_mllm_spec_is_read_as_eval_reads_it(saved, tmp_path):
    """``--model mllm:FOLDER:PROMPT`` (the spec ``vlr eval`` takes) is the folder under that
    prompt: the same tokens as ``--model FOLDER --prompt PROMPT``."""
    runs = {}
    for name, argv in (("spec", ["--model", f"mllm:{saved}:e5v"]), ("folder", ["--model", str(saved),
                                                                              "--prompt", "e5v"])):
        out = tmp_path / name
        assert main(["lens", *argv, "--text", "a dog runs", "--top-k", "5", "--out", str(out), "--no-plot"]) == 0
        runs[name] = json.loads((out / "lens.json").read_text())
    assert [t["id"] for t in runs["spec"][0]["top"]] == [t["id"] for t in runs["folder"][0]["top"]]
    assert runs["spec"][0]["prompt"] == runs["folder"][0]["prompt"]
    care = logit_lens(EOLEmbedder(saved, prompt="care"), "text", "a dog runs", top_k=5)
    assert runs["spec"][0]["prompt"] != care.prompt  # the spec's prompt was used, not the default


def test_an_export_brings_its_own_prompt_to_the_lens(saved, tmp_path):
    from vlr_plugins.hf.export_eol import export_eol_embedder

    emb = EOLEmbedder(saved, prompt="e5v")
    folder = export_eol_embedder(emb, tmp_path / "export")
    again = load_eol_embedder(folder)
    assert again.prompt.text == emb.prompt.text and again.prompt.name == "e5v"
    a = logit_lens(emb, "text", "two people sit near a window", top_k=6)
    b = logit_lens(again, "text", "two people sit near a window", top_k=6)
    assert [t.id for t in a.top] == [t.id for t in b.top] and a.prompt == b.prompt


def test_the_plot_has_one_panel_per_result(tiny_vl, tmp_path):
    pytest.importorskip("matplotlib")
    model, processor = tiny_vl
    emb = EOLEmbedder(model=model, processor=processor)
    results = [logit_lens(emb, "text", s, top_k=3) for s in ("one", "two")]
    path = plot_lens(results, tmp_path / "p.png", labels=["base", "care"])
    from PIL import Image

    width, height = Image.open(path).size
    assert width > height  # two panels side by side
