"""read_lsmdc: LSMDC16_challenge_1000_publictect.csv (tab-separated, six fields, no header)."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.data.readers import read_lsmdc
from vlr_plugins.errors import DataFormatError

ROWS = [
    [
        "1004_Juno_00.00.30.312-00.00.33.112",
        "00.00.30.312",
        "00.00.33.112",
        "00.00.30.000",
        "00.00.34.000",
        "SOMEONE walks down the street.",
    ],
    [
        "3001_21_JUMP_STREET_00.01.11.532-00.01.14.099",
        "00.01.11.532",
        "00.01.14.099",
        "00.01.11.000",
        "00.01.15.000",
        "He looks at SOMEONE, smiling.",
    ],
]


def write(tmp_path, rows, name="LSMDC16_challenge_1000_publictect.csv"):
    path = tmp_path / name
    path.write_text("".join("\t".join(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_clips_and_sentences(tmp_path):
    lsmdc = read_lsmdc(write(tmp_path, ROWS))

    assert lsmdc.name == "lsmdc"
    assert lsmdc.item_ids == (
        "1004_Juno_00.00.30.312-00.00.33.112",
        "3001_21_JUMP_STREET_00.01.11.532-00.01.14.099",
    )
    assert lsmdc.media == (
        "1004_Juno/1004_Juno_00.00.30.312-00.00.33.112.avi",
        "3001_21_JUMP_STREET/3001_21_JUMP_STREET_00.01.11.532-00.01.14.099.avi",
    )
    assert lsmdc.texts == ("SOMEONE walks down the street.", "He looks at SOMEONE, smiling.")
    assert lsmdc.text_owner.tolist() == [0, 1]
    assert lsmdc.kinds() == ["caption"]


def test_a_repeated_clip_gets_all_its_sentences(tmp_path):
    lsmdc = read_lsmdc(write(tmp_path, [*ROWS, [*ROWS[0][:5], "Then SOMEONE stops."]]))

    assert len(lsmdc) == 2
    assert lsmdc.texts_of(0) == ["SOMEONE walks down the street.", "Then SOMEONE stops."]


def test_vindlu_style_json(tmp_path):
    path = tmp_path / "lsmdc_ret_test_1000.json"
    path.write_text(
        json.dumps(
            [
                {
                    "video": "1004_Juno/1004_Juno_00.00.30.312-00.00.33.112.avi",
                    "caption": "SOMEONE walks.",
                }
            ]
        )
    )

    lsmdc = read_lsmdc(path)

    assert lsmdc.item_ids == ("1004_Juno_00.00.30.312-00.00.33.112",)
    assert lsmdc.media == ("1004_Juno/1004_Juno_00.00.30.312-00.00.33.112.avi",)


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (ROWS[0][:5], None),  # five fields
        (["", *ROWS[0][1:]], "clip id"),
        ([*ROWS[0][:5], "  "], "sentence"),
    ],
)
def test_malformed_lines_name_file_line_and_field(tmp_path, bad, field):
    path = write(tmp_path, [ROWS[1], bad])

    with pytest.raises(DataFormatError) as err:
        read_lsmdc(path)

    assert str(path) in str(err.value) and "line 2" in str(err.value)
    assert err.value.field == field


def test_missing_clips_are_listed_all_at_once(tmp_path):
    (tmp_path / "1004_Juno").mkdir()
    (tmp_path / "1004_Juno" / "1004_Juno_00.00.30.312-00.00.33.112.avi").write_bytes(b"")
    third = ["0001_American_Beauty_00.00.51.926-00.00.54.129", *ROWS[0][1:5], "A bag flies."]

    with pytest.raises(FileNotFoundError) as err:
        read_lsmdc(write(tmp_path, [*ROWS, third]), media_root=tmp_path, check_media=True)

    assert "2 of 3" in str(err.value)
    assert "3001_21_JUMP_STREET_00.01.11.532" in str(err.value)
    assert "0001_American_Beauty_00.00.51.926" in str(err.value)
