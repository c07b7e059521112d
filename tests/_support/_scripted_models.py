"""Scripted models for the generation pipelines' tests: a loopback server's script that
answers each prompt of the paragraph and mvc pipelines the way real models do (lists with
preambles, bullets, labels, scores in free text) and, for chosen records, badly
(a list too short, a 429, a dropped connection, scores of 3 then 7).

Answers depend only on the request (its prompt, record and seed) and on how many distinct
seeds of a record's paragraph the script has seen, never on timing, so a rerun of a
pipeline against a fresh script gives the same answers.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from PIL import Image

from _fake_openai import drop, error

_CAPTION = re.compile(r"Original caption: (.*)")
_TAKE = re.compile(r"Paragraph: A photo of (.*), take (\d+)\.")
_CAP_IN_PARAGRAPH = re.compile(r"A photo of (.*), take (\d+)\.")

#: the judge's answer for (caption, take): the regeneration rule's cases
SCORES = {
    ("a red bus", 1): "3",                        # <= 5: regenerated ...
    ("a red bus", 2): "I would rate it 7/10.",    # ... > 5: kept, no third attempt
    ("two cats", 1): "Score: 9",                  # good at once
    ("a bowl of soup", 1): "5",                   # at the threshold: regenerated (<= 5)
    ("a bowl of soup", 2): "2",
    ("a bowl of soup", 3): "4",                   # three attempts, the best (5, take 1) kept
    ("a kite", 1): "I cannot judge this.",        # no number: asked again, then a failure
}


def texts_of(body: dict[str, Any]) -> tuple[str, str]:
    """(system text, first user text) of a request body: a re-ask's later turns are not the prompt."""
    system, user = "", ""
    for m in body["messages"]:
        content = m["content"]
        text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content
                                                                  if p.get("type") == "text")
        if m["role"] == "system":
            system = text
        elif m["role"] == "user" and not user:
            user = text
    return system, user


def is_reask(body: dict[str, Any]) -> bool:
    return any(m["role"] == "assistant" for m in body["messages"])


class ParagraphModels:
    """The captioner and the judge of the paragraph pipeline, in one script."""

    def __init__(self, *, glitches: bool = True) -> None:
        self.glitches = glitches
        self._takes: dict[str, dict[int, int]] = {}
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def take(self, caption: str, seed: int) -> int:
        with self._lock:
            seeds = self._takes.setdefault(caption, {})
            return seeds.setdefault(seed, len(seeds) + 1)

    def once(self, event: str) -> bool:
        """True the first time ``event`` is seen (a glitch happens once, then the retry works)."""
        with self._lock:
            first = event not in self._seen
            self._seen.add(event)
            return first

    def __call__(self, body: dict[str, Any]):
        system, user = texts_of(body)
        if user.startswith("You are a strict evaluator"):
            m = _CAP_IN_PARAGRAPH.search(user)
            caption, take = m.group(1), int(m.group(2))
            if self.glitches and caption == "two cats" and self.once("429 on the judge"):
                return error(429, "slow down", {"Retry-After": "0"})
            return SCORES.get((caption, take), "8")
        caption = _CAPTION.search(system).group(1)
        if user.startswith("Using the given image"):  # positives
            if caption == "a kite":  # always four: asked again, then a failure
                return "1. A kite flies.\n2. A kite soars.\n3. A kite in the sky.\n4. A kite aloft."
            if caption == "a red bus" and not is_reask(body):  # too few, then right when asked again
                return "Here are the captions:\n1. A red bus on a street."
            return ("Here are five captions for the image:\n\n"
                    + "\n".join(f"{i}. **{caption.capitalize()}, view {i}.**" for i in range(1, 6))
                    + "\n\nLet me know if you need more.")
        if user.startswith("The original caption above"):  # hard negatives
            if self.glitches and caption == "two cats" and self.once("drop on the negatives"):
                return drop()
            return "\n".join(f"- \"Not {caption}, variant {i}.\"" for i in range(1, 6))
        if user.startswith("Using both the image"):  # paragraph
            return f"Paragraph: A photo of {caption}, take {self.take(caption, body['seed'])}."
        raise AssertionError(f"unexpected prompt: {user[:80]!r}")


def write_images(folder, captions: list[str]) -> list[dict[str, Any]]:
    """One small PNG per caption under ``folder``; the input records ``{id, image, caption}``."""
    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for i, caption in enumerate(captions):
        name = f"img{i}.png"
        Image.new("RGB", (8, 8), (10 * i, 20, 30)).save(folder / name)
        records.append({"id": f"r{i}", "image": name, "caption": caption})
    return records


class MVCModels:
    """The two captioners and the reasoning refiner of the mvc pipeline. Each answer names
    the model and what it saw (``4 frames``, or the file of a ``video_url``), so a record
    shows which model wrote which view from which input. A detailed caption of a video
    named ``bad*`` is empty (malformed, however often asked)."""

    def __call__(self, body: dict[str, Any]):
        _, user = texts_of(body)
        model = body["model"].split("/")[-1]
        parts = [p for m in body["messages"] if not isinstance(m["content"], str) for p in m["content"]]
        frames = sum(p.get("type") == "image_url" for p in parts)
        videos = [p["video_url"]["url"] for p in parts if p.get("type") == "video_url"]
        seen = f"{frames} frames" if frames else videos[0].rsplit("/", 1)[1]
        if user.startswith("Describe the main activity"):
            return f"A person walks ({model}, {seen})."
        if user.startswith(("Describe this video in detail", "Describe the video in detail")):
            if seen.startswith("bad"):
                return ""
            return f"A person in a red shirt walks along the rocky shore ({model}, {seen})."
        if user.startswith("Analyze the visual content"):
            caption = user.split("Here is the caption: ", 1)[1].split(". Write the new caption", 1)[0]
            refined = caption if "Tarsier" in caption else caption.replace("red", "blue")
            return f"<think>Checking {caption!r} against the frames.</think>\n\n{refined}"
        if user.startswith("Based on the visual content"):
            source = "Tarsier" if "Tarsier" in user else "Qwen"
            return (f"<think>two events</think>Here are two positive captions:\n"
                    f"1. A person walks along the shore ({source}).\n2. A person looks at the sea ({source}).")
        raise AssertionError(f"unexpected prompt: {user[:80]!r}")


def write_video(path, num_frames: int = 12) -> str:
    """A small MPEG-4 video of ``num_frames`` frames that change colour."""
    import av
    import numpy as np

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=12)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for k in range(num_frames):
            frame = np.full((32, 32, 3), (20 * k) % 256, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return str(path)
