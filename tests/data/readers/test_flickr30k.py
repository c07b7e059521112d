"""read_flickr30k: Karpathy's json, the official token file and LAVIS' json give the same set."""

from __future__ import annotations

import json
import re

import pytest

from vlr_plugins.data import RetrievalSet
from vlr_plugins.data.readers import read_flickr30k
from vlr_plugins.errors import DataFormatError
from vlr_plugins.registry import READERS

# image -> (Karpathy split, captions); the real files hold 31,014 images x 5 captions
IMAGES = {
    "1000092795.jpg": (
        "train",
        [
            "Two young guys with shaggy hair look at their hands .",
            "Two friends enjoy time spent together .",
        ],
    ),
    "1007129816.jpg": (
        "test",
        [
            "The man with pierced ears is wearing glasses .",
            "A man with glasses is wearing a beer can crocheted hat .",
            "A man in an orange hat starring at something .",
        ],
    ),
    "1009434119.jpg": (
        "val",
        ["A black and white dog is running in a grassy garden surrounded by a fence ."],
    ),
    "101362133.jpg": (
        "test",
        ["A young female student performing a downward kick to break a board ."],
    ),
}


def write_karpathy(path, images=IMAGES, dataset="flickr30k"):
    records, sentid = [], 0
    for imgid, (name, (split, captions)) in enumerate(images.items()):
        sentences = []
        for raw in captions:
            sentences.append(
                {
                    "tokens": raw.lower().rstrip(" .").split(),
                    "raw": raw,
                    "imgid": imgid,
                    "sentid": sentid,
                }
            )
            sentid += 1
        records.append(
            {
                "sentids": [s["sentid"] for s in sentences],
                "imgid": imgid,
                "sentences": sentences,
                "split": split,
                "filename": name,
            }
        )
    path.write_text(json.dumps({"images": records, "dataset": dataset}), encoding="utf-8")
    return path


def write_token(path, images=IMAGES):
    lines = [
        f"{name}#{n}\t{raw}" for name, (_, caps) in images.items() for n, raw in enumerate(caps)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_lavis(path, split="test"):
    records = [
        {"image": f"flickr30k-images/{name}", "caption": caps}
        for name, (s, caps) in IMAGES.items()
        if s == split
    ]
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def test_karpathy_test_split(tmp_path):
    rs = read_flickr30k(write_karpathy(tmp_path / "dataset_flickr30k.json"), split="test")

    assert isinstance(rs, RetrievalSet)
    assert rs.name == "flickr30k-test"
    assert rs.item_ids == ("1007129816", "101362133")
    assert rs.media == ("1007129816.jpg", "101362133.jpg")
    assert rs.text_owner.tolist() == [0, 0, 0, 1]
    assert rs.texts_of(0) == IMAGES["1007129816.jpg"][1]
    assert rs.texts_of(1) == IMAGES["101362133.jpg"][1]


@pytest.mark.parametrize(
    ("split", "ids"),
    [
        ("train", ["1000092795"]),
        ("val", ["1009434119"]),
        ("all", ["1000092795", "1007129816", "1009434119", "101362133"]),
    ],
)
def test_karpathy_split_selection(tmp_path, split, ids):
    rs = read_flickr30k(write_karpathy(tmp_path / "dataset_flickr30k.json"), split=split)

    assert list(rs.item_ids) == ids
    assert rs.name == ("flickr30k" if split == "all" else f"flickr30k-{split}")
    assert len(rs.texts) == sum(len(IMAGES[f"{i}.jpg"][1]) for i in ids)


def test_the_three_formats_agree(tmp_path):
    full_k = read_flickr30k(write_karpathy(tmp_path / "dataset_flickr30k.json"), split="all")
    full_t = read_flickr30k(write_token(tmp_path / "results_20130124.token"), split="all")
    test_k = read_flickr30k(tmp_path / "dataset_flickr30k.json", split="test")
    test_l = read_flickr30k(write_lavis(tmp_path / "flickr30k_test.json"), split="test")

    for a, b in ((full_k, full_t), (test_k, test_l)):
        assert (a.name, a.item_ids, a.texts, a.media) == (b.name, b.item_ids, b.texts, b.media)
        assert a.text_owner.tolist() == b.text_owner.tolist()


def test_token_file_holds_no_splits(tmp_path):
    path = write_token(tmp_path / "results_20130124.token")

    with pytest.raises(ValueError, match="split='all'"):
        read_flickr30k(path)  # the default split="test" would silently be all 31K images


def test_lavis_file_is_one_split(tmp_path):
    with pytest.raises(ValueError, match="one split"):
        read_flickr30k(write_lavis(tmp_path / "flickr30k_test.json"), split="all")


def _karpathy_with(tmp_path, mutate):
    path = write_karpathy(tmp_path / "dataset_flickr30k.json")
    data = json.loads(path.read_text())
    mutate(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("mutate", "where", "problem"),
    [
        (
            lambda d: d["images"][1]["sentences"][2].pop("raw"),
            "image 1, field 'sentences[2].raw'",
            "non-empty string",
        ),
        (lambda d: d["images"][2].update(split="dev"), "image 2, field 'split'", 'found "dev"'),
        (lambda d: d["images"][0].update(sentences=[]), "image 0, field 'sentences'", "empty list"),
        (lambda d: d["images"][3].update(filename=None), "image 3, field 'filename'", "found null"),
        (
            lambda d: d["images"][3].update(filename="1007129816.jpg"),
            "image 3, field 'filename'",
            "first seen as image 1",
        ),
        (lambda d: d.update(dataset="coco"), "field 'dataset'", "'coco'"),
    ],
)
def test_karpathy_errors_name_image_and_field(tmp_path, mutate, where, problem):
    path = _karpathy_with(tmp_path, mutate)

    with pytest.raises(DataFormatError) as err:
        read_flickr30k(path, split="all")
    assert str(err.value).startswith(f"{path}, {where}: ")
    assert problem in str(err.value)


@pytest.mark.parametrize(
    ("lines", "where"),
    [
        (["1000092795.jpg#0\tTwo men .", "1000092795.jpg#1 no tab here ."], "line 2: "),
        (
            ["1000092795.jpg#0\tTwo men .", "1000092795.jpg\tno caption number ."],
            "line 2, field 'image': ",
        ),
        (["1000092795.jpg#0\tTwo men .", "", "1000092795.jpg#1\t  "], "line 3, field 'caption': "),
        (
            ["1000092795.jpg#0\tTwo men .", "1000092795.jpg#0\tagain ."],
            "line 2, field 'image': duplicate",
        ),
    ],
)
def test_token_errors_name_line_and_field(tmp_path, lines, where):
    path = tmp_path / "results.token"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    with pytest.raises(DataFormatError, match=f"^{re.escape(str(path))}, {where}"):
        read_flickr30k(path, split="all")


def test_lavis_errors_name_record_and_field(tmp_path):
    path = tmp_path / "flickr30k_test.json"
    path.write_text(
        json.dumps(
            [
                {"image": "flickr30k-images/1.jpg", "caption": ["a dog"]},
                {"image": "flickr30k-images/2.jpg", "caption": "a cat"},
            ]
        )
    )

    with pytest.raises(
        DataFormatError, match=rf"^{re.escape(str(path))}, record 1, field 'caption': .*train"
    ):
        read_flickr30k(path)


def test_unknown_content_and_bad_json(tmp_path):
    csv = tmp_path / "results.csv"
    csv.write_text("image_name| comment_number| comment\n1000092795.jpg| 0| Two men .\n")
    with pytest.raises(DataFormatError, match=r"results.csv, line 1: expected one of Karpathy"):
        read_flickr30k(csv, split="all")

    broken = tmp_path / "dataset_flickr30k.json"
    broken.write_text('{"images": [')
    with pytest.raises(DataFormatError, match=r"dataset_flickr30k.json: invalid JSON"):
        read_flickr30k(broken)


def test_missing_images_reported_at_once(tmp_path):
    root = tmp_path / "flickr30k-images"
    root.mkdir()
    (root / "1007129816.jpg").write_bytes(b"jpg")
    path = write_karpathy(tmp_path / "dataset_flickr30k.json")

    assert read_flickr30k(path, media_root=root).media_root == str(root)  # not checked by default
    with pytest.raises(FileNotFoundError) as err:
        read_flickr30k(path, split="all", media_root=root, check_media=True)
    message = str(err.value)
    assert "3 of 4 media files are missing" in message
    for name in ("1000092795.jpg", "1009434119.jpg", "101362133.jpg"):
        assert name in message


def test_registered_by_name():
    assert READERS.get("flickr30k") is read_flickr30k
