"""MVC end to end on tiny towers and test-made videos: ``vlr train mvc/mvc_b`` -> ``vlr
precompute --videos --encoder vlr:CHECKPOINT`` (the trained video tower) -> ``vlr eval`` on
the held-out clips -> ``vlr export`` -> ``AutoModel.from_pretrained`` gives the trained text
encoder's embeddings in both caption views."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from _mvc_world import mvc_run, mvc_world

pytest.importorskip("mmengine")
pytest.importorskip("av")

from vlr_plugins.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """The trained checkpoint, the store of the held-out clips, the eval results, the export."""
    world, work = mvc_world(), mvc_run()
    ckpt = str(work / "epoch_1.pth")
    out = tmp_path_factory.mktemp("mvc_e2e")
    store = out / "store"
    assert main(["precompute", "--videos", world["eval_videos"], "--encoder", f"vlr:{ckpt}", "--out", str(store),
                 "--frames", "4", "--sampler", "middle", "--workers", "0"]) == 0
    bench = out / "bench.yaml"
    bench.write_text(yaml.safe_dump({"benchmarks": [
        {"name": f"world-{split}", "reader": "retrieval_jsonl", "path": world[f"eval_{split}"],
         "item_embeddings": str(store), "max_tokens": 64} for split in ("summary", "detailed")]}))
    assert main(["eval", "--model", ckpt, "--benchmarks", str(bench), "--protocol", "none",
                 "--out", str(out / "results")]) == 0
    assert main(["export", ckpt, str(out / "export")]) == 0
    return {"world": world, "ckpt": ckpt, "store": store, "results": out / "results" / "results.json",
            "export": out / "export"}


def test_precompute_uses_the_trained_video_tower(chain):
    """The store holds the trained tower's embeddings of the clips (rebuilt by hand from the
    checkpoint: its recorded architecture and its ``video_encoder.`` weights)."""
    from vlr_plugins.data import EmbeddingStore, sample_frames, video_transform
    from vlr_plugins.registry import MODELS

    ckpt = torch.load(chain["ckpt"], map_location="cpu", weights_only=True)
    cfg = dict(ckpt["meta"]["vlr_video_encoder"])
    tower = MODELS.get(cfg.pop("type"))(**cfg)
    tower.load_state_dict({k[len("video_encoder."):]: v for k, v in ckpt["state_dict"].items()
                           if k.startswith("video_encoder.")})
    tower.eval()
    store = EmbeddingStore(chain["store"])
    videos = [json.loads(line) for line in open(chain["world"]["eval_videos"])]
    root = chain["world"]["eval_videos"].rsplit("/", 1)[0]
    transform = video_transform(False, tower.image_size, tower.image_mean, tower.image_std)
    with torch.no_grad():
        for v in videos[:2]:
            frames = transform(sample_frames(f"{root}/{v['path']}", 4, "middle"))
            want = tower.encode_video(frames[None])[0]
            assert torch.allclose(store.get([v["id"]])[0].float(), want, atol=1e-4), v["id"]


def test_eval_scores_text_to_video_with_the_trained_text_encoder(chain):
    """vlr eval's T2I R@1 equals R@1 computed by hand from the store and the text encoder."""
    from vlr_plugins.data import EmbeddingStore
    from vlr_plugins.specs import load_text_encoder

    results = json.loads(chain["results"].read_text())
    encoder = load_text_encoder(chain["ckpt"]).eval()
    store = EmbeddingStore(chain["store"])
    for split in ("summary", "detailed"):
        rows = [json.loads(line) for line in open(chain["world"][f"eval_{split}"])]
        ids = [r["id"] for r in rows]
        videos = store.get(ids).float()
        with torch.no_grad():
            texts = encoder.encode_text([r["texts"][0] for r in rows])
        hits = (texts @ videos.T).argmax(1) == torch.arange(len(ids))
        assert results["recall"][f"world-{split}"]["t2i_r1"] == pytest.approx(100 * hits.float().mean().item())


def test_export_loads_with_automodel_and_matches_both_views(chain):
    from transformers import AutoModel, AutoTokenizer

    from vlr_plugins.specs import load_text_encoder

    model = AutoModel.from_pretrained(str(chain["export"]), trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(chain["export"]))
    trained = load_text_encoder(chain["ckpt"]).eval()
    texts = ["a cyan bar stays in place", "The video shows a navy background. A white bar moves left."]
    batch = tokenizer(texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        for view in ("summary", "detailed"):
            exported = model.encode_text(**batch, view=view)
            want = trained.encode_text(texts, view=view)
            assert torch.allclose(exported, want, atol=1e-5), view
        assert not torch.allclose(model.encode_text(**batch, view="summary"),
                                  model.encode_text(**batch, view="detailed"))
