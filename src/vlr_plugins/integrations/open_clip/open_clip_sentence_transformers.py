"""A sentence-transformers input module for an open_clip Hub folder: texts and images, one two-tower model.

``vlr export open_clip:MODEL:CHECKPOINT OUT`` copies this file into ``OUT`` and names its class in
``modules.json``, so that::

    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("OUT", trust_remote_code=True)   # or the Hub id it was pushed to
    texts = model.encode(["a dog on the beach"])                  # model.encode_text(tokens, normalize=True)
    images = model.encode([Image.open("dog.jpg"), "cat.png"])     # model.encode_image(preprocess(img), normalize=True)

It loads the folder with plain open_clip (``create_model_from_pretrained("local-dir:...")``, the
``open_clip_config.json`` the export wrote: a ``-ctx248`` model keeps its 248 positions), tokenizes
texts with ``open_clip.get_tokenizer`` of the same folder (its context length), and turns each image
into the model's input with open_clip's own eval ``preprocess``. The output is the unit-norm
embedding, so ``model.similarity`` (cosine) is the model's retrieval score.

One module handles both modalities, as sentence-transformers' own ``Transformer`` does for a CLIP
model: a batch is texts or images (one ``encode`` call each; a batch mixing them is refused by
sentence-transformers). Images may be PIL images, paths or URLs of image files, ``{"image": x}``,
or arrays / tensors of shape (H, W, C) or (C, H, W): uint8 as they are, floats read as values in
[0, 1] (rounded to uint8 before open_clip's transform, which works on PIL images).

Only torch, numpy, PIL, open_clip and sentence_transformers are imported: the folder loads where
vlr-plugins is not installed. Needs sentence-transformers >= 6.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

import numpy as np
import open_clip
import torch
from PIL import Image
from sentence_transformers.base.modality import infer_modality
from sentence_transformers.base.modules.input_module import InputModule

__all__ = ["OpenCLIPEncoder"]

_OPEN_CLIP_CONFIG = "open_clip_config.json"
_OPEN_CLIP_WEIGHTS = "open_clip_model.safetensors"


def _as_pil(image: Any) -> Image.Image:
    """One image input as sentence-transformers passes it -> a PIL image."""
    if isinstance(image, dict) and set(image) == {"image"}:
        image = image["image"]
    if isinstance(image, Image.Image):
        return image
    if isinstance(image, str):
        if image.startswith(("http://", "https://")):
            from urllib.request import urlopen

            with urlopen(image, timeout=60) as response:  # noqa: S310 (an http(s) URL the caller gave)
                return Image.open(io.BytesIO(response.read()))
        return Image.open(image)
    if isinstance(image, torch.Tensor):
        image = image.detach().cpu().numpy()
    if isinstance(image, np.ndarray) and image.ndim == 3:
        if image.shape[-1] not in (1, 3, 4) and image.shape[0] in (1, 3, 4):
            image = np.moveaxis(image, 0, -1)  # (C, H, W) -> (H, W, C)
        if image.shape[-1] not in (1, 3, 4):
            raise ValueError(f"an image array of shape {tuple(image.shape)}: expected (H, W, C) or (C, H, W) "
                             "with C 1, 3 or 4")
        if image.dtype != np.uint8:
            if not np.issubdtype(image.dtype, np.floating):
                raise ValueError(f"an image array of dtype {image.dtype}: expected uint8, or floats in [0, 1]")
            image = np.clip(np.rint(image * 255.0), 0, 255).astype(np.uint8)
        return Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image)
    raise ValueError(f"not an image input: {type(image).__name__}")


class OpenCLIPEncoder(InputModule):
    """An open_clip model as a sentence-transformers input module: texts and images -> unit-norm embeddings."""

    config_keys: list[str] = []
    config_file_name = "sentence_bert_config.json"

    def __init__(self, model: torch.nn.Module, preprocess: Any, tokenizer: Any, open_clip_config: dict[str, Any]):
        super().__init__()
        self.model = model.eval()
        self.image_preprocess = preprocess
        self.tokenizer = tokenizer
        self.open_clip_config = open_clip_config

    @property
    def modalities(self) -> list[str]:
        return ["text", "image"]

    @property
    def max_seq_length(self) -> int:
        """The text positions of the model (texts are cut to them, as open_clip's tokenizer cuts)."""
        return int(self.model.context_length)

    def get_embedding_dimension(self) -> int:
        return int(self.open_clip_config["model_cfg"]["embed_dim"])

    get_sentence_embedding_dimension = get_embedding_dimension

    def preprocess(self, inputs: list[Any], prompt: str | None = None, **kwargs) -> dict[str, Any]:
        kinds = {infer_modality(x, supported_modalities=self.modalities) for x in inputs}
        if kinds == {"text"}:
            texts = [x["text"] if isinstance(x, dict) else x for x in inputs]
            if prompt:
                texts = self._prepend_prompt(texts, prompt)
            return {"modality": "text", "input_ids": self.tokenizer(texts)}
        if kinds == {"image"}:
            pixels = [self.image_preprocess(_as_pil(x)) for x in inputs]
            return {"modality": "image", "pixel_values": torch.stack(pixels)}
        raise ValueError("this open_clip model embeds texts or images, one kind per call; "
                         f"got {sorted(map(str, kinds))}")

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        if "pixel_values" in features:
            pixels = features["pixel_values"].to(next(self.model.parameters()).dtype)
            features["sentence_embedding"] = self.model.encode_image(pixels, normalize=True)
        else:
            features["sentence_embedding"] = self.model.encode_text(features["input_ids"], normalize=True)
        return features

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", token: bool | str | None = None,
             cache_folder: str | None = None, revision: str | None = None, local_files_only: bool = False,
             **kwargs) -> OpenCLIPEncoder:
        folder = cls.load_dir_path(model_name_or_path, subfolder=subfolder, token=token, cache_folder=cache_folder,
                                   revision=revision, local_files_only=local_files_only)
        model, preprocess = open_clip.create_model_from_pretrained(f"local-dir:{folder}", device="cpu")
        tokenizer = open_clip.get_tokenizer(f"local-dir:{folder}")
        with open(os.path.join(folder, _OPEN_CLIP_CONFIG), encoding="utf-8") as f:
            config = json.load(f)
        return cls(model, preprocess, tokenizer, config)

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        """Write the open_clip folder again (config, safetensors weights, an HF tokenizer's files)."""
        from safetensors.torch import save_file

        os.makedirs(output_path, exist_ok=True)
        with open(os.path.join(output_path, _OPEN_CLIP_CONFIG), "w", encoding="utf-8") as f:
            json.dump(self.open_clip_config, f, indent=4)
        state = {k: v.detach().contiguous().cpu() for k, v in self.model.state_dict().items()}
        save_file(state, os.path.join(output_path, _OPEN_CLIP_WEIGHTS), metadata={"format": "pt"})
        if hasattr(self.tokenizer, "save_pretrained"):
            self.tokenizer.save_pretrained(output_path)
        self.save_config(output_path)
