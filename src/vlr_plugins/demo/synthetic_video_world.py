"""A small synthetic video world for ``vlr demo mvc``: tiny clips whose objects change over time,
each with the caption views of the multi-view-captions paper.

A video is one object -- a shape, a colour -- on a background; over the clip the object
moves (up, down, across, or not at all) and may change (it turns another colour halfway,
grows or shrinks). Clips are a few frames of a few pixels, written with PyAV (H.264 in MP4).
Captions follow the paper's views (sec. 3.1): a sparse original caption ``O`` naming one or
two things; summary captions ``S1``, ``S2`` naming shape, colour and motion (and the change
in S2); refined detailed captions ``D1*``, ``D2*`` naming everything; raw detailed
captions ``D1``, ``D2`` with one wrong attribute; semantic positives ``P1`` (the motion)
and ``P2`` (the change). Held-out videos, every one a distinct combination, form two
text-to-video splits: ``summary`` queries (shape, colour, motion) and ``detailed`` queries
(all five attributes), in phrasings no training caption uses. Whether the richer views
help is for the trained model to show.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vlr_plugins._io import atomic_write_text
from vlr_plugins.demo import _video_world_templates as T
from vlr_plugins.data.mvc_samples import MVCSample, write_mvc_samples
from vlr_plugins.text.tokenizer import build_wordpiece_tokenizer, words_of

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

__all__ = ["SyntheticVideoWorld", "SyntheticVideoWorldConfig", "VIDEO_EVAL_SPLITS"]

#: the held-out splits: text-to-video queries at two granularities
VIDEO_EVAL_SPLITS = ("summary", "detailed")


@dataclass
class SyntheticVideoWorldConfig:
    """Size and randomness of a :class:`SyntheticVideoWorld`.

    Args:
        seed: everything (attributes, positions, captions) derives from it.
        num_train: training videos, each one :class:`~vlr_plugins.data.MVCSample`.
        num_eval: held-out videos, each a distinct combination of the five attributes.
        frames: frames per clip; ``size``: the clip's side in pixels; ``fps``: its rate.
    """

    seed: int = 0
    num_train: int = 800
    num_eval: int = 200
    frames: int = 8
    size: int = 32
    fps: int = 8


def _seed(seed: int, tag: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{tag}".encode()).digest()[:8], "little")


class SyntheticVideoWorld:
    """The videos, their caption views and the evaluation queries of the demo's world.

    Example::

        world = SyntheticVideoWorld(SyntheticVideoWorldConfig(num_train=64, num_eval=16))
        paths = world.write("demo/world")   # videos, train.jsonl, eval splits, tokenizer
    """

    def __init__(self, config: SyntheticVideoWorldConfig | None = None) -> None:
        self.config = config or SyntheticVideoWorldConfig()
        c = self.config
        combos = [(s, col, m, ch, bg) for s in T.SHAPES for col in T.COLOURS for m in T.MOTIONS
                  for ch in T.CHANGES for bg in T.BACKGROUNDS]
        if c.num_eval > len(combos):
            raise ValueError(f"num_eval must be at most {len(combos)} (distinct attribute combinations), "
                             f"found {c.num_eval}")
        rng = random.Random(_seed(c.seed, "videos"))
        held_out = rng.sample(combos, c.num_eval)
        self.train_videos = {f"train{i:05d}": self._video(rng.choice(combos), f"train{i:05d}")
                             for i in range(c.num_train)}
        self.eval_videos = {f"eval{i:05d}": self._video(combo, f"eval{i:05d}") for i, combo in enumerate(held_out)}

    def _video(self, combo: tuple[str, ...], video_id: str) -> dict[str, Any]:
        shape, colour, motion, change, background = combo
        rng = random.Random(_seed(self.config.seed, video_id))
        colour2 = rng.choice([c for c in T.COLOURS if c != colour])
        return {"shape": shape, "colour": colour, "colour2": colour2, "motion": motion, "change": change,
                "background": background, "offset": rng.uniform(-0.15, 0.15), "reverse": rng.random() < 0.5}

    # ------------------------------------------------------------------ pixels

    def frames(self, video: dict[str, Any]) -> np.ndarray:
        """The clip of ``video`` (one of :attr:`train_videos` / :attr:`eval_videos`): (T, S, S, 3) uint8."""
        n, s = self.config.frames, self.config.size
        out = np.empty((n, s, s, 3), np.uint8)
        out[:] = T.BACKGROUNDS[video["background"]]
        for t in range(n):
            u = t / max(n - 1, 1)
            x = y = 0.5 + video["offset"]
            if video["motion"] in ("up", "down"):
                y = 0.8 - 0.6 * u if video["motion"] == "up" else 0.2 + 0.6 * u
            elif video["motion"] == "across":
                x = 0.2 + 0.6 * (1 - u if video["reverse"] else u)
            scale = {"grows": 0.6 + 0.8 * u, "shrinks": 1.4 - 0.8 * u}.get(video["change"], 1.0)
            colour = video["colour2"] if video["change"] == "turns" and t >= n / 2 else video["colour"]
            self._draw(out[t], video["shape"], x * s, y * s, scale * s / 4, T.COLOURS[colour])
        return out

    @staticmethod
    def _draw(frame: np.ndarray, shape: str, cx: float, cy: float, side: float, colour: tuple[int, int, int]) -> None:
        ys, xs = np.mgrid[0:frame.shape[0], 0:frame.shape[1]]
        dx, dy = xs + 0.5 - cx, ys + 0.5 - cy
        if shape == "disc":
            mask = dx * dx + dy * dy <= (side / 2) ** 2
        elif shape == "bar":
            mask = (abs(dx) <= side * 0.75) & (abs(dy) <= side * 0.25)
        else:
            mask = (abs(dx) <= side / 2) & (abs(dy) <= side / 2)
        frame[mask] = colour

    def write_video(self, video: dict[str, Any], path: Path) -> None:
        """The clip as H.264 in MP4 (PyAV)."""
        import av

        with av.open(str(path), "w") as container:
            stream = container.add_stream("libx264", rate=self.config.fps)
            stream.width = stream.height = self.config.size
            stream.pix_fmt = "yuv444p"
            stream.options = {"crf": "12", "preset": "ultrafast"}
            for frame in self.frames(video):
                for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)

    # ------------------------------------------------------------------ texts

    def captions(self, video_id: str) -> dict[str, str]:
        """The caption views of a training video: ``O``, ``S1``, ``S2``, ``D1``, ``D2``,
        ``D1*``, ``D2*``, ``P1``, ``P2``."""
        v = self.train_videos[video_id]
        rng = random.Random(_seed(self.config.seed, f"captions/{video_id}"))
        words = self._words(v)
        wrong = dict(words, colour=rng.choice([c for c in T.COLOURS if c != v["colour"]]))
        wrong_long = dict(wrong, change_long=T.change_long(v["change"], wrong["colour"], v["colour2"]))
        return {
            "O": rng.choice(T.ORIGINAL).format(**words),
            "S1": T.SUMMARY_1.format(**dict(words, change="")),
            "S2": T.SUMMARY_2.format(**words),
            "D1": T.DETAILED_1.format(**wrong_long), "D2": T.DETAILED_2.format(**wrong_long),
            "D1*": T.DETAILED_1.format(**words), "D2*": T.DETAILED_2.format(**words),
            "P1": T.MOTION_EVENT[v["motion"]].format(**words),
            "P2": T.change_event(v["change"], v["shape"], v["colour"], v["colour2"]),
        }

    @staticmethod
    def _words(v: dict[str, Any]) -> dict[str, str]:
        return {"shape": v["shape"], "colour": v["colour"], "background": v["background"],
                "motion": T.MOTION_VERB[v["motion"]], "motion_long": T.MOTION_LONG[v["motion"]],
                "change": T.change_short(v["change"], v["colour2"]),
                "change_long": T.change_long(v["change"], v["colour"], v["colour2"]),
                "motion_query": T.MOTION_QUERY[v["motion"]], "change_query": T.change_query(v["change"], v["colour2"])}

    def query(self, video_id: str, split: str) -> str:
        """The held-out query of an evaluation video in ``split`` (:data:`VIDEO_EVAL_SPLITS`)."""
        if split not in VIDEO_EVAL_SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {VIDEO_EVAL_SPLITS}")
        template = T.QUERY_SUMMARY if split == "summary" else T.QUERY_DETAILED
        return template.format(**self._words(self.eval_videos[video_id]))

    def train_samples(self, video_dir: str = "videos") -> list[MVCSample]:
        """The training corpus, video paths relative to the world's folder."""
        return [MVCSample(id=i, video=f"{video_dir}/{i}.mp4", captions=self.captions(i)) for i in self.train_videos]

    def vocabulary(self) -> list[str]:
        texts = [t for i in self.train_videos for t in self.captions(i).values()]
        texts += [self.query(i, s) for i in self.eval_videos for s in VIDEO_EVAL_SPLITS]
        return sorted(words_of(texts))

    def tokenizer(self) -> PreTrainedTokenizerFast:
        """A WordPiece tokenizer over :meth:`vocabulary` (no ``[UNK]`` on this world's texts)."""
        return build_wordpiece_tokenizer(self.vocabulary())

    # ------------------------------------------------------------------ files

    def write(self, out_dir: str | Path, *, overwrite: bool = False) -> dict[str, Path]:
        """Write the world into ``out_dir``: ``videos/`` (every clip), ``train.jsonl`` (MVC
        samples), ``eval_videos.jsonl`` (the held-out clips, a ``vlr precompute --videos``
        list), ``eval_summary.jsonl`` / ``eval_detailed.jsonl`` (``{id, texts}`` retrieval
        splits), ``tokenizer/`` and ``world.json``. Returns those paths by name. A world
        already written with the same config is kept unless ``overwrite``."""
        out = Path(out_dir)
        paths = {"videos": out / "videos", "train": out / "train.jsonl", "eval_videos": out / "eval_videos.jsonl",
                 "eval_summary": out / "eval_summary.jsonl", "eval_detailed": out / "eval_detailed.jsonl",
                 "tokenizer": out / "tokenizer", "world": out / "world.json"}
        stamp = json.dumps(dataclasses.asdict(self.config), sort_keys=True)
        if not overwrite and paths["world"].is_file() and paths["world"].read_text(encoding="utf-8") == stamp:
            return paths
        if paths["videos"].exists():
            shutil.rmtree(paths["videos"])
        paths["videos"].mkdir(parents=True)
        for video_id, video in (*self.train_videos.items(), *self.eval_videos.items()):
            self.write_video(video, paths["videos"] / f"{video_id}.mp4")
        write_mvc_samples(self.train_samples(), paths["train"])
        atomic_write_text(paths["eval_videos"], "".join(
            json.dumps({"id": i, "path": f"videos/{i}.mp4"}) + "\n" for i in self.eval_videos))
        for split in VIDEO_EVAL_SPLITS:
            atomic_write_text(paths[f"eval_{split}"], "".join(
                json.dumps({"id": i, "texts": [self.query(i, split)]}) + "\n" for i in self.eval_videos))
        if paths["tokenizer"].exists():
            shutil.rmtree(paths["tokenizer"])
        self.tokenizer().save_pretrained(str(paths["tokenizer"]))
        atomic_write_text(paths["world"], stamp)
        return paths
