"""read_activitynet: val_1.json paragraphs joined in timestamp order, and VindLU's JSON."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.data.readers import read_activitynet
from vlr_plugins.errors import DataFormatError

VAL_1 = {
    "v_QOlSCBRmfWY": {
        "duration": 82.73,
        "timestamps": [[0.83, 19.86], [17.37, 60.81], [56.26, 79.42]],
        "sentences": [
            "A young woman is seen standing in a room.",
            " She then begins to dance.",
            " She spins and ends.",
        ],
    },
    "v_ehGHCYKzyZ8": {
        "duration": 61.72,
        # listed out of order: the paragraph follows the start times
        "timestamps": [[30.0, 61.0], [0.0, 29.0], [30.0, 40.0]],
        "sentences": ["Then he rides away.", "A man fixes a bike.", "He waves."],
    },
}


def write(tmp_path, data, name="val_1.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_paragraphs_in_timestamp_order(tmp_path):
    anet = read_activitynet(write(tmp_path, VAL_1))

    assert anet.name == "activitynet"
    assert anet.item_ids == ("v_QOlSCBRmfWY", "v_ehGHCYKzyZ8")
    assert anet.media == ("v_QOlSCBRmfWY.mp4", "v_ehGHCYKzyZ8.mp4")
    assert anet.texts == (
        "A young woman is seen standing in a room. She then begins to dance. She spins and ends.",
        # ties (30.0) keep file order
        "A man fixes a bike. Then he rides away. He waves.",
    )
    assert anet.text_owner.tolist() == [0, 1]
    assert anet.kinds() == ["paragraph"]


def test_file_names_without_the_v_prefix(tmp_path):
    anet = read_activitynet(write(tmp_path, VAL_1), strip_v_prefix=True, video_ext=".mkv")

    assert anet.item_ids == ("v_QOlSCBRmfWY", "v_ehGHCYKzyZ8")
    assert anet.media == ("QOlSCBRmfWY.mkv", "ehGHCYKzyZ8.mkv")


def test_vindlu_json(tmp_path):
    path = write(
        tmp_path,
        [{"video": "v_QOlSCBRmfWY.mp4", "caption": ["One.", "Two."]}],
        "anet_ret_val_1.json",
    )

    anet = read_activitynet(path)

    assert anet.item_ids == ("v_QOlSCBRmfWY",) and anet.texts == ("One. Two.",)


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"timestamps": [[0, 1]], "sentences": []}, "sentences"),
        ({"timestamps": [[0, 1]], "sentences": ["a", "b"]}, "timestamps"),
        ({"timestamps": [[0, 1], [2]], "sentences": ["a", "b"]}, "timestamps[1]"),
        ({"timestamps": [[0, 1], ["x", 3]], "sentences": ["a", "b"]}, "timestamps[1]"),
        ({"timestamps": [[0, 1]], "sentences": [7]}, "sentences[0]"),
    ],
)
def test_malformed_videos_name_file_video_and_field(tmp_path, entry, field):
    path = write(tmp_path, {"v_ok": VAL_1["v_QOlSCBRmfWY"], "v_bad": {"duration": 9.0, **entry}})

    with pytest.raises(DataFormatError) as err:
        read_activitynet(path)

    assert str(path) in str(err.value) and "video 'v_bad'" in str(err.value)
    assert err.value.field == field


def test_missing_videos_are_listed_all_at_once(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        read_activitynet(write(tmp_path, VAL_1), media_root=tmp_path / "videos", check_media=True)

    assert "2 of 2" in str(err.value)
    assert "v_QOlSCBRmfWY.mp4" in str(err.value) and "v_ehGHCYKzyZ8.mp4" in str(err.value)
