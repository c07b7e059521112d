"""read_dream1k: Tarsier's DREAM-1k.jsonl (both branches) and the hub's metadata.json."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.data.readers import read_dream1k
from vlr_plugins.errors import DataFormatError


def tarsier_main(vid, description, events, dataset="DREAM/movie_animation", video="<placeholder>"):
    """One line of Tarsier's main-branch DREAM-1k.jsonl (chat ``messages``)."""
    return {
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "video",
                        "video": {"video_file": video},
                        "text": None,
                        "reference": None,
                    },
                    {
                        "type": "text",
                        "text": "Describe the video in detail.",
                        "video": None,
                        "reference": None,
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "", "video": None, "reference": description},
                ],
            },
        ],
        "dataset": dataset,
        "task": "video/caption",
        "idx": vid,
        "vid": vid,
        "extra_info": {
            "duration": 5.0,
            "events": events,
            "n_events": len(events),
            "n_shots": 1,
            "n_subjects": 1,
        },
    }


def tarsier_branch(vid, description, events, dataset="DREAM/youtube"):
    """One line of the ``tarsier`` branch's DREAM-1k.jsonl (``text.response``)."""
    return {
        "idx": vid,
        "dataset": dataset,
        "text": {"prompt": "<video>\nDescribe the video in detail.", "response": description},
        "video_file": "<placeholder>",
        "vid": vid,
        "extra_info": {"duration": 4.0, "events": events, "n_events": len(events)},
    }


def write_jsonl(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def test_tarsier_main_branch(tmp_path):
    path = write_jsonl(
        tmp_path / "DREAM-1k.jsonl",
        [
            tarsier_main(1, "A cat jumps, then sits.", ["A cat jumps.", "The cat sits."]),
            tarsier_main(
                2,
                "A car drives away.",
                ["A car drives away."],
                dataset="DREAM/videvo",
                video="/data/dream/2.mp4",
            ),
        ],
    )

    dream = read_dream1k(path)

    assert dream.name == "dream1k"
    assert dream.item_ids == ("1", "2")
    # an unfilled placeholder becomes <vid>.mp4; a filled-in path is kept
    assert dream.media == ("1.mp4", "/data/dream/2.mp4")
    assert dream.categories == ("movie_animation", "videvo")
    assert dream.texts == (
        "A cat jumps, then sits.",
        "A cat jumps.",
        "The cat sits.",
        "A car drives away.",
        "A car drives away.",
    )
    assert dream.text_kinds == ("detailed", "event", "event", "detailed", "event")
    assert dream.text_owner.tolist() == [0, 0, 0, 1, 1]
    detailed, events = dream.with_texts("detailed"), dream.with_texts("event")
    assert detailed.texts == ("A cat jumps, then sits.", "A car drives away.")
    assert events.text_owner.tolist() == [0, 0, 1]


def test_tarsier_branch_and_video_ext(tmp_path):
    path = write_jsonl(
        tmp_path / "DREAM-1k.jsonl", [tarsier_branch(7, "Two birds fly.", ["Birds fly."])]
    )

    dream = read_dream1k(path, video_ext=".webm")

    assert dream.item_ids == ("7",)
    assert dream.media == ("7.webm",)
    assert dream.categories == ("youtube",)
    assert dream.texts == ("Two birds fly.", "Birds fly.")


def test_hub_metadata_json(tmp_path):
    path = tmp_path / "metadata.json"
    path.write_text(
        json.dumps(
            [
                {
                    "idx": "1",
                    "video_file": "DREAM-1K_videos/1.mp4",
                    "source": "movie_animation",
                    "duration": "5.09",
                    "description": "A man waves.",
                    "events": ["A man waves."],
                    "n_subjects": "1",
                    "n_shots": "1",
                    "n_events": "1",
                },
                {
                    "idx": "2",
                    "video_file": "DREAM-1K_videos/2.mp4",
                    "source": "youtube",
                    "duration": "3.0",
                    "description": "A dog runs and barks.",
                    "events": json.dumps(["A dog runs.", "The dog barks."]),  # a JSON-encoded list
                    "n_subjects": "1",
                    "n_shots": "1",
                    "n_events": "2",
                },
            ]
        ),
        encoding="utf-8",
    )

    dream = read_dream1k(path)

    assert dream.item_ids == ("1", "2")
    assert dream.media == ("1.mp4", "2.mp4")
    assert dream.categories == ("movie_animation", "youtube")
    assert dream.with_texts("event").texts == ("A man waves.", "A dog runs.", "The dog barks.")


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({**tarsier_branch(2, "x", ["y"]), "extra_info": {"events": []}}, "extra_info.events"),
        (
            {**tarsier_branch(2, "x", ["y"]), "extra_info": {"events": ["ok", 3]}},
            "extra_info.events[1]",
        ),
        ({**tarsier_branch(2, "x", ["y"]), "text": {"response": ""}}, "text.response"),
        ({**tarsier_branch(2, "x", ["y"]), "vid": None}, "vid"),
        ({**tarsier_branch(2, "x", ["y"]), "dataset": None}, "dataset"),
        ({k: v for k, v in tarsier_branch(2, "x", ["y"]).items() if k != "text"}, None),
        (tarsier_branch(1, "x", ["y"]), "vid"),  # duplicate of line 1
    ],
)
def test_malformed_lines_name_file_line_and_field(tmp_path, bad, field):
    path = write_jsonl(tmp_path / "DREAM-1k.jsonl", [tarsier_branch(1, "ok", ["ok"]), bad])

    with pytest.raises(DataFormatError) as err:
        read_dream1k(path)

    assert str(path) in str(err.value) and "line 2" in str(err.value)
    assert err.value.field == field


def test_missing_videos_are_listed_all_at_once(tmp_path):
    path = write_jsonl(
        tmp_path / "DREAM-1k.jsonl", [tarsier_branch(i, f"d{i}", [f"e{i}"]) for i in (1, 2, 3)]
    )
    (tmp_path / "2.mp4").write_bytes(b"")

    with pytest.raises(FileNotFoundError) as err:
        read_dream1k(path, media_root=tmp_path, check_media=True)

    assert "2 of 3" in str(err.value) and "1.mp4" in str(err.value) and "3.mp4" in str(err.value)


def test_malformed_hub_record_and_chat_message(tmp_path):
    hub = tmp_path / "metadata.json"
    hub.write_text(
        json.dumps(
            [
                {
                    "idx": "1",
                    "video_file": "1.mp4",
                    "source": "youtube",
                    "description": "ok",
                    "events": ["ok"],
                },
                {
                    "idx": "2",
                    "video_file": "2.mp4",
                    "source": "youtube",
                    "description": "ok",
                    "events": "not a list",
                },
            ]
        )
    )
    chat = tarsier_main(1, "x", ["y"])
    chat["messages"][1]["content"].append({"type": "text", "reference": "a second reference"})
    jsonl = write_jsonl(tmp_path / "DREAM-1k.jsonl", [chat])

    with pytest.raises(DataFormatError) as hub_err:
        read_dream1k(hub)
    with pytest.raises(DataFormatError) as chat_err:
        read_dream1k(jsonl)

    assert "record 1" in str(hub_err.value) and hub_err.value.field == "events"
    assert "line 1" in str(chat_err.value) and chat_err.value.field == "messages"
