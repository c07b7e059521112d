"""The towers of an export, as three batch functions MTEB's encoder calls: texts, images, videos -> (N, D).

One class per export kind (:func:`load_towers` picks it from the folder). Each gives
unit-norm float32 rows on the CPU, and says which modalities it has: a tower the export
does not carry (a text-only BLIP export's images, the videos of an MVC export whose run
trained no video tower) raises :class:`MissingTowerError` naming the export and what to do.

* ``blip`` (``vlr_blip_text_encoder``): ``get_text_features`` of texts tokenized with
  ``truncation=True, max_length=config.max_tokens_for(view)``; images through the folder's
  image processor (``AutoImageProcessor``) and ``get_image_features(pixel_values)``.
* ``dual_cls`` (``vlr_dual_cls_text_encoder``): ``encode_text(..., view=)``; videos as
  ``get_video_features(pixel_values_videos)`` of (B, T, 3, H, W) clips made by the folder's
  ``AutoVideoProcessor`` (``VlrVideoProcessor``), frames sampled by ``config.video_config``'s
  ``num_frames`` and ``frame_sampling``, as ``vlr precompute`` samples them.
* ``eol`` (CaRe, E5-V): ``VlrEOLEmbeddingModel.encode_text`` / ``encode_image`` / ``encode_video``.
* ``open_clip``: ``encode_image`` / ``encode_text`` of ``create_model_from_pretrained("local-dir:...")``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from vlr_plugins.errors import UserError
from vlr_plugins.integrations.mteb._folder import ExportFolder

__all__ = ["MissingTowerError", "Towers", "load_towers"]


class MissingTowerError(UserError, ValueError):
    """The export has no tower for a modality a task asks for."""


class Towers:
    """Base: ``text`` / ``image`` / ``video`` batch functions, and what MTEB's model metadata needs."""

    kind = ""
    frameworks: tuple[str, ...] = ("PyTorch", "Transformers", "safetensors")

    def __init__(self, export: ExportFolder, device: str) -> None:
        self.export = export
        self.device = torch.device(device)
        self.model: torch.nn.Module | None = None

    # what the export holds --------------------------------------------------------------
    @property
    def modalities(self) -> list[str]:
        return ["text"] + [m for m in ("image", "video") if self.has(m)]

    def has(self, modality: str) -> bool:
        return modality == "text"

    embed_dim: int
    max_tokens: int | None = None
    #: frames per clip and their sampling (``vlr_plugins.data.video.frame_indices``), for video towers
    num_frames: int | None = None
    frame_strategy: str = "middle"

    @property
    def n_parameters(self) -> int | None:
        return None if self.model is None else sum(p.numel() for p in self.model.parameters())

    def missing(self, modality: str, how: str) -> MissingTowerError:
        return MissingTowerError(f"{self.export.path}: this {self.kind} export has no {modality} tower ({how}), "
                                 f"so it cannot encode the {modality}s of this task")

    # encoding ---------------------------------------------------------------------------
    def text(self, texts: Sequence[str]) -> torch.Tensor:
        raise NotImplementedError

    def image(self, images: Sequence[Any]) -> torch.Tensor:
        raise self.missing("image", "it encodes texts only")

    def video(self, clips: Sequence[torch.Tensor]) -> torch.Tensor:
        raise self.missing("video", "it encodes texts only")


def _unit(x: torch.Tensor) -> torch.Tensor:
    """(N, D) rows, unit norm (already so for every export; normalising again is harmless), float32, CPU."""
    return F.normalize(x.float(), dim=-1).cpu()


class _FamilyTowers(Towers):
    """``vlr_blip_text_encoder`` / ``vlr_dual_cls_text_encoder``: a tokenizer and the model, loaded by
    ``vlr_plugins.hf`` (no remote code runs)."""

    def __init__(self, export: ExportFolder, device: str, view: str | None = None) -> None:
        super().__init__(export, device)
        import vlr_plugins.hf  # noqa: F401  (registers the model types with AutoModel)
        from transformers import AutoModel, AutoTokenizer

        self.model = AutoModel.from_pretrained(export.path).to(self.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(export.path)
        config = self.model.config
        self.view = view
        if view is not None and view in config.token_budgets:
            self.max_tokens = config.max_tokens_for(view)
        else:
            self.max_tokens = config.max_tokens_for()
        self.embed_dim = int(config.embed_dim)

    def _text_kwargs(self) -> dict[str, Any]:
        return {}

    @torch.no_grad()
    def text(self, texts: Sequence[str]) -> torch.Tensor:
        batch = self.tokenizer(list(texts), truncation=True, max_length=self.max_tokens, padding=True,
                               return_tensors="pt")
        batch = {k: v.to(self.device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
        return _unit(self.model.get_text_features(**batch, **self._text_kwargs()))


class BlipTowers(_FamilyTowers):
    kind = "blip"

    def has(self, modality: str) -> bool:
        # every vlr_blip_text_encoder has get_image_features; only one with a bundled image side can run it
        return modality == "text" or (modality == "image" and bool(getattr(self.model.config, "has_image_tower", False)))

    @torch.no_grad()
    def image(self, images: Sequence[Any]) -> torch.Tensor:
        if not self.has("image"):
            raise self.missing("image", "a text-tower export: its model has no image side (config.vision_config); "
                                        "export it again with the image side bundled (vlr export --image-encoder)")
        if not hasattr(self, "_processor"):
            from transformers import AutoImageProcessor

            try:
                self._processor = AutoImageProcessor.from_pretrained(self.export.path)
            except (OSError, ValueError) as e:
                raise self.missing("image", f"no image processor in the folder: {e}") from None
        pixels = self._processor(images=[im.convert("RGB") for im in images], return_tensors="pt")["pixel_values"]
        return _unit(self.model.get_image_features(pixel_values=pixels.to(self.device, self.model.dtype)))


class DualCLSTowers(_FamilyTowers):
    kind = "dual_cls"

    def __init__(self, export: ExportFolder, device: str, view: str | None = None) -> None:
        super().__init__(export, device, view)
        self.view = view or self.model.config.default_view
        video = dict(getattr(self.model.config, "video_config", None) or {})
        self.video_config = video
        self.num_frames = int(video.get("num_frames") or 16)
        self.frame_strategy = str(video.get("frame_sampling") or "middle")  # as vlr precompute samples

    def _text_kwargs(self) -> dict[str, Any]:
        return {"view": self.view}

    def has(self, modality: str) -> bool:
        return modality == "text" or (modality == "video" and bool(getattr(self.model.config, "has_video_tower", False)))

    def _video_inputs(self, clips: Sequence[torch.Tensor]) -> torch.Tensor:
        if not hasattr(self, "_processor"):
            from transformers import AutoVideoProcessor

            try:  # the export's VlrVideoProcessor (registered by vlr_plugins.hf)
                self._processor = AutoVideoProcessor.from_pretrained(self.export.path)
            except (OSError, ValueError) as e:
                raise self.missing("video", f"no video processor in the folder (video_preprocessor_config.json: "
                                            f"{e}); export it again") from None
        # the frames are sampled already (the encoder's collator): the processor only transforms them
        return self._processor(videos=list(clips), do_sample_frames=False, return_tensors="pt")["pixel_values_videos"]

    @torch.no_grad()
    def video(self, clips: Sequence[torch.Tensor]) -> torch.Tensor:
        if not self.has("video"):
            raise self.missing("video", "a text-encoder export: its model has no video tower (config.video_config); "
                                        "export it again from a checkpoint of a run that trained one")
        pixels = self._video_inputs(clips)
        return _unit(self.model.get_video_features(pixel_values_videos=pixels.to(self.device, self.model.dtype)))


class EOLTowers(Towers):
    kind = "eol"

    def __init__(self, export: ExportFolder, device: str, dtype: str | None = None) -> None:
        super().__init__(export, device)
        from vlr_plugins.hf.modeling_vlr_eol import VlrEOLEmbeddingModel

        kwargs = {"dtype": getattr(torch, dtype)} if dtype else {}
        self.model = VlrEOLEmbeddingModel.from_pretrained(export.path, **kwargs).to(self.device).eval()
        settings = self.model.settings
        text = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") \
            else self.model.config
        self.max_tokens = settings.get("max_text_tokens") or getattr(text, "max_position_embeddings", None)
        self.embed_dim = self.model.embedding_dim
        video = dict(settings.get("video_input") or {})
        self.num_frames = int(video.get("num_frames") or 32)
        self.frame_strategy = str(video.get("strategy") or "uniform")

    def has(self, modality: str) -> bool:
        return modality == "text" or (self.model.kind == "mllm" and self.model.prompt.get(modality) is not None)

    def text(self, texts: Sequence[str]) -> torch.Tensor:
        return self.model.encode_text(list(texts)).cpu()

    def image(self, images: Sequence[Any]) -> torch.Tensor:
        if not self.has("image"):
            raise self.missing("image", "its EOL prompt has no image prompt")
        return self.model.encode_image([im.convert("RGB") for im in images]).cpu()

    def video(self, clips: Sequence[torch.Tensor]) -> torch.Tensor:
        if not self.has("video"):
            raise self.missing("video", "its EOL prompt has no video prompt")
        return self.model.encode_video(list(clips)).cpu()


class OpenCLIPTowers(Towers):
    kind = "open_clip"
    frameworks = ("PyTorch", "safetensors")

    def __init__(self, export: ExportFolder, device: str) -> None:
        super().__init__(export, device)
        import open_clip

        name = f"local-dir:{export.path}"
        model, self.preprocess = open_clip.create_model_from_pretrained(name, device=self.device)
        self.model = model.eval()
        self.tokenizer = open_clip.get_tokenizer(name)
        self.max_tokens = int(model.context_length)
        self.embed_dim = int(export.config["model_cfg"]["embed_dim"])

    def has(self, modality: str) -> bool:
        return modality in ("text", "image")

    @torch.no_grad()
    def text(self, texts: Sequence[str]) -> torch.Tensor:
        return _unit(self.model.encode_text(self.tokenizer(list(texts)).to(self.device)))

    @torch.no_grad()
    def image(self, images: Sequence[Any]) -> torch.Tensor:
        pixels = torch.stack([self.preprocess(im.convert("RGB")) for im in images]).to(self.device)
        return _unit(self.model.encode_image(pixels))

    def video(self, clips: Sequence[torch.Tensor]) -> torch.Tensor:
        raise self.missing("video", "an image-text model; `vlr mteb --frames N` scores it on videos as the mean of "
                                    "N frames' image embeddings (mteb's Video2ImagesWrapper)")


_KINDS = {"blip": BlipTowers, "dual_cls": DualCLSTowers, "eol": EOLTowers, "open_clip": OpenCLIPTowers}


def load_towers(export: ExportFolder, device: str = "cpu", *, view: str | None = None,
                dtype: str | None = None) -> Towers:
    """The :class:`Towers` of ``export``; ``view``: the caption view whose token budget (and, for
    MVC, whose CLS) texts get; ``dtype``: the EOL model's (``bfloat16``...)."""
    cls = _KINDS[export.kind]
    if export.kind in ("blip", "dual_cls"):
        return cls(export, device, view=view)
    if export.kind == "eol":
        return cls(export, device, dtype=dtype)
    return cls(export, device)
