"""The video processor of an MVC export: raw frames -> ``pixel_values_videos``, exactly as
``vlr precompute --encoder vlr:CHECKPOINT`` makes a store row's clip.

``vlr precompute`` decodes ``num_frames`` frames by UMT's ``middle`` rule (the videos'
frames split into ``num_frames`` equal segments, ``int(i * L / N)`` the boundaries, the
middle frame ``(start + end - 1) // 2`` of each; a video of fewer frames gives every frame
once, then the last repeated), resizes the shorter side to ``image_size`` (bicubic,
antialiased), crops the centre square, scales to [0, 1] and normalises with the tower's
mean / std (torchvision ``transforms.v2``: ``Resize``, ``CenterCrop``, ``ToDtype(scale=True)``,
``Normalize``). :class:`VlrVideoProcessor` does the same with the same torchvision functions,
so its output equals the clip ``vlr precompute`` gives the tower, value for value.

This file is copied beside exported weights and imported where vlr-plugins is not
installed: it imports only ``numpy``, ``torch``, ``torchvision`` and ``transformers``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torchvision.transforms.v2.functional as tvF
from transformers.image_utils import PILImageResampling, SizeDict, pil_torch_interpolation_mapping
from transformers.video_processing_utils import BaseVideoProcessor

__all__ = ["VlrVideoProcessor", "middle_frame_indices"]


def middle_frame_indices(num_video_frames: int, num_frames: int) -> list[int]:
    """UMT's ``middle`` rule (vlr-plugins' ``frame_indices(L, N, "middle")``): the middle frame of
    each of ``num_frames`` equal segments of the video's ``num_video_frames`` frames."""
    if num_video_frames < 1 or num_frames < 1:
        raise ValueError(f"cannot sample {num_frames} frames from a video of {num_video_frames} frames")
    n = min(num_frames, num_video_frames)
    step = num_video_frames / n
    bounds = [int(i * step) for i in range(n)] + [num_video_frames]
    picked = [(s + e - 1) // 2 for s, e in zip(bounds[:-1], bounds[1:])]
    return picked + [picked[-1]] * (num_frames - n)


class VlrVideoProcessor(BaseVideoProcessor):
    """Frames (``(T, H, W, 3)`` uint8 arrays or tensors, or video files) -> ``pixel_values_videos``
    (B, num_frames, 3, S, S): ``middle`` frame sampling, shorter side to S (bicubic,
    antialiased), centre crop, ``/255``, ``(x - mean) / std``.

    Pass every decoded frame of a video and let the processor pick (``do_sample_frames``,
    the default), or frames already picked with ``do_sample_frames=False``. Video files are
    decoded by transformers (torchcodec); ``vlr precompute`` decodes with PyAV by default
    (``--backend torchcodec`` to match).

    Example::

        >>> processor = AutoVideoProcessor.from_pretrained(folder, trust_remote_code=True)  # doctest: +SKIP
        >>> batch = processor(videos=[frames], return_tensors="pt")  # frames: (T, H, W, 3) uint8  # doctest: +SKIP
        >>> model.get_video_features(**batch)  # (1, embed_dim)  # doctest: +SKIP
    """

    resample = PILImageResampling.BICUBIC
    size = {"shortest_edge": 224}
    crop_size = {"height": 224, "width": 224}
    do_resize = True
    do_center_crop = True
    do_rescale = True
    rescale_factor = 1 / 255
    do_normalize = True
    do_convert_rgb = True
    do_sample_frames = True
    num_frames = 16
    image_mean = [0.485, 0.456, 0.406]
    image_std = [0.229, 0.224, 0.225]
    model_input_names = ["pixel_values_videos"]

    def sample_frames(self, metadata: Any, num_frames: int | None = None, fps: float | None = None,
                      **kwargs: Any) -> np.ndarray:
        """The ``middle`` frames of the video ``metadata`` describes (``num_frames``, default the config's)."""
        if fps is not None:
            raise ValueError("this video tower takes a fixed number of frames, picked by the 'middle' rule; "
                             "pass num_frames, not fps")
        num_frames = self.num_frames if num_frames is None else num_frames
        return np.asarray(middle_frame_indices(int(metadata.total_num_frames), int(num_frames)), dtype=np.int64)

    def resize(self, image: torch.Tensor, size: SizeDict, resample: Any = None, antialias: bool = True,
               **kwargs: Any) -> torch.Tensor:
        if size.shortest_edge and not size.longest_edge:
            # torchvision's Resize(S): the shorter side to S, the longer one int(S * long / short)
            if resample is None:
                interpolation = tvF.InterpolationMode.BILINEAR
            elif isinstance(resample, (PILImageResampling, int)):
                interpolation = pil_torch_interpolation_mapping[resample]
            else:
                interpolation = resample
            return tvF.resize(image, [size.shortest_edge], interpolation=interpolation, antialias=antialias)
        return super().resize(image, size, resample=resample, antialias=antialias, **kwargs)

    def center_crop(self, image: torch.Tensor, size: SizeDict, **kwargs: Any) -> torch.Tensor:
        # torchvision's CenterCrop (its offsets round; transformers' truncate)
        return tvF.center_crop(image, [size.height, size.width])

    def rescale_and_normalize(self, images: torch.Tensor, do_rescale: bool, rescale_factor: float,
                              do_normalize: bool, image_mean: Any, image_std: Any) -> torch.Tensor:
        # torchvision's ToDtype(float32, scale=True) then Normalize, not transformers' fused
        # (x - 255 mean) / (255 std), which differs in the last bits
        if do_rescale and rescale_factor == 1 / 255 and images.dtype == torch.uint8:
            images = tvF.to_dtype(images, torch.float32, scale=True)
        else:
            images = images.to(torch.float32)
            if do_rescale:
                images = images * rescale_factor
        if do_normalize:
            images = tvF.normalize(images, list(image_mean), list(image_std))
        return images
