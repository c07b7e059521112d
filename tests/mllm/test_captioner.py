"""VideoCaptioner on a tiny random Qwen2-VL: clips of mixed lengths are captioned in length-grouped,
left-padded batches, and each caption is the one the clip gets alone (greedy decoding)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
from _tiny_mllm import clip  # noqa: E402

from vlr_plugins.mllm.caption_run import caption_videos  # noqa: E402
from vlr_plugins.mllm.caption_settings import CaptionSettings  # noqa: E402
from vlr_plugins.mllm.captioner import VideoCaptioner  # noqa: E402
from vlr_plugins.mllm.captions_file import CaptionsFile  # noqa: E402
from vlr_plugins.mllm.media_input import VideoInput  # noqa: E402

# 2-6 frames of 28-56 px: 4 prompt lengths; captions of a fixed length (the random model may end early),
# long enough that the clips' captions differ
CLIPS = [clip(2, 28, 28, seed=1), clip(6, 56, 56, seed=2), clip(2, 28, 56, seed=3), clip(4, 56, 56, seed=4)]


@pytest.fixture(scope="module")
def captioner(tiny_vl):
    model, processor = tiny_vl
    settings = CaptionSettings(name="tiny", prompt="Describe the video.",
                               video_input=VideoInput(num_frames=4, min_pixels=28 * 28, max_pixels=56 * 56),
                               generation={"max_new_tokens": 16, "min_new_tokens": 16, "do_sample": False})
    return VideoCaptioner(model, processor, settings)


@pytest.fixture(scope="module")
def alone(captioner):
    return [captioner.caption_clips([c])[0] for c in CLIPS]


def test_mixed_length_batches_caption_each_clip_as_alone(captioner, alone):
    counts = captioner.token_counts(CLIPS)
    assert counts == [int(captioner.inputs([c])["attention_mask"].sum()) for c in CLIPS]
    assert len(set(counts)) == 4
    assert len(set(alone)) > 1, "the captions must differ, or a mix-up would not show"
    assert captioner.caption_clips(CLIPS, batch_size=2) == alone


def test_a_run_groups_a_window_by_length_and_writes_in_the_list_order(captioner, alone, tmp_path):
    calls = []

    class Recording:
        frames = staticmethod(captioner.frames)
        token_counts = staticmethod(captioner.token_counts)

        def caption_clips(self, clips):
            calls.append([int(captioner.inputs([c])["attention_mask"].sum()) for c in clips])
            return captioner.caption_clips(clips)

    out = CaptionsFile(tmp_path / "caps.jsonl", {"model": "tiny"})
    run = caption_videos(Recording(), [(f"v{i}", c) for i, c in enumerate(CLIPS)], out, batch_size=2, progress=False)
    assert run.captioned == 4
    lines = [json.loads(x) for x in (tmp_path / "caps.jsonl").read_text().splitlines()]
    assert lines == [{"id": f"v{i}", "caption": alone[i]} for i in range(4)]
    # one window of four: batches of similar length, longest first ([1, 3], [2, 0])
    flat = [n for batch in calls for n in batch]
    assert [len(b) for b in calls] == [2, 2] and flat == sorted(flat, reverse=True)
