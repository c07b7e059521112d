"""`vlr precompute` and `vlr eval` with an MLLM embedder named ``mllm:FOLDER:PROMPT``, end to
end: a tiny random Qwen2-VL saved as a transformers folder, tiny CaReBench videos -> the video
store written by ``vlr precompute --encoder mllm:...`` -> ``vlr eval --model mllm:...`` -> recall
equal to a plain reference from EOLEmbedder's own encode_video / encode_text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("av")
pytest.importorskip("torchvision")
pytest.importorskip("transformers")

from _reference import reference_ranks  # noqa: E402
from _tiny_mllm import save_tiny_qwen2vl  # noqa: E402
from _video_world import CAREBENCH, embed_videos, write_carebench  # noqa: E402

from vlr_plugins.cli import main  # noqa: E402
from vlr_plugins.data import EmbeddingStore  # noqa: E402
from vlr_plugins.data.readers import read_carebench  # noqa: E402
from vlr_plugins.mllm import EOLEmbedder  # noqa: E402

FRAMES, SAMPLER = 4, "uniform"
KINDS = ("general", "spatial", "temporal")


def reference_recall(items: torch.Tensor, texts: torch.Tensor, owner: torch.Tensor) -> dict[str, float]:
    """R@1/5/10 both directions from the full cosine matrix, ranked by (-score, index)."""
    i2t, t2i = reference_ranks(items, texts, owner)
    return {f"{direction}_r{k}": 100.0 * sum(r < k for r in ranks) / len(ranks)
            for direction, ranks in (("i2t", i2t), ("t2i", t2i)) for k in (1, 5, 10)}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("mllm-world")
    folder = save_tiny_qwen2vl(root / "tiny-qwen2vl", seed=1)
    care, videos = write_carebench(root)
    store = root / "stores" / "care"
    bench = root / "care.yaml"
    bench.write_text("benchmarks:\n"
                     f"  - {{name: carebench, reader: carebench, path: {care}, item_embeddings: {store},\n"
                     f"     text_kinds: [general, spatial, temporal], args: {{media_root: {videos_dir(root)}}}}}\n")
    return {"root": root, "folder": folder, "bench": bench, "store": store, "videos": videos,
            "set": read_carebench(care)}


def videos_dir(root: Path) -> Path:
    return root / "CaReBench" / "videos"


def test_precompute_then_eval_scores_the_mllm_as_its_own_encoders_do(world, tmp_path):
    spec = f"mllm:{world['folder']}:care"
    assert main(["precompute", "--benchmarks", str(world["bench"]), "--encoder", spec, "--frames", str(FRAMES),
                 "--sampler", SAMPLER, "--out", str(world["store"]), "--workers", "0", "--batch-size", "2"]) == 0

    # the reference: the same folder and prompt loaded directly, the same frames, the same texts
    embedder = EOLEmbedder(world["folder"], prompt="care").eval()
    video_emb = embed_videos(world["videos"], embedder, FRAMES, SAMPLER)
    written = EmbeddingStore(world["store"])
    assert written.meta["encoder"] == spec and written.meta["frames"] == FRAMES
    for item_id in CAREBENCH:
        torch.testing.assert_close(written.get([item_id])[0], video_emb[item_id], atol=1e-5, rtol=0)

    out = tmp_path / "out"
    assert main(["eval", "--model", spec, "--benchmarks", str(world["bench"]), "--protocol", "none",
                 "--label", "tiny-care", "--out", str(out)]) == 0
    report = json.loads((out / "results.json").read_text())
    assert set(report["recall"]) == {f"carebench/{k}" for k in KINDS}
    for kind in KINDS:
        rs = world["set"].with_texts(kind)
        items = torch.stack([video_emb[i] for i in rs.item_ids])
        texts = embedder.encode_text(list(rs.texts))
        for metric, value in reference_recall(items, texts, rs.text_owner).items():
            assert report["recall"][f"carebench/{kind}"][metric] == pytest.approx(value), (kind, metric)


def test_an_export_less_spec_takes_the_care_prompt_and_a_named_prompt_is_used(world):
    from vlr_plugins.specs import load_mllm_spec, split_mllm_spec

    assert split_mllm_spec(f"mllm:{world['folder']}") == (str(world["folder"]), None)
    assert split_mllm_spec(f"mllm:{world['folder']}:e5v") == (str(world["folder"]), "e5v")
    assert split_mllm_spec("mllm:Qwen/Qwen2-VL-7B-Instruct:care") == ("Qwen/Qwen2-VL-7B-Instruct", "care")
    assert load_mllm_spec(f"mllm:{world['folder']}").prompt.name == "care"
    e5v = load_mllm_spec(f"mllm:{world['folder']}:e5v")
    assert e5v.prompt.name == "e5v" and not e5v.training


def test_an_export_brings_its_own_prompt(world, tmp_path):
    from vlr_plugins.hf import export_eol_embedder
    from vlr_plugins.specs import load_mllm_spec

    out = export_eol_embedder(EOLEmbedder(world["folder"], prompt="e5v"), tmp_path / "e5v-tiny")
    assert load_mllm_spec(f"mllm:{out}").prompt.text == load_mllm_spec(f"mllm:{world['folder']}:e5v").prompt.text
    assert load_mllm_spec(f"mllm:{out}:care").prompt.name == "care"


def test_precompute_images_writes_the_rows_of_encode_image(world, tmp_path):
    from PIL import Image

    folder = tmp_path / "images"
    folder.mkdir()
    g = torch.Generator().manual_seed(0)
    names = ["cat", "dog", "sea"]
    for i, name in enumerate(names):
        pixels = torch.randint(0, 256, (40 + 8 * i, 56, 3), generator=g, dtype=torch.uint8)
        Image.fromarray(pixels.numpy()).save(folder / f"{name}.png")
    spec = f"mllm:{world['folder']}:e5v"
    store = tmp_path / "store"
    assert main(["precompute", "--images", str(folder), "--encoder", spec, "--out", str(store)]) == 0
    embedder = EOLEmbedder(world["folder"], prompt="e5v").eval()
    written = EmbeddingStore(store)
    assert written.meta["encoder"] == spec and written.dim == embedder.embedding_dim
    for name in names:
        with Image.open(folder / f"{name}.png") as im:
            expected = embedder.encode_image([im.convert("RGB")])[0]
        torch.testing.assert_close(written.get([name])[0], expected, atol=1e-5, rtol=0)


def test_model_dtype_loads_a_bf16_folder_in_float32_and_is_recorded(world, tmp_path, capsys):
    folder = save_tiny_qwen2vl(tmp_path / "tiny-bf16", seed=1, dtype=torch.bfloat16)
    spec = f"mllm:{folder}:care"
    store = tmp_path / "store"
    assert main(["precompute", "--benchmarks", str(world["bench"]), "--encoder", spec, "--frames", str(FRAMES),
                 "--sampler", SAMPLER, "--out", str(store), "--workers", "0", "--batch-size", "2",
                 "--model-dtype", "float32"]) == 0
    assert "warning" not in capsys.readouterr().err  # float32 asked for: nothing to warn of

    # the reference: the folder loaded directly in float32
    embedder = EOLEmbedder(folder, prompt="care", dtype="float32").eval()
    video_emb = embed_videos(world["videos"], embedder, FRAMES, SAMPLER)
    written = EmbeddingStore(store)
    assert written.meta["model_dtype"] == "float32" and written.meta["encoder"] == spec
    for item_id in CAREBENCH:
        torch.testing.assert_close(written.get([item_id])[0], video_emb[item_id], atol=1e-5, rtol=0)
    resume = ["precompute", "--benchmarks", str(world["bench"]), "--encoder", spec, "--frames", str(FRAMES),
              "--sampler", SAMPLER, "--out", str(store), "--workers", "0", "--resume"]
    assert main([*resume, "--model-dtype", "float32"]) == 0  # the same dtype: resumed (nothing left to add)
    assert main([*resume, "--model-dtype", "auto"]) == 2  # auto is this folder's bfloat16: refused
    assert "model_dtype: 'float32' there, 'bfloat16' now" in capsys.readouterr().err

    for asked, recorded in (("float32", "float32"), ("auto", "bfloat16")):
        out = tmp_path / f"eval-{asked}"
        assert main(["eval", "--model", spec, "--benchmarks", str(world["bench"]), "--protocol", "none",
                     "--model-dtype", asked, "--out", str(out)]) == 0
        report = json.loads((out / "results.json").read_text())
        assert report["model"] == spec and report["model_dtype"] == recorded
        err = capsys.readouterr().err
        assert ("--model-dtype float32" in err) == (asked == "auto")  # bf16 on a CPU under auto is warned of
