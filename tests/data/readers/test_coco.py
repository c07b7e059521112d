"""read_coco_captions (official 2017 files) and read_coco_karpathy (Karpathy's 5K test)."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.data.readers import read_coco_captions, read_coco_karpathy
from vlr_plugins.errors import DataFormatError
from vlr_plugins.registry import READERS


def official(images=(139, 285, 632)):
    """A captions_val2017.json in COCO's layout; captions interleaved as in the real file."""
    return {
        "info": {"description": "COCO 2017 Dataset", "version": "1.0", "year": 2017},
        "licenses": [
            {
                "url": "http://creativecommons.org/licenses/by-nc-sa/2.0/",
                "id": 1,
                "name": "Attribution-NonCommercial-ShareAlike License",
            }
        ],
        "images": [
            {
                "license": 4,
                "file_name": f"{i:012d}.jpg",
                "coco_url": "",
                "height": 426,
                "width": 640,
                "date_captured": "2013-11-14 17:02:52",
                "flickr_url": "",
                "id": i,
            }
            for i in images
        ],
        "annotations": [
            {
                "image_id": 285,
                "id": 1,
                "caption": "A big burly grizzly bear is show with grass in the background.",
            },
            {
                "image_id": 139,
                "id": 2,
                "caption": "A woman stands in the dining area at the table.",
            },
            {
                "image_id": 632,
                "id": 3,
                "caption": "Bedroom scene with a bookcase, blue comforter and window.",
            },
            {"image_id": 285, "id": 4, "caption": "The large brown bear has a black nose.\n"},
            {
                "image_id": 139,
                "id": 5,
                "caption": "A room with chairs, a table, and a woman in it.",
            },
            {"image_id": 139, "id": 6, "caption": "A woman standing in a kitchen by a window "},
        ],
    }


def write(path, data):
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_official_items_follow_images_and_texts_group_by_item(tmp_path):
    rs = read_coco_captions(write(tmp_path / "captions_val2017.json", official()))

    assert rs.name == "coco-val2017"
    assert rs.item_ids == ("000000000139", "000000000285", "000000000632")
    assert rs.media == ("000000000139.jpg", "000000000285.jpg", "000000000632.jpg")
    assert rs.text_owner.tolist() == [0, 0, 0, 1, 1, 2]
    assert rs.texts_of(0) == [
        "A woman stands in the dining area at the table.",
        "A room with chairs, a table, and a woman in it.",
        "A woman standing in a kitchen by a window ",
    ]  # kept as published
    assert rs.texts_of(1)[1] == "The large brown bear has a black nose.\n"


def test_name_follows_the_file(tmp_path):
    assert (
        read_coco_captions(write(tmp_path / "captions_train2017.json", official())).name
        == "coco-train2017"
    )
    assert read_coco_captions(write(tmp_path / "mine.json", official())).name == "coco"


def _with(mutate):
    data = official()
    mutate(data)
    return data


@pytest.mark.parametrize(
    ("data", "where", "problem"),
    [
        (
            _with(lambda d: d["annotations"][3].update(image_id=999)),
            "annotation 3, field 'image_id'",
            "no image with id 999 in 'images'",
        ),
        (
            _with(lambda d: d["annotations"][2].update(caption="  ")),
            "annotation 2, field 'caption'",
            "non-empty string",
        ),
        (
            _with(lambda d: d["annotations"][0].update(image_id="285")),
            "annotation 0, field 'image_id'",
            "expected an integer",
        ),
        (
            official(images=(139, 285, 632, 724, 776)),
            "image 3, field 'id'",
            "image id 724 has no caption in 'annotations' (2 images have none)",
        ),
        (
            _with(lambda d: d["images"][2].update(id=139)),
            "image 2, field 'id'",
            "duplicate image id 139, first seen as image 0",
        ),
        (
            _with(lambda d: d["images"][1].pop("file_name")),
            "image 1, field 'file_name'",
            "found null",
        ),
        (
            _with(lambda d: d.pop("annotations")),
            "field 'annotations'",
            "expected a list, found null",
        ),
    ],
)
def test_official_errors_name_record_and_field(tmp_path, data, where, problem):
    path = write(tmp_path / "captions_val2017.json", data)

    with pytest.raises(DataFormatError) as err:
        read_coco_captions(path)
    assert str(err.value).startswith(f"{path}, {where}: ")
    assert problem in str(err.value)


def karpathy():
    """A dataset_coco.json in Karpathy's layout (filepath + filename, cocoid, restval)."""
    rows = [
        ("val2014", 391895, "test"),
        ("train2014", 318556, "train"),
        ("val2014", 522418, "restval"),
        ("val2014", 184613, "val"),
        ("val2014", 60623, "test"),
    ]
    images = []
    for imgid, (folder, cocoid, split) in enumerate(rows):
        sentences = [
            {
                "tokens": ["caption", str(j)],
                "raw": f"Caption {j} of {cocoid}.",
                "imgid": imgid,
                "sentid": 5 * imgid + j,
            }
            for j in range(5)
        ]
        images.append(
            {
                "filepath": folder,
                "sentids": [s["sentid"] for s in sentences],
                "filename": f"COCO_{folder}_{cocoid:012d}.jpg",
                "imgid": imgid,
                "split": split,
                "sentences": sentences,
                "cocoid": cocoid,
            }
        )
    return {"images": images, "dataset": "coco"}


def test_karpathy_test_split(tmp_path):
    rs = read_coco_karpathy(write(tmp_path / "dataset_coco.json", karpathy()), "test")

    assert rs.name == "coco-karpathy-test"
    assert rs.item_ids == ("COCO_val2014_000000391895", "COCO_val2014_000000060623")
    assert rs.media == (
        "val2014/COCO_val2014_000000391895.jpg",
        "val2014/COCO_val2014_000000060623.jpg",
    )
    assert rs.text_owner.tolist() == [0] * 5 + [1] * 5
    assert rs.texts_of(1) == [f"Caption {j} of 60623." for j in range(5)]


@pytest.mark.parametrize(("split", "n"), [("train", 1), ("restval", 1), ("val", 1), ("all", 5)])
def test_karpathy_split_selection(tmp_path, split, n):
    assert len(read_coco_karpathy(write(tmp_path / "dataset_coco.json", karpathy()), split)) == n


def test_karpathy_refuses_other_datasets_and_splits(tmp_path):
    data = karpathy()
    data["dataset"] = "flickr30k"
    path = write(tmp_path / "dataset_flickr30k.json", data)
    with pytest.raises(DataFormatError, match=r"field 'dataset': expected Karpathy's coco file"):
        read_coco_karpathy(path)
    with pytest.raises(ValueError, match="split must be one of"):
        read_coco_karpathy(write(tmp_path / "dataset_coco.json", karpathy()), "testval")


def test_karpathy_errors_name_image_and_field(tmp_path):
    data = karpathy()
    data["images"][4]["sentences"][3]["raw"] = 7
    path = write(tmp_path / "dataset_coco.json", data)

    with pytest.raises(
        DataFormatError, match=r"dataset_coco.json, image 4, field 'sentences\[3\].raw'"
    ):
        read_coco_karpathy(path)


def test_missing_images_reported_at_once(tmp_path):
    root = tmp_path / "val2017"
    root.mkdir()
    (root / "000000000285.jpg").write_bytes(b"jpg")
    path = write(tmp_path / "captions_val2017.json", official())

    with pytest.raises(FileNotFoundError) as err:
        read_coco_captions(path, media_root=root, check_media=True)
    assert "2 of 3 media files are missing" in str(err.value)
    assert "000000000139.jpg" in str(err.value) and "000000000632.jpg" in str(err.value)


def test_registered_by_name():
    assert READERS.get("coco_captions") is read_coco_captions
    assert READERS.get("coco_karpathy") is read_coco_karpathy
