"""MVC samples (data/mvc_samples.py): the JSON Lines / Parquet schema, its refusals, and the
paper's per-step view sampling as the core dataset's text views."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from vlr_plugins.data import (
    MVC_DETAILED_FIELDS,
    MVC_SUMMARY_FIELDS,
    MVC_TEXT_FIELDS,
    MVCSample,
    TextView,
    TextViews,
    TextViewsDataset,
    read_mvc_samples,
    write_mvc_samples,
)
from vlr_plugins.errors import DataFormatError

FULL = {"id": "v1", "video": "clips/v1.mp4", "start": 1.5, "end": 4, "O": "a dog", "S1": "a dog runs",
        "S2": "a brown dog runs on grass", "D1": "raw one", "D2": "raw two", "D1*": "refined one",
        "D2*": "refined two", "P1": "an animal moves", "P2": "a pet is outside", "meta": {"src": "x"}}


def _jsonl(tmp_path, *records, name="train.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_reads_every_field_and_resolves_video_paths(tmp_path):
    path = _jsonl(tmp_path, FULL, {"id": 7, "video": "/abs/v2.mp4", "S1": "only a summary"})
    first, second = read_mvc_samples(path)
    assert first.id == "v1" and first.video == str(tmp_path / "clips/v1.mp4")
    assert first.window == (1.5, 4.0)
    assert [f for f, _ in first.captions] == list(MVC_TEXT_FIELDS)
    assert all(first.texts(f) == (FULL[f],) for f in MVC_TEXT_FIELDS)
    assert second.id == "7" and second.video == "/abs/v2.mp4" and second.window is None
    assert second.texts("S1") == ("only a summary",) and second.texts("O") == ()
    rooted = read_mvc_samples(path, video_root=tmp_path / "elsewhere")
    assert rooted[0].video == str(tmp_path / "elsewhere/clips/v1.mp4")


def test_write_then_read_round_trips(tmp_path):
    samples = read_mvc_samples(_jsonl(tmp_path, FULL, {"id": "v2", "video": "b.mp4", "P2": "x"}))
    back = read_mvc_samples(write_mvc_samples(samples, tmp_path / "out.jsonl"))
    assert back == samples


def test_hard_negatives_are_ids_of_the_corpus_and_round_trip(tmp_path):
    from vlr_plugins.data.mvc_samples import read_mvc_records

    path = _jsonl(tmp_path, {**FULL, "hard_negatives": [7, "v3"]}, {"id": 7, "video": "b.mp4", "O": "x"},
                  {"id": "v3", "video": "c.mp4", "O": "y", "hard_negatives": ["v1"]})
    samples = read_mvc_samples(path)
    assert [s.hard_negatives for s in samples] == [("7", "v3"), (), ("v1",)]
    back = read_mvc_samples(write_mvc_samples(samples, tmp_path / "out.jsonl"))
    assert back == samples
    records = read_mvc_records(path)  # the raw records kept, as read
    assert [(n, raw) for n, raw, _ in records] == [(i + 1, json.loads(line))
                                                   for i, line in enumerate(path.read_text().splitlines())]
    assert [s for _, _, s in records] == samples


def test_parquet_rows(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [{"id": "a", "video": "a.mp4", "O": "first", "D1*": None}, {"id": "b", "video": "b.mp4", "O": None,
                                                                     "D1*": "second"}]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    a, b = read_mvc_samples(path)
    assert a.texts("O") == ("first",) and a.texts("D1*") == ()
    assert b.texts("O") == () and b.texts("D1*") == ("second",)


@pytest.mark.parametrize("record, line, field, words", [
    ({"id": "a", "video": "a.mp4", "D1_star": "x", "O": "y"}, 2, "D1_star", "unknown field"),
    ({"id": "a", "video": "a.mp4"}, 2, None, "no caption"),
    ({"id": "a", "video": "a.mp4", "O": ""}, 2, "O", "non-empty string"),
    ({"id": "a", "video": "a.mp4", "S1": ["two", "texts"]}, 2, "S1", "expected a string"),
    ({"id": "a", "O": "x"}, 2, "video", "missing"),
    ({"video": "a.mp4", "O": "x"}, 2, "id", "missing"),
    ({"id": "a", "video": "a.mp4", "O": "x", "start": "0:01"}, 2, "start", "expected seconds"),
    ({"id": "a", "video": "a.mp4", "O": "x", "start": 3, "end": 2}, 2, "end", "after the start"),
    ({"id": "v1", "video": "a.mp4", "O": "x"}, 2, "id", "duplicate id"),
    ({"id": "a", "video": "a.mp4", "O": "x", "hard_negatives": "v1"}, 2, "hard_negatives", "list of video ids"),
    ({"id": "a", "video": "a.mp4", "O": "x", "hard_negatives": ["v1", True]}, 2, "hard_negatives", "index 1"),
    ({"id": "a", "video": "a.mp4", "O": "x", "hard_negatives": ["a"]}, 2, "hard_negatives", "own id"),
    ({"id": "a", "video": "a.mp4", "O": "x", "hard_negatives": ["v1", "v1"]}, 2, "hard_negatives", "twice"),
    ({"id": "a", "video": "a.mp4", "O": "x", "hard_negatives": ["v9"]}, 2, "hard_negatives", "no record"),
])
def test_bad_records_name_file_line_and_field(tmp_path, record, line, field, words):
    path = _jsonl(tmp_path, FULL, record)
    with pytest.raises(DataFormatError) as e:
        read_mvc_samples(path)
    message = str(e.value)
    assert str(path) in message and f"line {line}" in message and words in message
    if field is not None:
        assert field in message


def test_misspelt_view_gets_a_hint(tmp_path):
    with pytest.raises(DataFormatError, match=r"did you mean 'S1'"):
        read_mvc_samples(_jsonl(tmp_path, {"id": "a", "video": "a.mp4", "s1": "x"}))


def test_other_suffix_is_refused(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("id,video\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"\.csv"):
        read_mvc_samples(path)


def _paper_views() -> TextViews:
    return TextViews((TextView(MVC_SUMMARY_FIELDS, 128, "random", 1, name="summary"),
                      TextView(MVC_DETAILED_FIELDS, 128, "random", 1, name="detailed")))


def test_each_step_draws_one_summary_and_one_detailed_caption_uniformly(tmp_path):
    sample = read_mvc_samples(_jsonl(tmp_path, FULL))[0]
    dataset = TextViewsDataset([sample] * 4000, _paper_views())
    drawn = [dataset.item(i).positives for i in range(4000)]
    assert all([d.view for d in ds] == ["summary", "detailed"] for ds in drawn)
    by_text = {FULL[f]: f for f in MVC_TEXT_FIELDS}
    summary = Counter(by_text[ds[0].text] for ds in drawn)
    detailed = Counter(by_text[ds[1].text] for ds in drawn)
    assert set(summary) == set(MVC_SUMMARY_FIELDS) and set(detailed) == set(MVC_DETAILED_FIELDS)
    # uniform: each candidate near 1/3 (summary) and 1/4 (detailed) of 4000 draws
    assert all(abs(n / 4000 - 1 / 3) < 0.04 for n in summary.values())
    assert all(abs(n / 4000 - 1 / 4) < 0.04 for n in detailed.values())


def test_draws_are_seeded_and_a_missing_candidate_is_skipped(tmp_path):
    partial = {"id": "p", "video": "p.mp4", "S2": "only S2", "P1": "only P1"}
    samples = read_mvc_samples(_jsonl(tmp_path, FULL, partial))
    texts = []
    for seed in (5, 5, 6):  # the run's seeded torch generator (MMEngine's randomness.seed) and data.seed
        torch.manual_seed(0)
        dataset = TextViewsDataset(samples, _paper_views(), seed=seed)
        texts += [[d.text for d in dataset.item(i % 2).positives] for i in range(40)]
    assert texts[:40] == texts[40:80] and texts[:40] != texts[80:]
    assert all(t == ["only S2", "only P1"] for t in texts[1:40:2])


def test_sample_rejects_unknown_caption_fields():
    with pytest.raises(ValueError, match="no MVC caption field 'Q'"):
        MVCSample(id="a", video="a.mp4", captions={"Q": "x"})
    assert MVCSample(id="a", video="a.mp4", captions={"S2": "b", "O": "a"}).captions == (("O", "a"), ("S2", "b"))
