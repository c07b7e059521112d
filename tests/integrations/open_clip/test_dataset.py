"""Image-text samples for open_clip_train: JSON Lines and CSV, views, budgets, short captions."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

pytest.importorskip("open_clip_train")
import open_clip  # noqa: E402

from vlr_plugins.data import draw_item  # noqa: E402
from vlr_plugins.errors import DataFormatError  # noqa: E402
from vlr_plugins.integrations.open_clip import (  # noqa: E402
    SampleTokenizer,
    TextViewsImageDataset,
    collate_text_batch,
    first_sentence,
    read_image_text_samples,
)
from vlr_plugins.recipe import TextView, TextViews  # noqa: E402

TOKENIZER = open_clip.get_tokenizer(
    "ViT-B-32"
)  # 77 tokens; the BPE vocabulary ships with open_clip


def test_jsonl_and_csv_give_samples_with_image_paths(tiny_data):
    jsonl = read_image_text_samples(tiny_data["jsonl"])
    assert len(jsonl) == 8 and all(Path(s.media).is_file() for s in jsonl)
    sample = jsonl[1]
    assert (
        sample.id == "img1"
        and sample.caption == "a green square"
        and len(sample.hard_negatives) == 2
        and sample.media == str(Path(tiny_data["root"]) / "images/1.png")
    )
    csv = read_image_text_samples(tiny_data["csv"], image_key="filepath", caption_key="title")
    assert [s.caption for s in csv] == [s.caption for s in jsonl]
    assert [s.media for s in csv] == [s.media for s in jsonl] and csv[0].id == "0"


def test_reading_errors_name_the_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "caption": "x", "image": "a.png"}\n{"id": "b", "caption": "y"}\n')
    with pytest.raises(DataFormatError, match=r"bad.jsonl, line 2, field 'image'"):
        read_image_text_samples(bad)
    table = tmp_path / "t.csv"
    table.write_text("filepath\tcaption\na.png\tx\n")
    with pytest.raises(DataFormatError, match="no column 'title'"):
        read_image_text_samples(table, caption_key="title")
    table.write_text("filepath\ttitle\tid\na.png\tx\t7\nb.png\ty\t7\n")
    with pytest.raises(DataFormatError, match="t.csv, line 3, field 'id': duplicate id '7'"):
        read_image_text_samples(table, caption_key="title")


def test_views_draw_texts_at_their_budget_padded_to_the_context(tiny_data):
    sample = read_image_text_samples(tiny_data["jsonl"])[0]
    views = TextViews(
        positives=(
            TextView("caption", 77),
            TextView("paragraph", 8),
            TextView("positives", 77, "random", 1),
        ),
        negatives=(TextView("hard_negatives", 77),),
    )
    item = SampleTokenizer(TOKENIZER, 77, views)(draw_item(sample, views, random.Random(0)))
    assert item.positives.shape == (3, 77) and item.negatives.shape == (2, 77)
    paragraph = item.positives[1]
    assert paragraph[7] == TOKENIZER.eot_token_id and not paragraph[8:].any(), (
        "cut at 8, then padding"
    )
    torch.testing.assert_close(item.positives[0], TOKENIZER(["a red square"])[0])


def test_short_captions_are_the_first_sentence_or_a_field(tiny_data):
    sample = read_image_text_samples(tiny_data["jsonl"])[0]
    assert first_sentence(sample.paragraph) == "A red square fills the picture"
    long_view = TextViews((TextView("paragraph", 77),))
    drawn = draw_item(sample, long_view, random.Random(0))
    item = SampleTokenizer(TOKENIZER, 77, long_view, short="first-sentence")(drawn)
    torch.testing.assert_close(item.short, TOKENIZER(["A red square fills the picture"])[0])
    item = SampleTokenizer(TOKENIZER, 77, long_view, short="field:caption")(drawn)
    torch.testing.assert_close(item.short, TOKENIZER(["a red square"])[0])


def test_budgets_beyond_the_context_are_refused():
    with pytest.raises(ValueError, match="max_tokens 128, more than the model's context length 77"):
        SampleTokenizer(TOKENIZER, 77, TextViews((TextView("paragraph", 128),)))
    with pytest.raises(ValueError, match="first-sentence"):
        SampleTokenizer(TOKENIZER, 77, TextViews((TextView("caption", 77),)), short="summary")


def test_the_dataset_yields_images_and_collates(tiny_data):
    import torchvision.transforms as T

    samples = read_image_text_samples(tiny_data["jsonl"])
    texts = SampleTokenizer(
        TOKENIZER, 77, TextViews((TextView("caption", 77), TextView("positives", 77)))
    )
    ds = TextViewsImageDataset(
        samples, texts, T.Compose([T.Resize(32), T.ToTensor()]), fraction=0.5
    )
    assert len(ds) == 4
    images, batch = collate_text_batch([ds[0], ds[1]])
    assert images.shape == (2, 3, 32, 32) and batch.text_owner.tolist() == [0, 0, 0, 1, 1, 1]
    missing = SampleTokenizer(TOKENIZER, 77, TextViews((TextView("positives", 77, "first", 3),)))
    with pytest.raises(DataFormatError, match="needs 3"):
        TextViewsImageDataset(samples, missing, T.ToTensor(), source=tiny_data["jsonl"])
