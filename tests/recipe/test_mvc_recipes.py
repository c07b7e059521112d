"""The shipped MVC recipes (recipes/mvc/) against the multi-view-captions paper, field by field,
and what an ``data.schema: mvc`` recipe may and may not hold."""

from __future__ import annotations

import pytest

from vlr_plugins.recipe import RecipeError, list_recipes, load_recipe

# sec. 4 ("Implementation details") of the paper, as written there
PAPER = dict(frames=16, image_size=224, video_masking=0.10, text_tokens=128, lr=1e-4, weight_decay=0.02,
             warmup_epochs=1, final_lr_share=0.01, per_gpu_batch=128, gpus=16, epochs=20, temperature=0.07,
             mlm_ratio=0.5)
SUMMARY, DETAILED = ("O", "S1", "S2"), ("D1*", "D2*", "P1", "P2")
S, D, DSTAR, P = ("S1", "S2"), ("D1", "D2"), ("D1*", "D2*"), ("P1", "P2")
# sec. 4.3: the ablations' masking ratio, and their single CLS (Tables 4-5; Table 6 varies it)
ABLATION_MASKING = 0.5

# ablation recipe -> (summary-view fields, detailed-view fields, dual CLS, masking ratio, epochs)
ABLATIONS = {
    # Table 4: O; S; S+D*+P; O+S+D*+P
    "mvc/ablations/sup_o": (("O",), None, False, 0.5, 20),
    "mvc/ablations/sup_s": (S, None, False, 0.5, 20),
    "mvc/ablations/sup_s_dstar_p": (S, DSTAR + P, False, 0.5, 20),
    "mvc/ablations/sup_o_s_dstar_p": (SUMMARY, DETAILED, False, 0.5, 20),
    # Table 5: D; S+D; S+D* (S and S+D*+P are Table 4's rows)
    "mvc/ablations/sup_d": (None, D, False, 0.5, 20),
    "mvc/ablations/sup_s_d": (S, D, False, 0.5, 20),
    "mvc/ablations/sup_s_dstar": (S, DSTAR, False, 0.5, 20),
    # Table 6: single vs dual CLS on O+S+D*+P
    "mvc/ablations/cls_single": (SUMMARY, DETAILED, False, 0.5, 20),
    "mvc/ablations/cls_dual": (SUMMARY, DETAILED, True, 0.5, 20),
    # Table 9: masking 50 / 25 / 10 % on O+S+D*+P
    "mvc/ablations/mask50": (SUMMARY, DETAILED, False, 0.5, 20),
    "mvc/ablations/mask25": (SUMMARY, DETAILED, False, 0.25, 20),
    "mvc/ablations/mask10": (SUMMARY, DETAILED, False, 0.10, 20),
    # Table 10: 5 / 10 / 15 / 20 epochs on O+S+D*+P
    **{f"mvc/ablations/epochs{e}": (SUMMARY, DETAILED, False, 0.5, e) for e in (5, 10, 15, 20)},
}


def _views(recipe) -> dict[str, tuple[str, ...]]:
    return {v.name: v.fields for v in recipe.text_views.positives}


def _check_paper_training(recipe, epochs: int = PAPER["epochs"]) -> None:
    t, v, loss = recipe.train, recipe.video, recipe.loss
    assert v.frames == PAPER["frames"] and v.image_size == PAPER["image_size"] and v.sampler == "rand"
    assert all(view.max_tokens == PAPER["text_tokens"] for view in recipe.text_views.positives)
    assert recipe.model["max_tokens"] == PAPER["text_tokens"]
    assert t.lr == PAPER["lr"] and t.weight_decay == PAPER["weight_decay"]
    assert t.schedule == "cosine" and t.warmup_epochs == PAPER["warmup_epochs"] and t.warmup_steps == 0
    assert t.min_lr == pytest.approx(PAPER["final_lr_share"] * PAPER["lr"])
    assert t.batch_size == PAPER["per_gpu_batch"] * PAPER["gpus"] and t.epochs == epochs
    assert loss["type"] == "VideoTextPretrainingLoss"
    assert loss["temperature"] == PAPER["temperature"] and loss["mlm_ratio"] == PAPER["mlm_ratio"]
    assert loss["vtc_weight"] == loss["vtm_weight"] == loss["mlm_weight"] == 1.0  # "equal weights"
    assert loss["hard_negatives"] is True  # "VTM employs hard negative mining"
    assert v.checkpoint == "???" and v.checkpoint_layout == "smile"  # SMILE Stage I, given by the user


def test_mvc_b_and_mvc_l_hold_the_papers_settings():
    b, large = load_recipe("mvc/mvc_b"), load_recipe("mvc/mvc_l")
    for recipe in (b, large):
        _check_paper_training(recipe)
        assert recipe.video.encoder["token_drop_ratio"] == PAPER["video_masking"]
        assert recipe.model["dual_cls"] is True and _views(recipe) == {"summary": SUMMARY, "detailed": DETAILED}
        assert all(v.take == "random" and v.count == 1 for v in recipe.text_views.positives)
        assert recipe.data.schema == "mvc"
    # ViT-B/16 + BERT-base; ViT-L/16 + BERT-large
    assert (b.video.encoder["width"], b.video.encoder["depth"], b.video.encoder["num_heads"]) == (768, 12, 12)
    assert (large.video.encoder["width"], large.video.encoder["depth"], large.video.encoder["num_heads"]) == (
        1024, 24, 16)
    assert b.model["pretrained"] == "bert-base-uncased" and large.model["pretrained"] == "bert-large-uncased"
    # one space for VTC: each tower projects to the text encoder's width
    assert all(r.video.encoder["embed_dim"] == r.model["embed_dim"] for r in (b, large))


def test_baseline_b_is_mvc_b_with_one_cls_on_original_captions():
    base, mvc = load_recipe("mvc/baseline_b"), load_recipe("mvc/mvc_b")
    _check_paper_training(base)
    assert _views(base) == {"summary": ("O",)} and base.model["dual_cls"] is False
    assert base.video == mvc.video and base.train == mvc.train and base.loss == mvc.loss
    assert {k: v for k, v in base.model.items() if k != "dual_cls"} == {
        k: v for k, v in mvc.model.items() if k != "dual_cls"}


@pytest.mark.parametrize("name", sorted(ABLATIONS))
def test_ablation_recipes_match_their_tables(name):
    summary, detailed, dual, masking, epochs = ABLATIONS[name]
    recipe = load_recipe(name)
    _check_paper_training(recipe, epochs)
    wanted = {k: v for k, v in (("summary", summary), ("detailed", detailed)) if v is not None}
    assert _views(recipe) == wanted
    assert recipe.model["dual_cls"] is dual
    assert recipe.video.encoder["token_drop_ratio"] == masking
    # everything else is MVC-B's (the 1M-video subset is the user's corpus)
    mvc = load_recipe("mvc/mvc_b")
    assert {k: v for k, v in recipe.model.items() if k != "dual_cls"} == {
        k: v for k, v in mvc.model.items() if k != "dual_cls"}
    assert {k: v for k, v in recipe.video.encoder.items() if k != "token_drop_ratio"} == {
        k: v for k, v in mvc.video.encoder.items() if k != "token_drop_ratio"}


def test_every_shipped_mvc_recipe_is_tested_here():
    shipped = {n for n in list_recipes() if n.startswith("mvc/")}
    assert shipped == {*ABLATIONS, "mvc/mvc_b", "mvc/mvc_l", "mvc/baseline_b", "mvc/tiny"}
    assert ABLATION_MASKING in {a[3] for a in ABLATIONS.values()}


def test_tiny_is_mvc_b_at_toy_size_and_says_so():
    """mvc/tiny (docs/mvc.md's CPU route) keeps MVC-B's views, objective and schedule; only the
    sizes differ, and it is marked as no paper setting."""
    tiny, mvc = load_recipe("mvc/tiny"), load_recipe("mvc/mvc_b")
    assert "not a paper setting" in tiny.description
    assert tiny.loss == mvc.loss and tiny.model["dual_cls"] is True and tiny.data.schema == "mvc"
    assert _views(tiny) == _views(mvc) and all(v.max_tokens == 64 for v in tiny.text_views.positives)
    assert (tiny.train.schedule, tiny.train.warmup_epochs, tiny.train.weight_decay) == (
        mvc.train.schedule, mvc.train.warmup_epochs, mvc.train.weight_decay)
    assert tiny.model["pretrained"] is None and tiny.video.checkpoint is None and "tokenizer" not in tiny.model
    assert tiny.video.encoder["embed_dim"] == tiny.model["embed_dim"]
    assert tiny.train.min_lr == pytest.approx(tiny.train.lr / 100)  # MVC-B's final 1% of the rate


@pytest.mark.parametrize("overrides, key, words", [
    ({"text_views": {"positives": [{"name": "summary", "field": "caption", "max_tokens": 64}]}},
     "text_views.positives[0].field", "'caption' is a field of data.schema: paragraph"),
    ({"text_views": {"positives": [{"field": "O", "max_tokens": 64}]}}, "text_views.positives[0].name",
     "one of summary, detailed"),
    ({"text_views": {"positives": [{"name": "summary", "field": "O", "max_tokens": 64},
                                   {"name": "summary", "field": "S1", "max_tokens": 64}]}},
     "text_views.positives[1].name", "already"),
    ({"loss": {"type": "InfoNCELoss"}}, "loss.type", "VideoTextPretrainingLoss"),
    ({"loss": {"vocab_size": 10}}, "loss.vocab_size", "from the tokenizer"),
    ({"video": {"encoder": {"type": "FramePooledVideoEncoder"}}}, "video.encoder.type", "SpaceTimeViT"),
    ({"video": {"encoder": {"depthh": 3}}}, "video.encoder.depthh", "takes no argument"),
    ({"video": {"encoder": {"num_frames": 8}}}, "video.encoder.num_frames", "video.frames is 16"),
    ({"video": {"frames": 0}}, "video.frames", ">= 1"),
    ({"video": {"sampler": "fps"}}, "video.sampler", "fps"),
    ({"video": {"crop_scale": [0.9, 0.5]}}, "video.crop_scale", "min <= max"),
    ({"video": {"mean": [0.5, 0.5, 0.5]}}, "video.mean", "together"),
    ({"train": {"warmup_steps": 100}}, "train.warmup_epochs", "give one of them"),
    ({"train": {"amp_dtype": "float8"}}, "train.amp_dtype", "float8"),
    ({"data": {"schema": "images"}}, "data.schema", "images"),
    ({"data": {"image_embeddings": "store/"}}, "data.image_embeddings", "videos"),
    ({"data": {"hard_negatives": {"per_anchor": 0}}}, "data.hard_negatives.per_anchor", ">= 1"),
    ({"data": {"hard_negatives": {"per_anchor": True}}}, "data.hard_negatives.per_anchor", "an integer"),
    ({"data": {"hard_negatives": {"count": 2}}}, "data.hard_negatives.count", "allowed here: per_anchor"),
    ({"data": {"hard_negatives": 1}}, "data.hard_negatives", "{per_anchor: 1}"),
])
def test_mvc_recipe_refusals_name_the_key(overrides, key, words):
    with pytest.raises(RecipeError) as e:
        load_recipe("mvc/mvc_b", overrides)
    assert e.value.key == key and words in str(e.value)


@pytest.mark.parametrize("overrides, key", [
    ({"video": {"frames": 8}}, "video"),
    ({"data": {"video_root": "videos/"}}, "data.video_root"),
    ({"train": {"warmup_epochs": 1, "warmup_steps": 0}}, "train.warmup_epochs"),
    ({"train": {"grad_checkpointing": True}}, "train.grad_checkpointing"),
    ({"data": {"hard_negatives": {"per_anchor": 1}}}, "data.hard_negatives"),
])
def test_paragraph_recipes_hold_no_mvc_keys(overrides, key):
    with pytest.raises(RecipeError) as e:
        load_recipe("paragraph/c5", overrides)
    assert e.value.key == key and "mvc" in str(e.value)


def test_hard_negative_batching_is_off_by_default_and_round_trips():
    from vlr_plugins.recipe import HardNegativeBatching

    assert all(load_recipe(name).data.hard_negatives is None for name in ("mvc/mvc_b", "mvc/mvc_l", "mvc/baseline_b"))
    recipe = load_recipe("mvc/mvc_b", {"data": {"hard_negatives": {"per_anchor": 2}}})
    assert recipe.data.hard_negatives == HardNegativeBatching(per_anchor=2)
    assert load_recipe("mvc/mvc_b", {"data": {"hard_negatives": {}}}).data.hard_negatives == HardNegativeBatching()
    assert recipe.to_dict()["data"]["hard_negatives"] == {"per_anchor": 2}
    assert load_recipe("mvc/mvc_b", {"data": {"hard_negatives": None}}).data.hard_negatives is None


def test_paragraph_recipe_cannot_name_mvc_fields():
    with pytest.raises(RecipeError) as e:
        load_recipe("paragraph/c5", {"text_views": {"positives": [{"field": "S1", "max_tokens": 64}]}})
    assert e.value.key == "text_views.positives[0].field" and "data.schema: mvc" in str(e.value)
