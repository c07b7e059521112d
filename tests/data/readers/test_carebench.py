"""read_carebench: json/metadata.json as published, three text kinds and the major category."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.data.readers import read_carebench
from vlr_plugins.errors import DataFormatError
from vlr_plugins.registry import READERS


def record(video, category="sports & exercise", **extra):
    rec = {
        "video": video,
        "caption": f"general caption of {video}",
        "spatial_caption": f"spatial caption of {video}",
        "temporal_caption": f"temporal caption of {video}",
        "events": ["someone jumps"],  # published files carry more keys; they are ignored
        "category": category,
    }
    rec.update(extra)
    return {k: v for k, v in rec.items() if v is not None}


def write(tmp_path, records, name="metadata.json"):
    path = tmp_path / name
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def test_three_kinds_per_video_and_the_category(tmp_path):
    path = write(
        tmp_path,
        [record("v_00000030_5.mp4"), record("v_00002049_5.mp4", category="household activities")],
    )

    care = read_carebench(path, media_root=tmp_path / "videos")

    assert care.name == "carebench"
    assert care.item_ids == ("v_00000030_5", "v_00002049_5")
    assert care.media == ("v_00000030_5.mp4", "v_00002049_5.mp4")
    assert care.categories == ("sports & exercise", "household activities")
    assert care.kinds() == ["general", "spatial", "temporal"]
    assert care.text_owner.tolist() == [0, 0, 0, 1, 1, 1]
    assert care.texts_of(1) == [
        "general caption of v_00002049_5.mp4",
        "spatial caption of v_00002049_5.mp4",
        "temporal caption of v_00002049_5.mp4",
    ]
    temporal = care.with_texts("temporal")
    assert temporal.item_ids == care.item_ids
    assert temporal.texts == (
        "temporal caption of v_00000030_5.mp4",
        "temporal caption of v_00002049_5.mp4",
    )
    assert temporal.categories == care.categories
    assert READERS.get("carebench") is read_carebench


def test_without_a_category_key_categories_is_none(tmp_path):
    path = write(tmp_path, [record("a.mp4", category=None), record("b.mp4", category=None)])

    assert read_carebench(path).categories is None


def test_category_key_is_configurable(tmp_path):
    path = write(tmp_path, [record("a.mp4", category=None, major_category="personal care")])

    care = read_carebench(path, category_field="major_category")

    assert care.categories == ("personal care",)


@pytest.mark.parametrize(
    ("records", "where", "field"),
    [
        ([record("a.mp4"), record("b.mp4", spatial_caption=None)], "record 1", "spatial_caption"),
        ([record("a.mp4", temporal_caption="  ")], "record 0", "temporal_caption"),
        ([record("a.mp4", caption=7)], "record 0", "caption"),
        ([{**record("a.mp4"), "video": ""}], "record 0", "video"),
        ([record("a.mp4"), record("a.mp4")], "record 1", "video"),
        ([record("a.mp4"), record("b.mp4", category=None)], "record 1", "category"),
        ([record("a.mp4", category=3)], "record 0", "category"),
        ([record("a.mp4"), "b.mp4"], "record 1", None),
    ],
)
def test_malformed_records_name_file_record_and_field(tmp_path, records, where, field):
    path = write(tmp_path, records)

    with pytest.raises(DataFormatError) as err:
        read_carebench(path)

    assert str(path) in str(err.value) and where in str(err.value)
    assert err.value.field == field


def test_not_an_array(tmp_path):
    path = write(tmp_path, {"video": "a.mp4"})

    with pytest.raises(DataFormatError, match="expected a JSON array"):
        read_carebench(path)


def test_missing_videos_are_listed_all_at_once(tmp_path):
    (tmp_path / "videos").mkdir()
    (tmp_path / "videos" / "b.mp4").write_bytes(b"")
    path = write(tmp_path, [record("a.mp4"), record("b.mp4"), record("c.mp4")])

    with pytest.raises(FileNotFoundError) as err:
        read_carebench(path, media_root=tmp_path / "videos", check_media=True)

    assert "2 of 3" in str(err.value)
    assert "a.mp4" in str(err.value) and "c.mp4" in str(err.value)
