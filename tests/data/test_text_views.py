"""draw_texts / check_samples_have_views: the texts a recipe's views take from a sample."""

from __future__ import annotations

import random

import pytest

from vlr_plugins.data import ParagraphSample
from vlr_plugins.data.text_views import DrawnText, check_samples_have_views, draw_texts
from vlr_plugins.errors import DataFormatError
from vlr_plugins.recipe import TextView

POSITIVES = ("a dog on grass", "a brown dog", "a puppy outdoors", "dog in a park", "a pet dog")
NEGATIVES = ("a cat on grass", "a dog on snow")

SAMPLE = ParagraphSample(
    id="img1",
    caption="my dog rex",
    positives=POSITIVES,
    hard_negatives=NEGATIVES,
    paragraph="A brown dog stands on green grass. Trees are behind it.",
)


def test_take_all_keeps_every_text_and_the_view_order():
    views = [
        TextView("paragraph", max_tokens=128),
        TextView("caption", max_tokens=77),
        TextView("positives", max_tokens=40, take="all"),
    ]

    drawn = draw_texts(SAMPLE, views, random.Random(0))

    assert drawn == [
        DrawnText(SAMPLE.paragraph, 128),
        DrawnText("my dog rex", 77),
        *(DrawnText(t, 40) for t in POSITIVES),
    ]


def test_take_first_takes_a_prefix():
    drawn = draw_texts(SAMPLE, [TextView("positives", 77, take="first", count=2),
                                TextView("hard_negatives", 30, take="first", count=1)],
                       random.Random(0))
    assert drawn == [DrawnText(POSITIVES[0], 77), DrawnText(POSITIVES[1], 77),
                     DrawnText(NEGATIVES[0], 30)]


def test_take_random_draws_distinct_texts_of_the_field():
    views = [TextView("caption", 77), TextView("positives", 50, take="random", count=3)]
    rng = random.Random(1)
    for _ in range(20):
        drawn = draw_texts(SAMPLE, views, rng)
        assert drawn[0] == DrawnText("my dog rex", 77)
        texts = [d.text for d in drawn[1:]]
        assert len(texts) == 3 and len(set(texts)) == 3
        assert set(texts) <= set(POSITIVES)
        assert {d.max_tokens for d in drawn[1:]} == {50}


def test_random_draws_are_reproducible_with_the_same_seed():
    views = [TextView("positives", 77, take="random", count=2)]

    def draws(seed):
        rng = random.Random(seed)
        return [draw_texts(SAMPLE, views, rng) for _ in range(10)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)
    # a new draw at every step, not one fixed choice
    assert len({tuple(d.text for d in drawn) for drawn in draws(7)}) > 1


def test_random_draws_eventually_reach_every_text():
    views = [TextView("positives", 77, take="random", count=1)]
    rng = random.Random(3)
    seen = {draw_texts(SAMPLE, views, rng)[0].text for _ in range(200)}
    assert seen == set(POSITIVES)


def test_random_count_equal_to_the_field_is_a_permutation():
    views = [TextView("positives", 77, take="random", count=5)]
    drawn = draw_texts(SAMPLE, views, random.Random(0))
    assert sorted(d.text for d in drawn) == sorted(POSITIVES)


def test_check_passes_when_every_sample_has_what_views_need():
    views = [TextView("caption", 77), TextView("positives", 77, take="random", count=5),
             TextView("paragraph", 128)]
    check_samples_have_views([SAMPLE, SAMPLE], views, "train.jsonl")


def test_check_names_file_record_and_field_for_a_missing_paragraph():
    without = ParagraphSample(id="img2", caption="a cat", positives=POSITIVES)
    views = [TextView("caption", 77), TextView("paragraph", 128)]

    with pytest.raises(DataFormatError) as info:
        check_samples_have_views([SAMPLE, without], views, "train.jsonl")

    err = info.value
    assert (err.path, err.record, err.field) == ("train.jsonl", 2, "paragraph")
    assert str(err).startswith("train.jsonl, record 2, field 'paragraph': ")
    assert "'img2' has 0 text(s)" in str(err) and "needs 1" in str(err)


def test_check_names_the_view_when_a_field_has_too_few_texts():
    short = ParagraphSample(id="img3", caption="a cat", positives=POSITIVES[:3])
    views = [TextView("positives", 77, take="random", count=4)]

    with pytest.raises(DataFormatError) as info:
        check_samples_have_views([short, SAMPLE], views, "data/train.jsonl")

    err = info.value
    assert (err.path, err.record, err.field) == ("data/train.jsonl", 1, "positives")
    assert "'img3' has 3 text(s)" in str(err)
    assert "take: random, count: 4" in str(err) and "needs 4" in str(err)


def test_seeded_fraction_keeps_a_reproducible_ordered_subset():
    from vlr_plugins.data.text_views import seeded_fraction

    items = [f"s{i}" for i in range(40)]
    a = seeded_fraction(items, 0.25, seed=3)
    assert len(a) == 10 and a == sorted(a, key=items.index) and set(a) <= set(items)
    assert a == seeded_fraction(items, 0.25, seed=3) and a != seeded_fraction(items, 0.25, seed=4)
    assert seeded_fraction(items, 1.0, seed=3) == items and len(seeded_fraction(items, 0.001, 0)) == 1
    with pytest.raises(ValueError, match="fraction"):
        seeded_fraction(items, 0.0, 0)


def test_a_candidate_set_pools_its_fields_and_names_the_draws():
    # MVC's summary view: one caption drawn uniformly from the pooled candidate fields
    view = TextView(("caption", "paragraph"), 77, take="random", count=1, name="summary")
    assert view.fields == ("caption", "paragraph") and view.label == "caption|paragraph"
    assert view.texts_of(SAMPLE) == (SAMPLE.caption, SAMPLE.paragraph)
    rng = random.Random(0)
    draws = [draw_texts(SAMPLE, [view], rng) for _ in range(400)]
    assert all(len(d) == 1 and d[0].view == "summary" and d[0].max_tokens == 77 for d in draws)
    share = sum(d[0].text == SAMPLE.caption for d in draws) / len(draws)
    assert 0.42 < share < 0.58  # uniform over the two candidates (4 sigma at n = 400: +-0.1)
    # a sample without a paragraph still has one candidate; with take all every text is kept
    without = ParagraphSample(id="x", caption="c")
    assert [d.text for d in draw_texts(without, [view], rng)] == ["c"]
    every = TextView(["caption", "positives"], 77)  # a list from YAML becomes a tuple
    assert every.field == ("caption", "positives")
    assert [d.text for d in draw_texts(SAMPLE, [every], rng)] == [SAMPLE.caption, *POSITIVES]
    assert all(d.view is None for d in draw_texts(SAMPLE, [every], rng))


def test_check_names_a_candidate_set_by_its_fields():
    view = TextView(("paragraph", "hard_negatives"), 77, take="random", count=1)
    check_samples_have_views([SAMPLE], [view], "t.jsonl")
    bare = ParagraphSample(id="b", caption="c")
    with pytest.raises(DataFormatError, match=r"t.jsonl, record 1, field 'paragraph\|hard_negatives'"):
        check_samples_have_views([bare], [view], "t.jsonl")


def test_views_bound_the_positives_per_sample():
    from vlr_plugins.data import TextViews

    assert TextViews((TextView("caption", 77), TextView("paragraph", 128))).max_positives == 2
    assert TextViews((TextView(("caption", "paragraph"), 77),)).max_positives == 2
    assert TextViews((TextView(("caption", "positives"), 77, "random", 1),)).max_positives == 1
    assert TextViews((TextView("positives", 77),)).max_positives is None
