"""What a video-text (``data.schema: mvc``) recipe must hold, checked when it loads; and what
the other recipes may not hold.

An MVC recipe names its caption views (``summary`` / ``detailed``: the CLS token each is
encoded with), trains a dual-CLS text encoder with ``VideoTextPretrainingLoss`` and a video
tower given in its ``video`` section; it reads videos, not stored image embeddings, and is
evaluated afterwards with ``vlr eval`` on video benchmarks. Errors are
:class:`~vlr_plugins.recipe.RecipeError` naming the file and the dotted key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vlr_plugins.data.text_views import TextViews
from vlr_plugins.recipe.arguments import check_loss_against_views, check_model_arguments
from vlr_plugins.recipe.errors import RecipeError
from vlr_plugins.recipe.schema import VideoSpec

__all__ = ["VIDEO_TEXT_LOSS", "VIDEO_TEXT_MODEL", "VIDEO_TOWER", "check_video_text", "check_video_text_train",
           "check_not_video_text", "view_names"]

#: the loss, text encoder and video tower an ``mvc`` recipe trains
VIDEO_TEXT_LOSS = "VideoTextPretrainingLoss"
VIDEO_TEXT_MODEL = "DualCLSTextEncoder"
VIDEO_TOWER = "SpaceTimeViT"
#: keys of ``train`` that only ``mvc`` recipes read (their defaults)
_MVC_TRAIN_KEYS = {"warmup_epochs": 0, "amp_dtype": "float16", "grad_checkpointing": False}


def view_names(views: TextViews) -> tuple[str, ...]:
    """The caption views the positives draw, in the text encoder's order (summary, detailed)."""
    from vlr_plugins.text.view_names import VIEWS

    names = {v.name for v in views.positives}
    return tuple(v for v in VIEWS if v in names)


def check_video_text(raw: dict[str, Any], views: TextViews, path: Path) -> None:
    """Check the parts of a merged ``mvc`` recipe mapping that differ from a paragraph recipe:
    named views, the loss, the text encoder, the video tower, no stored embeddings, no
    in-training evaluation."""
    from vlr_plugins.text.view_names import VIEWS

    if views.negatives:
        raise RecipeError(path, "text_views.negatives", "an mvc recipe draws no hard-negative texts: "
                                                        "video-text matching finds its negatives in the batch")
    seen: dict[str, int] = {}
    for i, view in enumerate(views.positives):
        key = f"text_views.positives[{i}].name"
        if view.name not in VIEWS:
            found = "nothing" if view.name is None else repr(view.name)
            raise RecipeError(path, key, f"expected the caption view this view's texts are encoded as, one of "
                                         f"{', '.join(VIEWS)} (which CLS token reads them), found {found}")
        if view.name in seen:
            raise RecipeError(path, key, f"view {view.name!r} is drawn by text_views.positives[{seen[view.name]}] "
                                         "already; pool its fields into one view (field: [a, b])")
        seen[view.name] = i
    loss = raw["loss"]
    if not isinstance(loss, dict) or loss.get("type") != VIDEO_TEXT_LOSS:
        found = loss.get("type") if isinstance(loss, dict) else loss
        raise RecipeError(path, "loss.type", f"an mvc recipe trains with {VIDEO_TEXT_LOSS} (VTC + VTM + MLM; its "
                                             f"weights switch terms off), found {found!r}")
    names = view_names(views)
    if "views" in loss:
        given = loss["views"] if isinstance(loss["views"], list) else [loss["views"]]
        if sorted(map(str, given)) != sorted(names):
            raise RecipeError(path, "loss.views", f"{given} are not the views the recipe draws ({list(names)}); "
                                                  "leave it out to take them from text_views")
    check_loss_against_views({"views": list(names), **loss}, views, path)
    model = raw["model"]
    if isinstance(model, dict) and model.get("type") != VIDEO_TEXT_MODEL:
        raise RecipeError(path, "model.type", f"an mvc recipe trains a {VIDEO_TEXT_MODEL} (one CLS token per "
                                              f"caption view, fusion layers for VTM and MLM), found "
                                              f"{model.get('type')!r}")
    data = raw.get("data") or {}
    if data.get("image_embeddings") is not None:
        raise RecipeError(path, "data.image_embeddings", "an mvc recipe reads the videos its samples name "
                                                         "(data.video_root), not stored image embeddings")
    if raw.get("eval"):
        raise RecipeError(path, "eval", "an mvc recipe is evaluated after training: vlr eval on video benchmarks "
                                        "(docs/mvc.md); leave eval out")
    _check_tower(raw.get("video"), path)


def _check_tower(video: Any, path: Path) -> None:
    if not isinstance(video, dict) or not isinstance(video.get("encoder"), dict):
        raise RecipeError(path, "video.encoder", f"missing: an mvc recipe trains a video tower "
                                                 f"(type: {VIDEO_TOWER} and its arguments)")
    tower = video["encoder"]
    if tower.get("type") != VIDEO_TOWER:
        raise RecipeError(path, "video.encoder.type", f"expected {VIDEO_TOWER} (its tokens feed the text encoder's "
                                                      f"fusion layers), found {tower.get('type')!r}")
    check_model_arguments(tower, path, key="video.encoder")
    if tower.get("pretrained") is not None:
        raise RecipeError(path, "video.encoder.pretrained", "give the tower's starting weights as video.checkpoint "
                                                            "(the heads they lack, pool_norm and proj, start fresh)")
    for arg, key in (("num_frames", "frames"), ("image_size", "image_size")):
        given, wanted = tower.get(arg), video.get(key, getattr(VideoSpec, key))
        if given is not None and given != wanted:
            raise RecipeError(path, f"video.encoder.{arg}", f"{given}, but video.{key} is {wanted}: the tower reads "
                                                            f"the clips the data gives; set video.{key} (the tower "
                                                            "follows it) and leave this out")


def check_video_text_train(train: Any, path: Path) -> None:
    """The ``train`` keys an ``mvc`` recipe cannot take: ``length_blocks`` (its text encoder
    hands its token states at the batch's width to VTM and MLM, not one embedding a text)."""
    if train.length_blocks != 1:
        raise RecipeError(path, "train.length_blocks", f"{train.length_blocks}, but only paragraph recipes encode "
                                                       "their texts in length blocks (an mvc recipe's VTM and MLM "
                                                       "read the text states at the batch's width); leave it at 1")


def check_not_video_text(raw: dict[str, Any], data: Any, train: Any, path: Path) -> None:
    """A recipe that is not ``mvc`` has no video section and none of the keys only ``mvc``
    recipes read."""
    if raw.get("video") is not None:
        raise RecipeError(path, "video", "only data.schema: mvc recipes train a video tower; set data.schema: mvc "
                                         "(multi-view-captions samples) or leave video out")
    if data.video_root is not None:
        raise RecipeError(path, "data.video_root", "only data.schema: mvc recipes read videos")
    if data.hard_negatives is not None:
        raise RecipeError(path, "data.hard_negatives", "only data.schema: mvc recipes batch mined hard-negative "
                                                       "videos; a paragraph recipe draws its mined hard-negative "
                                                       "texts with text_views.negatives")
    for key, default in _MVC_TRAIN_KEYS.items():
        if getattr(train, key) != default:
            raise RecipeError(path, f"train.{key}", f"only data.schema: mvc recipes read it (vlr train); "
                                                    f"leave it at {default!r}")
