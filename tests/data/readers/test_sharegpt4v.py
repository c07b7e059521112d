"""read_sharegpt4v: first gpt turn as the text, and a per-source sample that is reproducible."""

from __future__ import annotations

import json
import random

import pytest

from vlr_plugins.data.readers import PAPER_SAMPLE, read_sharegpt4v
from vlr_plugins.errors import DataFormatError
from vlr_plugins.registry import READERS

PROMPT = "<image>\nWhat do you see happening in this image?"


def record(item_id, image, caption, more_turns=()):
    turns = [{"from": "human", "value": PROMPT}, {"from": "gpt", "value": caption}, *more_turns]
    return {"id": item_id, "image": image, "conversations": turns}


def corpus(n_coco=12, n_llava=8, n_sam=3):
    """Records as in sharegpt4v_instruct_gpt4-vision_cap100k.json, sources interleaved."""
    recs = [
        record(f"{i:012d}", f"coco/train2017/{i:012d}.jpg", f"COCO photo {i}. It shows ...")
        for i in range(n_coco)
    ]
    recs += [
        record(
            f"{i:09d}",
            f"llava/llava_pretrain/images/{i // 10000:05d}/{i:09d}.jpg",
            f"LCS image {i}.\n\nIn the foreground ...",
        )
        for i in range(n_llava)
    ]
    recs += [record(f"sa_{i}", f"sam/images/sa_{i}.jpg", f"SAM image {i}.") for i in range(n_sam)]
    random.Random(7).shuffle(recs)
    return recs


def write(path, records):
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def test_whole_file_one_text_per_item(tmp_path):
    recs = corpus()
    recs[0] = record(
        "x1",
        "coco/train2017/x1.jpg",
        "the caption",
        more_turns=[{"from": "human", "value": "And?"}, {"from": "gpt", "value": "later turn"}],
    )
    rs = read_sharegpt4v(write(tmp_path / "cap.json", recs))

    assert rs.name == "sharegpt4v"
    assert list(rs.item_ids) == [r["id"] for r in recs]  # file order
    assert rs.media == tuple(r["image"] for r in recs)
    assert rs.text_owner.tolist() == list(range(len(recs)))
    assert rs.texts[0] == "the caption"  # the first gpt turn only
    assert rs.texts[1:] == tuple(r["conversations"][1]["value"] for r in recs[1:])


def test_sample_counts_are_exact_per_source(tmp_path):
    rs = read_sharegpt4v(write(tmp_path / "cap.json", corpus()), sample={"coco": 5, "llava": 3})

    assert rs.name == "sharegpt4v-8"
    assert len(rs) == 8
    assert [m.split("/")[0] for m in rs.media] == ["coco"] * 5 + ["llava"] * 3
    assert list(rs.item_ids[:5]) == sorted(rs.item_ids[:5])  # sorted by id within a source
    for i, item in enumerate(rs.item_ids):
        assert item in rs.media[i] and str(int(item)) in rs.texts[i]


def test_sample_is_reproducible_and_independent_of_file_order(tmp_path):
    recs = corpus()
    a = read_sharegpt4v(write(tmp_path / "a.json", recs), sample={"coco": 5, "llava": 3}, seed=3)
    b = read_sharegpt4v(
        write(tmp_path / "b.json", recs[::-1]), sample={"coco": 5, "llava": 3}, seed=3
    )
    c = read_sharegpt4v(tmp_path / "a.json", sample={"coco": 5, "llava": 3}, seed=4)

    assert (a.item_ids, a.texts, a.media) == (b.item_ids, b.texts, b.media)
    assert a.item_ids != c.item_ids


def test_paper_sample(tmp_path):
    assert PAPER_SAMPLE == {"coco": 50000, "llava": 30000}
    with pytest.raises(TypeError):
        PAPER_SAMPLE["coco"] = 1  # type: ignore[index]

    with pytest.raises(ValueError) as err:
        read_sharegpt4v(write(tmp_path / "cap.json", corpus()), sample=PAPER_SAMPLE)
    message = str(err.value)  # every short source, in one error
    assert "'coco': asked for 50000, found 12" in message
    assert "'llava': asked for 30000, found 8" in message


def test_thousands_name_the_set(tmp_path):
    rs = read_sharegpt4v(
        write(tmp_path / "cap.json", corpus(n_coco=1200, n_llava=800, n_sam=0)),
        sample={"coco": 1200, "llava": 800},
    )
    assert (rs.name, len(rs)) == ("sharegpt4v-2k", 2000)


@pytest.mark.parametrize(
    ("sample", "problem"),
    [
        ({"coco": 0}, "positive integer"),
        ({"coco": 2.5}, "positive integer"),
        ({}, "at least one source"),
        ({"coco": 1, "coco/train2017": 1}, "overlap"),
    ],
)
def test_bad_samples_are_refused(tmp_path, sample, problem):
    with pytest.raises(ValueError, match=problem):
        read_sharegpt4v(write(tmp_path / "cap.json", corpus()), sample=sample)


def _broken(mutate):
    recs = [
        record("a", "coco/train2017/a.jpg", "cap a"),
        record("b", "coco/train2017/b.jpg", "cap b"),
        record("c", "llava/llava_pretrain/images/00000/c.jpg", "cap c"),
    ]
    mutate(recs)
    return recs


@pytest.mark.parametrize(
    ("recs", "where", "problem"),
    [
        (
            _broken(lambda r: r[2]["conversations"].pop(1)),
            "record 2, field 'conversations'",
            "a turn from 'gpt'",
        ),
        (
            _broken(lambda r: r[1]["conversations"][1].update(value=None)),
            "record 1, field 'conversations[1].value'",
            "found null",
        ),
        (
            _broken(lambda r: r[1]["conversations"][1].update(value=" ")),
            "record 1, field 'conversations[1].value'",
            "empty string",
        ),
        (_broken(lambda r: r[0].pop("id")), "record 0, field 'id'", "found null"),
        (_broken(lambda r: r[2].update(id="a")), "record 2, field 'id'", "first seen as record 0"),
        (
            _broken(lambda r: r[1].update(image=["coco/x.jpg"])),
            "record 1, field 'image'",
            "non-empty string",
        ),
        (_broken(lambda r: r.append("oops")), "record 3", "expected an object, found str"),
    ],
)
def test_errors_name_record_and_field(tmp_path, recs, where, problem):
    path = write(tmp_path / "cap.json", recs)

    # validation covers every record, sampled or not
    with pytest.raises(DataFormatError) as err:
        read_sharegpt4v(path, sample={"coco": 1})
    assert str(err.value).startswith(f"{path}, {where}: ")
    assert problem in str(err.value)


def test_not_a_list(tmp_path):
    with pytest.raises(DataFormatError, match="expected a JSON list"):
        read_sharegpt4v(write(tmp_path / "cap.json", {"data": corpus()}))


def test_missing_images_reported_at_once(tmp_path):
    recs = corpus(n_coco=3, n_llava=2, n_sam=0)
    present = recs[0]["image"]
    (tmp_path / present).parent.mkdir(parents=True)
    (tmp_path / present).write_bytes(b"jpg")

    with pytest.raises(FileNotFoundError) as err:
        read_sharegpt4v(write(tmp_path / "cap.json", recs), media_root=tmp_path, check_media=True)
    assert "4 of 5 media files are missing" in str(err.value)
    assert all(r["image"] in str(err.value) for r in recs[1:])


def test_registered_by_name():
    assert READERS.get("sharegpt4v") is read_sharegpt4v
