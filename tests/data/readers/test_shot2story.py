"""read_shot2story: 20k_test.json as published, whole clips or single shots."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.data.readers import read_shot2story
from vlr_plugins.errors import DataFormatError


def clip(video, spans, **extra):
    stem = video.rsplit(".", 1)[0]
    rec = {
        "video": video,
        "image_id": video,
        "nvid": video,
        "id": 0,
        "whole_caption": f"summary of {stem}",
        "whole_ASR": "hello",
        "video_names": [f"{stem}_{a}_{b}.mp4" for a, b in spans],
        "audio_captions": ["" for _ in spans],
        "captions": [f"shot {k} of {stem}" for k in range(len(spans))],
        "ASR": ["" for _ in spans],
    }
    rec.update(extra)
    return rec


def write(tmp_path, records):
    path = tmp_path / "20k_test.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def test_whole_clips(tmp_path):
    path = write(
        tmp_path,
        [clip("MVq8Q9tKdfU.23.mp4", [(79, 485), (486, 531)]), clip("abc.4.mp4", [(0, 90)])],
    )

    s2s = read_shot2story(path)

    assert s2s.name == "shot2story-clip"
    assert s2s.item_ids == ("MVq8Q9tKdfU.23", "abc.4")
    assert s2s.media == ("MVq8Q9tKdfU.23.mp4", "abc.4.mp4")
    assert s2s.texts == ("summary of MVq8Q9tKdfU.23", "summary of abc.4")
    assert s2s.text_owner.tolist() == [0, 1]
    assert s2s.kinds() == ["clip"]


def test_single_shots_carry_their_frame_span(tmp_path):
    path = write(
        tmp_path,
        [clip("MVq8Q9tKdfU.23.mp4", [(79, 485), (486, 531)]), clip("abc.4.mp4", [(0, 90)])],
    )

    shots = read_shot2story(path, level="shot", media_root=tmp_path / "shots")

    assert shots.name == "shot2story-shot"
    assert shots.item_ids == ("MVq8Q9tKdfU.23#79_485", "MVq8Q9tKdfU.23#486_531", "abc.4#0_90")
    assert shots.media == (
        "MVq8Q9tKdfU.23_79_485.mp4",
        "MVq8Q9tKdfU.23_486_531.mp4",
        "abc.4_0_90.mp4",
    )
    assert shots.texts == (
        "shot 0 of MVq8Q9tKdfU.23",
        "shot 1 of MVq8Q9tKdfU.23",
        "shot 0 of abc.4",
    )
    assert shots.text_owner.tolist() == [0, 1, 2]
    assert shots.kinds() == ["shot"]


def test_shots_named_otherwise_get_their_position_and_empty_captions_are_skipped(tmp_path):
    rec = clip(
        "x.mp4",
        [(0, 1), (2, 3), (4, 5)],
        video_names=["a.mp4", "b.mp4", "c.mp4"],
        captions=["first", "", "third"],
    )
    path = write(tmp_path, [rec])

    shots = read_shot2story(path, level="shot")

    assert shots.item_ids == ("x#0", "x#2")
    assert shots.texts == ("first", "third")


@pytest.mark.parametrize(
    ("bad", "level", "field"),
    [
        (clip("b.mp4", [(0, 1)], whole_caption=""), "clip", "whole_caption"),
        ({**clip("b.mp4", [(0, 1)]), "video": 5}, "clip", "video"),
        (clip("a.mp4", [(0, 1)]), "clip", "video"),  # duplicate of record 0
        (clip("b.mp4", [(0, 1), (2, 3)], captions=["only one"]), "shot", "captions"),
        (clip("b.mp4", [(0, 1)], captions=[None]), "shot", "captions[0]"),
        (clip("b.mp4", [(0, 1)], video_names="b_0_1.mp4"), "shot", "video_names"),
    ],
)
def test_malformed_records_name_file_record_and_field(tmp_path, bad, level, field):
    path = write(tmp_path, [clip("a.mp4", [(0, 1)]), bad])

    with pytest.raises(DataFormatError) as err:
        read_shot2story(path, level=level)

    assert str(path) in str(err.value) and "record 1" in str(err.value)
    assert err.value.field == field


def test_unknown_level(tmp_path):
    with pytest.raises(ValueError, match="level must be one of clip, shot"):
        read_shot2story(write(tmp_path, [clip("a.mp4", [(0, 1)])]), level="scene")


def test_missing_shot_files_are_listed_all_at_once(tmp_path):
    path = write(tmp_path, [clip("a.mp4", [(0, 1), (2, 3), (4, 5)])])
    (tmp_path / "a_2_3.mp4").write_bytes(b"")

    with pytest.raises(FileNotFoundError) as err:
        read_shot2story(path, level="shot", media_root=tmp_path, check_media=True)

    assert "2 of 3" in str(err.value)
    assert "a_0_1.mp4" in str(err.value) and "a_4_5.mp4" in str(err.value)
