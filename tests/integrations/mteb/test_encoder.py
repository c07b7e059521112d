"""An export as an MTEB encoder, scored by ``mteb.evaluate`` on small retrieval tasks built here (no download).

MTEB's recall@k of a direction with one positive per query equals ``vlr eval``'s metric
engine (:func:`vlr_plugins.eval.retrieval_recall`) on the export's own embeddings, and its
nDCG@10 equals a brute-force nDCG written below. MTEB rounds its scores to 5 decimals.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from _mteb_local import local_task, scores_of

mteb = pytest.importorskip("mteb")

from vlr_plugins.eval import retrieval_recall  # noqa: E402
from vlr_plugins.integrations.mteb import VlrExportEncoder  # noqa: E402

ROUNDING = 1e-5
COLOURS = "red green blue white black small large old young".split()


def brute_ndcg_at_10(scores: torch.Tensor, relevant: dict[int, list[int]]) -> float:
    """Mean over queries of DCG@10 / ideal DCG@10, binary gains, documents ranked by score."""
    total = 0.0
    for q, docs in relevant.items():
        order = sorted(range(scores.shape[1]), key=lambda d: -float(scores[q, d]))[:10]
        dcg = sum(1 / math.log2(rank + 2) for rank, d in enumerate(order) if d in docs)
        ideal = sum(1 / math.log2(rank + 2) for rank in range(min(len(docs), 10)))
        total += dcg / ideal
    return total / len(relevant)


def brute_recall_at(scores: torch.Tensor, k: int) -> float:
    """Share of queries (rows) whose positive (the diagonal) has fewer than ``k`` documents scoring above it."""
    above = (scores > scores.diagonal()[:, None]).sum(dim=1)
    return float((above < k).float().mean())


def noise_images(count: int, side: int, seed: int) -> list:
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)) for _ in range(count)]


def captions(count: int) -> list[str]:
    """Two captions per item: a short one and a long one (past a 12-token budget)."""
    out = []
    for i in range(count):
        a, b = COLOURS[i % len(COLOURS)], COLOURS[(3 * i + 1) % len(COLOURS)]
        out += [f"a {a} dog {i}", f"the {b} horse near the {a} house walks on the road with two {b} birds {i}"]
    return out


def check_against_vlr_eval(result_t2x, result_x2t, items: torch.Tensor, texts: torch.Tensor) -> None:
    """MTEB's scores of text->item (one positive: the owner) and item->text (two positives)."""
    owner = torch.arange(len(texts)) // 2
    vlr = retrieval_recall(items, texts, owner, ks=(1, 5, 10), rank_metrics=("mrr@10",))
    got = scores_of(result_t2x)
    for k in (1, 5, 10):
        assert got[f"recall_at_{k}"] == pytest.approx(vlr[f"t2i_r{k}"] / 100, abs=ROUNDING), k
    # MRR@10 of the best positive: MTEB's reciprocal rank of the first relevant document, both directions
    assert got["mrr_at_10"] == pytest.approx(vlr["t2i_mrr@10"], abs=ROUNDING)
    assert scores_of(result_x2t)["mrr_at_10"] == pytest.approx(vlr["i2t_mrr@10"], abs=ROUNDING)
    assert 0 < got["recall_at_10"] and got["recall_at_1"] < 1  # a ranking, neither empty nor trivial
    t2x = {q: [q // 2] for q in range(len(texts))}
    x2t = {i: [2 * i, 2 * i + 1] for i in range(len(items))}
    assert got["ndcg_at_10"] == pytest.approx(brute_ndcg_at_10(texts @ items.T, t2x), abs=ROUNDING)
    assert scores_of(result_x2t)["ndcg_at_10"] == pytest.approx(brute_ndcg_at_10(items @ texts.T, x2t),
                                                                 abs=ROUNDING)


def score_both_ways(encoder, name: str, modality: str, items: list, item_emb: torch.Tensor, texts: list,
                    text_emb: torch.Tensor, batch_size: int = 4) -> None:
    """MTEB's scores of texts -> items (two captions per item) and items -> texts, checked against
    ``vlr eval``'s engine and a brute-force nDCG (:func:`check_against_vlr_eval`)."""
    short = {"image": "I", "video": "V"}[modality]
    forward = local_task(f"VlrLocal{name}T2{short}", f"t2{short.lower()}", {"text": texts}, {modality: items},
                         {q: [q // 2] for q in range(len(texts))})
    backward = local_task(f"VlrLocal{name}{short}2T", f"{short.lower()}2t", {modality: items}, {"text": texts},
                          {i: [2 * i, 2 * i + 1] for i in range(len(items))})
    results = [mteb.evaluate(encoder, task, cache=None, show_progress_bar=False,
                             encode_kwargs={"batch_size": batch_size}) for task in (forward, backward)]
    check_against_vlr_eval(*results, item_emb, text_emb)


def test_open_clip_export_text_to_image_and_back(open_clip_export):
    import open_clip

    images, texts = noise_images(10, 40, seed=0), captions(10)
    # the export's own embeddings, by plain open_clip
    model, preprocess = open_clip.create_model_from_pretrained(f"local-dir:{open_clip_export}")
    tokenizer = open_clip.get_tokenizer(f"local-dir:{open_clip_export}")
    with torch.no_grad():
        image_emb = torch.nn.functional.normalize(model.eval().encode_image(torch.stack([preprocess(im) for im in
                                                                                      images])), dim=-1)
        text_emb = torch.nn.functional.normalize(model.encode_text(tokenizer(texts)), dim=-1)

    encoder = VlrExportEncoder(folder=open_clip_export, device="cpu")
    meta = encoder.mteb_model_meta
    assert (meta.name, meta.modalities, meta.embed_dim, meta.max_tokens) == \
        (f"vlr-local/{open_clip_export.name}", ["text", "image"], 16, 77)
    assert meta.similarity_fn_name.value == "cosine" and meta.revision.startswith("local-")
    again = meta.load_model(device="cpu")  # MTEB's own way back from the metadata to the model
    assert isinstance(again, VlrExportEncoder) and again.mteb_model_meta.revision == meta.revision
    score_both_ways(encoder, "", "image", images, image_emb, texts, text_emb)


def test_blip_export_texts_truncated_at_its_budget(blip_export):
    from transformers import AutoModel, AutoTokenizer

    import vlr_plugins.hf  # noqa: F401

    queries, paragraphs = [], []
    for i, text in enumerate(captions(8)):
        (queries if i % 2 == 0 else paragraphs).append(text)
    model, tok = AutoModel.from_pretrained(blip_export).eval(), AutoTokenizer.from_pretrained(blip_export)

    def embed(texts, budget):
        batch = tok(texts, truncation=True, max_length=budget, padding=True, return_tensors="pt")
        with torch.no_grad():
            return model.get_text_features(batch["input_ids"], batch["attention_mask"])

    assert max(len(tok(p)["input_ids"]) for p in paragraphs) > 12  # the caption budget cuts them
    encoder = VlrExportEncoder(folder=blip_export, device="cpu", view="caption")
    assert encoder.mteb_model_meta.max_tokens == 12 and encoder.mteb_model_meta.embed_dim == 16
    q_emb, p_emb = embed(queries, 12), embed(paragraphs, 12)
    assert not torch.allclose(embed(paragraphs, 20), p_emb)  # so the budget matters to what follows
    task = local_task("VlrLocalT2T", "t2t", {"text": queries}, {"text": paragraphs}, {q: [q] for q in range(8)})
    got = scores_of(mteb.evaluate(encoder, task, cache=None, show_progress_bar=False))
    cosines = torch.nn.functional.normalize(q_emb, dim=-1) @ torch.nn.functional.normalize(p_emb, dim=-1).T
    # truncated at 12 tokens some paragraphs are equal (equal cosines) and the rest of the tiny random
    # BLIP's embeddings nearly collinear (cosines 0.895 +- 1e-5): the positive's place among candidates
    # within float32 rounding of its score is each library's (and each BLAS's) own rounding, so MTEB's
    # values and the engine's lie between the reference with every such candidate ranked ahead of the
    # positive and behind it (on an AVX-512 Xeon, MKL and MTEB put one query's 5th place on either side)
    qrels, bump = {q: [q] for q in range(8)}, 1e-6 * torch.eye(8)
    worst, best = cosines - bump, cosines + bump
    vlr = retrieval_recall(p_emb, q_emb, torch.arange(8), ks=(1, 5))
    for k in (1, 5):
        low, high = brute_recall_at(worst, k), brute_recall_at(best, k)
        assert low - ROUNDING <= got[f"recall_at_{k}"] <= high + ROUNDING, (k, low, got[f"recall_at_{k}"], high)
        assert low - ROUNDING <= vlr[f"t2i_r{k}"] / 100 <= high + ROUNDING, (k, low, vlr[f"t2i_r{k}"], high)
    # R@1 is not in doubt, so both must give the reference's; at R@5 several places are
    assert brute_recall_at(worst, 1) == brute_recall_at(best, 1)
    low, high = brute_ndcg_at_10(worst, qrels), brute_ndcg_at_10(best, qrels)
    assert low - ROUNDING <= got["ndcg_at_10"] <= high + ROUNDING, (low, got["ndcg_at_10"], high)


def test_blip_export_images_need_its_image_tower(blip_export):
    """A text-tower export (``vlr export --text-only``, or a store no BLIP made) says so for an image task."""
    from vlr_plugins.integrations.mteb import MissingTowerError
    from vlr_plugins.integrations.mteb.run import check_modalities

    encoder = VlrExportEncoder(folder=blip_export, device="cpu")
    task = local_task("VlrLocalBlipT2I", "t2i", {"text": ["a red dog"]}, {"image": noise_images(2, 32, 1)},
                      {0: [0]})
    assert encoder.mteb_model_meta.modalities == ["text"]
    with pytest.raises(Exception, match="no image tower"):
        check_modalities([task], encoder.mteb_model_meta.modalities, blip_export, "blip")
    with pytest.raises(MissingTowerError, match="vision_config"):
        encoder.towers.image(noise_images(1, 32, 2))


def test_blip_export_with_its_image_side_text_to_image_and_back(blip_two_tower_export):
    """The paragraph export with BLIP's frozen image side: images through the folder's image processor and
    get_image_features, texts at the paragraph budget."""
    from transformers import AutoImageProcessor, AutoModel, AutoTokenizer

    import vlr_plugins.hf  # noqa: F401

    folder = blip_two_tower_export
    images, texts = noise_images(10, 40, seed=4), captions(10)
    model, tok = AutoModel.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        image_emb = model.get_image_features(**AutoImageProcessor.from_pretrained(folder)(images, return_tensors="pt"))
        text_emb = model.get_text_features(**{k: v for k, v in tok(texts, truncation=True, max_length=20,
                                                                  padding=True, return_tensors="pt").items()
                                              if k != "token_type_ids"})
    encoder = VlrExportEncoder(folder=folder, device="cpu")
    assert encoder.mteb_model_meta.modalities == ["text", "image"]
    score_both_ways(encoder, "BlipBoth", "image", images, image_emb, texts, text_emb)


def _write_random_clip(path, seed: int, frames: int = 12, side: int = 56) -> str:
    import av

    rng = np.random.default_rng(seed)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("ffv1", rate=8)
        stream.width, stream.height, stream.pix_fmt = side, side, "bgr0"
        for _ in range(frames):
            frame = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)


def test_eol_export_images_and_videos(eol_export, eol_embedder, tmp_path):
    """Images through the processor, clips decoded by MTEB's datasets and sampled as the export says
    (4 frames, ``uniform``): the same rankings as the embedder that was exported, reading the files itself."""
    pytest.importorskip("torchcodec")
    encoder = VlrExportEncoder(folder=eol_export, device="cpu")
    assert encoder.mteb_model_meta.modalities == ["text", "image", "video"]
    assert (encoder.towers.num_frames, encoder.towers.frame_strategy) == (4, "uniform")
    texts, images = captions(3), noise_images(3, 56, seed=5)
    clips = [_write_random_clip(tmp_path / f"clip{i}.mkv", seed=i) for i in range(3)]
    text_emb = eol_embedder.encode_text(texts)
    # the clips as MTEB hands them over (datasets' Video column: decoders), embedded as the embedder embeds the files
    from datasets import Dataset, Video
    from torch.utils.data import DataLoader

    column = Dataset.from_dict({"video": clips}).cast_column("video", Video())
    got = encoder.encode(DataLoader(column, batch_size=2), task_metadata=None, hf_split="test", hf_subset="default")
    torch.testing.assert_close(got, eol_embedder.encode_video(clips), atol=1e-5, rtol=0)
    relevant = {q: [q // 2] for q in range(6)}
    for category, column, items, reference in (("t2i", "image", images, eol_embedder.encode_image(images)),
                                               ("t2v", "video", clips, eol_embedder.encode_video(clips))):
        task = local_task(f"VlrLocal{category.upper()}", category, {"text": texts}, {column: items}, relevant)
        got = scores_of(mteb.evaluate(encoder, task, cache=None, show_progress_bar=False,
                                      encode_kwargs={"batch_size": 2}))
        vlr = retrieval_recall(reference, text_emb, torch.arange(6) // 2, ks=(1,))
        assert got["recall_at_1"] == pytest.approx(vlr["t2i_r1"] / 100, abs=ROUNDING), category
        assert got["ndcg_at_10"] == pytest.approx(brute_ndcg_at_10(text_emb @ reference.T, relevant),
                                                  abs=ROUNDING), category


def test_mvc_export_text_to_video_and_back(mvc_export, tmp_path):
    """The MVC export's two towers: clips decoded by MTEB's datasets, sampled by the export's rule
    (``middle``, 4 frames) and made into pixels by its video processor, as ``vlr precompute`` does."""
    pytest.importorskip("torchcodec")
    from transformers import AutoModel, AutoProcessor

    from vlr_plugins.data.video import read_frames

    clips = [_write_random_clip(tmp_path / f"clip{i}.mkv", seed=10 + i, frames=9 + i) for i in range(5)]
    texts = captions(5)
    model = AutoModel.from_pretrained(mvc_export, trust_remote_code=True).eval()
    processor = AutoProcessor.from_pretrained(mvc_export, trust_remote_code=True)
    with torch.no_grad():
        video_emb = model.get_video_features(**processor(videos=[read_frames(c) for c in clips], return_tensors="pt"))
        batch = processor(text=texts, truncation=True, max_length=model.config.max_tokens_for(), padding=True,
                          return_tensors="pt")
        text_emb = model.get_text_features(batch["input_ids"], batch["attention_mask"])
    encoder = VlrExportEncoder(folder=mvc_export, device="cpu")
    assert encoder.mteb_model_meta.modalities == ["text", "video"]
    score_both_ways(encoder, "Mvc", "video", clips, video_emb, texts, text_emb, batch_size=2)
