"""read_msvd: AllVideoDescriptions.txt with a split list, the VindLU-style JSON, never a pickle."""

from __future__ import annotations

import json
import pickle

import pytest

from vlr_plugins.data.readers import read_msvd
from vlr_plugins.errors import DataFormatError

DESCRIPTIONS = """# Microsoft Research Video Description Corpus
# VideoID Description
-4wsuPCjDBc_5_15 a squirrel is eating a peanut in it's shell.
-4wsuPCjDBc_5_15 A chipmunk is eating.

-7KMZQEsJW4_205_208 a woman is slicing a tomato.
-8y1Q0rA3n8_108_115 a man plays a guitar.
-7KMZQEsJW4_205_208 Someone is cutting tomatoes.
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_descriptions_restricted_to_the_split_list_in_its_order(tmp_path):
    path = write(tmp_path, "AllVideoDescriptions.txt", DESCRIPTIONS)
    split = write(tmp_path, "test_list.txt", "-7KMZQEsJW4_205_208\n-4wsuPCjDBc_5_15\n")

    msvd = read_msvd(path, split_list=split)

    assert msvd.name == "msvd"
    assert msvd.item_ids == ("-7KMZQEsJW4_205_208", "-4wsuPCjDBc_5_15")
    assert msvd.media == ("-7KMZQEsJW4_205_208.avi", "-4wsuPCjDBc_5_15.avi")
    assert msvd.texts_of(0) == ["a woman is slicing a tomato.", "Someone is cutting tomatoes."]
    assert msvd.texts_of(1) == [
        "a squirrel is eating a peanut in it's shell.",
        "A chipmunk is eating.",
    ]
    assert msvd.text_owner.tolist() == [0, 0, 1, 1]
    assert msvd.kinds() == ["caption"]


def test_without_a_split_list_every_described_clip(tmp_path):
    msvd = read_msvd(write(tmp_path, "AllVideoDescriptions.txt", DESCRIPTIONS))

    assert msvd.item_ids == ("-4wsuPCjDBc_5_15", "-7KMZQEsJW4_205_208", "-8y1Q0rA3n8_108_115")


def test_vindlu_style_json(tmp_path):
    path = write(
        tmp_path,
        "msvd_ret_test.json",
        json.dumps(
            [{"video": "-4wsuPCjDBc_5_15.avi", "caption": ["a squirrel eats", "a chipmunk eats"]}]
        ),
    )

    msvd = read_msvd(path)

    assert msvd.item_ids == ("-4wsuPCjDBc_5_15",)
    assert msvd.texts == ("a squirrel eats", "a chipmunk eats")


def test_a_pickle_is_refused_unopened(tmp_path):
    path = tmp_path / "raw-captions.pkl"
    path.write_bytes(pickle.dumps({"clip": [["a", "dog"]]}))

    with pytest.raises(DataFormatError, match="refusing to unpickle.*AllVideoDescriptions.txt"):
        read_msvd(path)


def test_split_clip_without_sentences_names_the_split_line(tmp_path):
    path = write(tmp_path, "AllVideoDescriptions.txt", DESCRIPTIONS)
    split = write(tmp_path, "test_list.txt", "-4wsuPCjDBc_5_15\n\nnot_described_1_2\n")

    with pytest.raises(DataFormatError) as err:
        read_msvd(path, split_list=split)

    assert str(split) in str(err.value) and "line 3" in str(err.value)
    assert "not_described_1_2" in str(err.value)


def test_line_without_sentence(tmp_path):
    path = write(tmp_path, "AllVideoDescriptions.txt", DESCRIPTIONS + "lonely_clip_1_2\n")

    with pytest.raises(DataFormatError) as err:
        read_msvd(path)

    assert "line 9" in str(err.value) and err.value.field == "sentence"


def test_malformed_json_names_record_and_field(tmp_path):
    path = write(
        tmp_path,
        "msvd_ret_test.json",
        json.dumps(
            [{"video": "a.avi", "caption": ["ok"]}, {"video": "b.avi", "caption": ["ok", ""]}]
        ),
    )

    with pytest.raises(DataFormatError) as err:
        read_msvd(path)

    assert "record 1" in str(err.value) and err.value.field == "caption[1]"


def test_missing_clips_are_listed_all_at_once(tmp_path):
    path = write(tmp_path, "AllVideoDescriptions.txt", DESCRIPTIONS)
    (tmp_path / "-7KMZQEsJW4_205_208.avi").write_bytes(b"")

    with pytest.raises(FileNotFoundError) as err:
        read_msvd(path, media_root=tmp_path, check_media=True)

    assert "2 of 3" in str(err.value)
    assert "-4wsuPCjDBc_5_15.avi" in str(err.value) and "-8y1Q0rA3n8_108_115.avi" in str(err.value)
