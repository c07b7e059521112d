"""read_didemo: LocalizingMoments' test_data.json as paragraphs, and VindLU's didemo_ret_test.json."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.data.readers import read_didemo
from vlr_plugins.errors import DataFormatError


def moment(video, description, times=((1, 1), (1, 2)), annotation_id=0):
    return {
        "num_segments": 6,
        "description": description,
        "dl_link": "https://www.flickr.com/video_download.gne?id=1",
        "times": [list(t) for t in times],
        "video": video,
        "annotation_id": annotation_id,
    }


def write(tmp_path, records, name="test_data.json"):
    path = tmp_path / name
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def test_descriptions_become_one_paragraph_per_video_in_file_order(tmp_path):
    path = write(
        tmp_path,
        [
            moment("26292851@N04_4253489686_265c3c8051.m4v", "someone kicks the bug.", [(4, 4)]),
            moment("51035693821@N01_7071386095_a7350f43e0.mpg", "person in white backs up. "),
            # a later moment of the first video: file order wins over time order
            moment("26292851@N04_4253489686_265c3c8051.m4v", "the camera pans left", [(0, 0)]),
        ],
    )

    didemo = read_didemo(path)

    assert didemo.name == "didemo"
    assert didemo.item_ids == (
        "26292851@N04_4253489686_265c3c8051",
        "51035693821@N01_7071386095_a7350f43e0",
    )
    assert didemo.media == (
        "26292851@N04_4253489686_265c3c8051.m4v",
        "51035693821@N01_7071386095_a7350f43e0.mpg",
    )
    assert didemo.texts == (
        "someone kicks the bug. the camera pans left",
        "person in white backs up.",
    )
    assert didemo.text_owner.tolist() == [0, 1]
    assert didemo.kinds() == ["paragraph"]


def test_vindlu_json_joins_its_caption_list(tmp_path):
    path = write(
        tmp_path,
        [
            {"video": "v1.mp4", "caption": ["first.", "second."]},
            {"video": "v2.mp4", "caption": "only one."},
        ],
        "didemo_ret_test.json",
    )

    didemo = read_didemo(path)

    assert didemo.item_ids == ("v1", "v2")
    assert didemo.texts == ("first. second.", "only one.")


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({**moment("b.mp4", "x"), "description": ""}, "description"),
        ({**moment("b.mp4", "x"), "times": []}, "times"),
        ({k: v for k, v in moment("b.mp4", "x").items() if k != "video"}, "video"),
    ],
)
def test_malformed_moments_name_file_record_and_field(tmp_path, bad, field):
    path = write(tmp_path, [moment("a.mp4", "ok"), bad])

    with pytest.raises(DataFormatError) as err:
        read_didemo(path)

    assert str(path) in str(err.value) and "record 1" in str(err.value)
    assert err.value.field == field


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "test_data.json"
    path.write_text('[{"video": "a.mp4",\n "description": }]', encoding="utf-8")

    with pytest.raises(DataFormatError, match="line 2: invalid JSON"):
        read_didemo(path)


def test_missing_videos_are_listed_all_at_once(tmp_path):
    path = write(tmp_path, [moment("a.mp4", "x"), moment("b.mov", "y"), moment("c.avi", "z")])
    (tmp_path / "b.mov").write_bytes(b"")

    with pytest.raises(FileNotFoundError) as err:
        read_didemo(path, media_root=tmp_path, check_media=True)

    assert "2 of 3" in str(err.value) and "a.mp4" in str(err.value) and "c.avi" in str(err.value)
