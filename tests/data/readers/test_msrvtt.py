"""read_msrvtt: the 1k-A CSV, the full MSRVTT_data.json, and VindLU's msrvtt_test1k.json."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.data.readers import read_msrvtt
from vlr_plugins.errors import DataFormatError

JSFUSION = """key,vid_key,video_id,sentence
ret0,msr7579,video7579,a girl wearing red top and black trousers is putting a sweater on a dog
ret1,msr7725,video7725,young people sit around the edges of a room clapping
ret2,msr9258,video9258,"a man is talking, then he sings"
"""


def test_jsfusion_csv(tmp_path):
    path = tmp_path / "MSRVTT_JSFUSION_test.csv"
    path.write_text(JSFUSION, encoding="utf-8")

    msrvtt = read_msrvtt(path)

    assert msrvtt.name == "msrvtt-1ka"
    assert msrvtt.item_ids == ("video7579", "video7725", "video9258")
    assert msrvtt.media == ("video7579.mp4", "video7725.mp4", "video9258.mp4")
    assert msrvtt.texts[2] == "a man is talking, then he sings"
    assert msrvtt.text_owner.tolist() == [0, 1, 2]
    assert msrvtt.kinds() == ["caption"]
    assert msrvtt.categories is None


def test_full_data_json_split(tmp_path):
    path = tmp_path / "MSRVTT_data.json"
    path.write_text(
        json.dumps(
            {
                "info": {"year": 2016},
                "videos": [
                    {
                        "category": 9,
                        "url": "u",
                        "video_id": "video0",
                        "start time": 1.0,
                        "end time": 9.0,
                        "split": "train",
                        "id": 0,
                    },
                    {
                        "category": 16,
                        "url": "u",
                        "video_id": "video7010",
                        "start time": 2.0,
                        "end time": 8.0,
                        "split": "test",
                        "id": 7010,
                    },
                    {
                        "category": 3,
                        "url": "u",
                        "video_id": "video7011",
                        "start time": 0.0,
                        "end time": 5.0,
                        "split": "test",
                        "id": 7011,
                    },
                ],
                "sentences": [
                    {"caption": "a train clip", "video_id": "video0", "sen_id": 0},
                    {"caption": "a man cooks", "video_id": "video7011", "sen_id": 1},
                    {"caption": "a woman sings", "video_id": "video7010", "sen_id": 2},
                    {"caption": "someone is cooking", "video_id": "video7011", "sen_id": 3},
                ],
            }
        ),
        encoding="utf-8",
    )

    test = read_msrvtt(path)

    assert test.name == "msrvtt-test"
    assert test.item_ids == ("video7010", "video7011")
    assert test.categories == ("16", "3")
    assert test.texts_of(1) == ["a man cooks", "someone is cooking"]
    assert test.text_owner.tolist() == [1, 0, 1]
    assert read_msrvtt(path, split="train").item_ids == ("video0",)
    with pytest.raises(DataFormatError, match="splits present: test, train"):
        read_msrvtt(path, split="validate")


def test_vindlu_json(tmp_path):
    path = tmp_path / "msrvtt_test1k.json"
    path.write_text(
        json.dumps(
            [
                {"video": "video7020.mp4", "caption": "a dog barks"},
                {"video": "video7021.mp4", "caption": "a cat meows"},
            ]
        )
    )

    msrvtt = read_msrvtt(path)

    assert msrvtt.item_ids == ("video7020", "video7021")
    assert msrvtt.media == ("video7020.mp4", "video7021.mp4")
    assert msrvtt.texts == ("a dog barks", "a cat meows")


@pytest.mark.parametrize(
    ("text", "where", "field"),
    [
        (JSFUSION + "ret3,msr1,,a sentence\n", "line 5", "video_id"),
        (JSFUSION + "ret3,msr1,video1,\n", "line 5", "sentence"),
        (JSFUSION + "ret3,msr1,video1,a man, talking\n", "line 5", None),
        ("key,vid_key,video,sentence\nret0,msr1,video1,x\n", "line 1", "video_id"),
    ],
)
def test_malformed_csv_names_file_line_and_field(tmp_path, text, where, field):
    path = tmp_path / "MSRVTT_JSFUSION_test.csv"
    path.write_text(text, encoding="utf-8")

    with pytest.raises(DataFormatError) as err:
        read_msrvtt(path)

    assert str(path) in str(err.value) and where in str(err.value)
    assert err.value.field == field


def test_malformed_data_json_names_the_sentence(tmp_path):
    path = tmp_path / "MSRVTT_data.json"
    path.write_text(
        json.dumps(
            {
                "videos": [{"video_id": "video1", "split": "test", "category": 0}],
                "sentences": [{"caption": "ok", "video_id": "video1"}, {"video_id": "video1"}],
            }
        )
    )

    with pytest.raises(DataFormatError) as err:
        read_msrvtt(path)

    assert "sentence 1" in str(err.value) and err.value.field == "caption"


def test_missing_videos_are_listed_all_at_once(tmp_path):
    path = tmp_path / "MSRVTT_JSFUSION_test.csv"
    path.write_text(JSFUSION, encoding="utf-8")
    (tmp_path / "video7725.mp4").write_bytes(b"")

    with pytest.raises(FileNotFoundError) as err:
        read_msrvtt(path, media_root=tmp_path, check_media=True)

    assert "2 of 3" in str(err.value)
    assert "video7579.mp4" in str(err.value) and "video9258.mp4" in str(err.value)
