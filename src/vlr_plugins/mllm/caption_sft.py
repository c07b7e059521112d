"""Stage-I training data of CaRe: a video and its detailed caption as one supervised chat turn.

Each item is one (video, caption) pair (:func:`vlr_plugins.data.video_captions.read_video_captions`):
the video is decoded (``num_frames`` frames by ``strategy``; CaRe: 16, uniform), the user
turn holds the video and the instruction "Describe the video in detail." (the paper's
fine-tuning prompt, sec. 4.1), and the assistant turn is the caption, both written by the
processor's own chat template. The tokens of the prompt (system turn, user turn, video
placeholders, the generation prompt) get the label -100; the caption's tokens and the
template's end-of-turn token are supervised. Decoding and the processor's resize run in
``__getitem__``, i.e. in the data-loader workers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from vlr_plugins.data.video_captions import VideoCaption, read_video_captions
from vlr_plugins.errors import ConfigError, DataFormatError
from vlr_plugins.mllm.media_input import VideoInput, processor_video_kwargs

__all__ = ["CAPTION_INSTRUCTION", "IGNORE_INDEX", "VideoCaptionSFTDataset", "collate_caption_sft",
           "caption_chat"]

#: CaRe's stage-I fine-tuning prompt (paper sec. 4.1; CaReBench's ``describe_prompt``)
CAPTION_INSTRUCTION = "Describe the video in detail."
#: the label of a position that is not supervised (PyTorch's cross-entropy ``ignore_index``)
IGNORE_INDEX = -100
# per-token tensors of the processor (transformers 5's Qwen2-VL: which tokens are text, image, video);
# the caption's tokens and padding are text (0)
_TOKEN_TYPE_KEYS = ("mm_token_type_ids", "token_type_ids")
# the keys padded per token; any other tensor the processor returns is the video's (pixels, grids)
_TEXT_KEYS = ("input_ids", "labels", *_TOKEN_TYPE_KEYS)


def _chat_owner(processor: Any) -> Any:
    for owner in (processor, getattr(processor, "tokenizer", None)):
        if getattr(owner, "chat_template", None):
            return owner
    raise ConfigError("VideoCaptionSFTDataset: neither the processor nor its tokenizer has a chat template; "
                      "stage I writes the (video, caption) turn with it")


def caption_chat(processor: Any, caption: str, instruction: str = CAPTION_INSTRUCTION) -> tuple[str, str]:
    """(prompt, answer): the chat up to the assistant's turn (generation prompt included) and
    the rest, the caption with the template's end-of-turn token (trailing whitespace dropped);
    ``prompt + answer`` is the template's rendering of the whole two-turn chat."""
    owner = _chat_owner(processor)
    user = {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": instruction}]}
    assistant = {"role": "assistant", "content": [{"type": "text", "text": caption}]}
    prompt = owner.apply_chat_template([user], tokenize=False, add_generation_prompt=True)
    full = owner.apply_chat_template([user, assistant], tokenize=False, add_generation_prompt=False)
    if not full.startswith(prompt):
        raise ConfigError("VideoCaptionSFTDataset: the chat template does not write the assistant's turn after "
                          "its generation prompt, so the prompt tokens cannot be told from the caption's")
    return prompt, full[len(prompt):].rstrip()


def _load_processor(path: str) -> Any:
    from transformers import AutoProcessor

    from vlr_plugins.errors import loading_pretrained

    with loading_pretrained(path, "processor"):
        return AutoProcessor.from_pretrained(path)


class VideoCaptionSFTDataset(Dataset):
    """(video, caption) pairs -> token ids, labels and the processor's video tensors, one pair each.

    ``ann_file``: a JSON Lines file of pairs (:func:`~vlr_plugins.data.video_captions.read_video_captions`;
    ``video_root`` resolves relative paths) or a list of
    :class:`~vlr_plugins.data.video_captions.VideoCaption`; ``processor``: the MLLM's folder /
    Hub id (its ``AutoProcessor``, loaded on first use so the dataset pickles cheaply into
    loader workers) or a loaded processor; ``instruction``: the user's request;
    ``num_frames`` / ``strategy`` / ``frame_repeat`` / ``min_pixels`` / ``max_pixels`` /
    ``backend``: how clips reach the processor (:class:`~vlr_plugins.mllm.VideoInput`;
    CaRe stage I: 16 uniform frames, at most 460,800 pixels each).

    An item: ``input_ids`` / ``labels`` ``(L,)`` (labels -100 on the prompt) and the
    processor's video tensors (Qwen2-VL: ``pixel_values_videos`` (patches, D),
    ``video_grid_thw`` (1, 3)). A video that cannot be decoded raises
    :class:`~vlr_plugins.errors.DataFormatError` naming the file, its line and ``video``.

    Example::

        data = VideoCaptionSFTDataset("recap.jsonl", "Qwen/Qwen2-VL-7B-Instruct")
        batch = collate_caption_sft([data[0], data[1]])
    """

    def __init__(self, ann_file: str | os.PathLike[str] | Sequence[VideoCaption], processor: Any, *,
                 instruction: str = CAPTION_INSTRUCTION, num_frames: int = 16, strategy: str = "uniform",
                 frame_repeat: int = 1, min_pixels: int | None = None, max_pixels: int | None = 460800,
                 backend: str = "pyav", video_root: str | os.PathLike[str] | None = None) -> None:
        try:
            self.video_input = VideoInput(num_frames=num_frames, strategy=strategy, frame_repeat=frame_repeat,
                                          min_pixels=min_pixels, max_pixels=max_pixels, backend=backend)
        except ValueError as e:
            raise ConfigError(f"VideoCaptionSFTDataset: {e}") from None
        if not isinstance(instruction, str) or not instruction.strip():
            raise ConfigError(f"VideoCaptionSFTDataset: instruction must be a non-empty string, found {instruction!r}")
        if isinstance(ann_file, (str, os.PathLike)):
            self.pairs = read_video_captions(ann_file, video_root=video_root)
            self.source = str(ann_file)
        else:
            self.pairs = [p if isinstance(p, VideoCaption) else VideoCaption(*p) for p in ann_file]
            self.source = "<pairs>"
        self.instruction = instruction
        self._processor_path = str(processor) if isinstance(processor, (str, os.PathLike)) else None
        self._processor = None if self._processor_path else processor

    @property
    def processor(self) -> Any:
        if self._processor is None:
            self._processor = _load_processor(self._processor_path)
        return self._processor

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self._processor_path is not None:
            state["_processor"] = None
        return state

    def __len__(self) -> int:
        return len(self.pairs)

    def frames(self, index: int) -> torch.Tensor:
        """The clip of pair ``index`` as the processor takes it: ``(T * frame_repeat, 3, H, W)`` uint8."""
        from vlr_plugins.data.video.decode import sample_frames

        pair, spec = self.pairs[index], self.video_input
        window = None if pair.start is None and pair.end is None else (pair.start, pair.end)
        try:
            frames = sample_frames(pair.video, spec.num_frames, spec.strategy, window=window, backend=spec.backend)
        except ValueError as e:  # VideoDecodeError (a DataFormatError) or a window past the video's end
            raise DataFormatError(self.source, f"cannot read the video: {e}", record=pair.line,
                                  field="video") from None
        frames = frames.permute(0, 3, 1, 2)
        return frames.repeat_interleave(spec.frame_repeat, dim=0) if spec.frame_repeat > 1 else frames

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        proc = self.processor
        tok = getattr(proc, "tokenizer", None) or proc
        prompt, answer = caption_chat(proc, self.pairs[index].caption, self.instruction)
        inputs = proc(text=[prompt], videos=[self.frames(index)], return_tensors="pt",
                      **processor_video_kwargs(proc, self.video_input))
        prompt_ids = inputs["input_ids"][0]
        answer_ids = torch.tensor(tok(answer, add_special_tokens=False)["input_ids"], dtype=torch.long)
        item = {"input_ids": torch.cat([prompt_ids.long(), answer_ids]),
                "labels": torch.cat([torch.full_like(prompt_ids, IGNORE_INDEX, dtype=torch.long), answer_ids])}
        for key, value in inputs.items():
            if key in _TOKEN_TYPE_KEYS:
                item[key] = torch.cat([value[0].long(), torch.zeros_like(answer_ids)])
            elif isinstance(value, torch.Tensor) and key not in ("input_ids", "attention_mask"):
                item[key] = value
        return item


def collate_caption_sft(batch: Sequence[dict[str, torch.Tensor]], pad_token_id: int = 0) -> dict[str, torch.Tensor]:
    """B items -> ``input_ids`` / ``labels`` / ``attention_mask`` (B, L), padded on the right
    (labels -100 and attention 0 on padding), and each video tensor of the items
    concatenated along dim 0 (Qwen2-VL's patches and grids are flat lists over the batch).
    The pad id is never attended to nor supervised, so its value does not matter."""
    if not batch:
        raise ValueError("collate_caption_sft: an empty batch")
    length = max(len(b["input_ids"]) for b in batch)
    out = {"input_ids": torch.full((len(batch), length), pad_token_id, dtype=torch.long),
           "labels": torch.full((len(batch), length), IGNORE_INDEX, dtype=torch.long),
           "attention_mask": torch.zeros((len(batch), length), dtype=torch.long)}
    for i, b in enumerate(batch):
        n = len(b["input_ids"])
        out["input_ids"][i, :n] = b["input_ids"]
        out["labels"][i, :n] = b["labels"]
        out["attention_mask"][i, :n] = 1
        for key in _TOKEN_TYPE_KEYS:
            if key in b:
                out.setdefault(key, torch.zeros((len(batch), length), dtype=torch.long))[i, :n] = b[key]
    media = [k for k in batch[0] if k not in _TEXT_KEYS]
    for key in _TOKEN_TYPE_KEYS:
        if (key in out) != all(key in b for b in batch):
            raise ValueError(f"collate_caption_sft: {key} is missing from some items")
    for key in media:
        if any(key not in b for b in batch):
            raise ValueError(f"collate_caption_sft: {key} is missing from some items")
        out[key] = torch.cat([b[key] for b in batch], dim=0)
    return out
