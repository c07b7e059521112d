"""The bad-input catalogue of ``vlr train mvc/...``: MVC corpora and MVC recipes.

Each row is a real bad input: a corpus written by the test (records pointing at the videos of
a test-made world) or a recipe value given with ``--set``, on top of the overrides that
shrink ``mvc/mvc_b`` to tiny towers. Every case must exit 2 without a traceback
(``_refusal.assert_refused``), name where the problem is (file, line, field or recipe key),
and leave no work dir behind.
"""

from __future__ import annotations

import json

import pytest
from _mvc_world import mvc_world, tiny_sets
from _refusal import assert_refused

pytest.importorskip("mmengine")
pytest.importorskip("av")


@pytest.fixture(scope="module")
def world():
    return mvc_world()


def _good(world) -> list[dict]:
    with open(world["train"], encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    root = world["train"].rsplit("/", 1)[0]
    return [{**r, "video": f"{root}/{r['video']}"} for r in records]


# name -> (how the corpus's records change (None: the good corpus), --set items, words the error names)
CORPUS = {
    "unknown field": (lambda rs: [rs[0], {**rs[1], "D1_star": "x"}, *rs[2:]], [],
                      ["line 2", "D1_star", "unknown field", "did you mean 'D1*'"]),
    "a view named in words": (lambda rs: [{**rs[0], "summary": "x"}, *rs[1:]], [],
                              ["line 1", "'summary'", "did you mean 'S1' or 'S2'"]),
    "a key misspelt": (lambda rs: [{**rs[0], "hard_negative": []}, *rs[1:]], [],
                       ["line 1", "'hard_negative'", "did you mean 'hard_negatives'"]),
    "misspelt view": (lambda rs: [{**rs[0], "s1": "x"}, *rs[1:]], [], ["line 1", "'s1'", "did you mean 'S1'"]),
    "no caption": (lambda rs: [*rs[:3], {"id": "bare", "video": rs[0]["video"]}, *rs[4:]], [],
                   ["line 4", "no caption"]),
    "caption not a string": (lambda rs: [{**rs[0], "S2": ["a", "b"]}, *rs[1:]], [], ["line 1", "S2", "string"]),
    "no video": (lambda rs: [*rs[:2], {k: v for k, v in rs[2].items() if k != "video"}, *rs[3:]], [],
                 ["line 3", "video", "missing"]),
    "end before start": (lambda rs: [{**rs[0], "start": 2.0, "end": 1.0}, *rs[1:]], [], ["line 1", "end"]),
    "negative start": (lambda rs: [{**rs[0], "start": -1}, *rs[1:]], [], ["line 1", "start", "seconds"]),
    "duplicate id": (lambda rs: [*rs, {**rs[1]}], [], ["line 9", "duplicate id", "line 2"]),
    "video file missing": (lambda rs: [{**rs[0], "video": rs[0]["video"].replace(".mp4", "_gone.mp4")}, *rs[1:]],
                           [], ["train00000_gone.mp4", "sample 'train00000'", "not there"]),
    "no caption for a view": (lambda rs: [{"id": "raw", "video": rs[0]["video"], "D1": "only raw"}, *rs[1:]], [],
                              ["sample 'raw'", "O|S1|S2", "needs 1"]),
    "hard negatives asked of a corpus without any": (lambda rs: rs, ["data.hard_negatives.per_anchor=1"],
                                                     ["--set data.hard_negatives", "no record of it has hard_negatives",
                                                      "vlr mine mvc"]),
    "hard negatives all outside the fraction kept": (
        lambda rs: [{**r, "hard_negatives": [rs[(i + 1) % len(rs)]["id"]]} for i, r in enumerate(rs)],
        ["data.hard_negatives.per_anchor=1", "data.fraction=0.125", "train.batch_size=2", "train.drop_last=false"],
        ["--set data.hard_negatives", "data.fraction keeps"]),
    "hard negative naming no video of the corpus": (
        lambda rs: [{**rs[0], "hard_negatives": ["elsewhere"]}, *rs[1:]], ["data.hard_negatives.per_anchor=1"],
        ["line 1", "hard_negatives", "'elsewhere'"]),
}

# name -> (--set items, words the error names)
RECIPE = {
    "SMILE checkpoint not given": (["video.checkpoint=???"], ["video.checkpoint", "--set video.checkpoint=PATH"]),
    "SMILE checkpoint not there": (["video.checkpoint=/nowhere/smile_b.pth"], ["video.checkpoint", "no such file"]),
    "paragraph field": (["text_views.positives=[{name: summary, field: caption, max_tokens: 64}]"],
                        ["text_views.positives[0].field", "data.schema: paragraph"]),
    "view without a name": (["text_views.positives=[{field: [O, S1], take: random, count: 1, max_tokens: 64}]"],
                            ["text_views.positives[0].name"]),
    "view named twice": (["text_views.positives=[{name: summary, field: O, max_tokens: 64}, "
                          "{name: summary, field: S1, max_tokens: 64}]"], ["text_views.positives[1].name"]),
    "another loss": (["loss={type: InfoNCELoss}"], ["loss.type", "VideoTextPretrainingLoss"]),
    "loss vocabulary by hand": (["loss.vocab_size=30522"], ["loss.vocab_size", "tokenizer"]),
    "tower frames disagree": (["video.encoder.num_frames=16"], ["video.encoder.num_frames", "video.frames"]),
    "tower argument misspelt": (["video.encoder.dept=3"], ["video.encoder.dept"]),
    "spaces of different widths": (["model.embed_dim=24"], ["video.encoder.embed_dim", "model.embed_dim"]),
    "fusion width by hand": (["model.video_width=48"], ["model.video_width", "32"]),
    "token budget past positions": (["text_views.positives=[{name: summary, field: O, max_tokens: 200}]"],
                                    ["text_views.positives[0].max_tokens"]),
    "amp on a CPU": (["train.amp=true"], ["train.amp"]),
    "batch past the corpus": (["train.batch_size=64"], ["train.batch_size", "no full batch"]),
    "sampler without a fixed count": (["video.sampler=fps"], ["video.sampler"]),
    "crop scale reversed": (["video.crop_scale=[0.9, 0.4]"], ["video.crop_scale"]),
    "warm-up twice": (["train.warmup_steps=10"], ["train.warmup_epochs", "train.warmup_steps"]),
    "unknown video key": (["video.fps=8"], ["video.fps"]),
    "length blocks": (["train.length_blocks=2"], ["train.length_blocks", "only paragraph recipes"]),
    "hard negatives: unknown key": (["data.hard_negatives.per_anchr=1"],
                                    ["--set data.hard_negatives.per_anchr", "unknown key", "per_anchor"]),
    "hard negatives: none per anchor": (["data.hard_negatives.per_anchor=0"],
                                        ["--set data.hard_negatives.per_anchor", ">= 1", "found 0"]),
    "hard negatives: negative per anchor": (["data.hard_negatives.per_anchor=-2"],
                                            ["--set data.hard_negatives.per_anchor", ">= 1", "found -2"]),
    "hard negatives: not a number": (["data.hard_negatives.per_anchor=two"],
                                     ["--set data.hard_negatives.per_anchor", "expected an integer"]),
    "hard negatives: not a mapping": (["data.hard_negatives=true"], ["--set data.hard_negatives", "{per_anchor: 1}"]),
    "hard negatives: no room for the anchor": (["data.hard_negatives.per_anchor=4"],
                                               ["--set data.hard_negatives.per_anchor", "no room for the anchor",
                                                "batch of 4"]),
}


def _run(tmp_path, world, corpus, extra):
    work = tmp_path / "work"
    return ["train", "mvc/mvc_b", "--train", str(corpus), "--work-dir", str(work), "--set",
            *tiny_sets(world), *extra], work


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_bad_corpus_is_refused(case, world, tmp_path):
    change, extra, words = CORPUS[case]
    corpus = tmp_path / "train.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in change(_good(world))), encoding="utf-8")
    argv, work = _run(tmp_path, world, corpus, extra)
    where = [str(corpus)] if "video file missing" != case else []
    assert_refused(argv, *where, *words, leaves=[work])


@pytest.mark.parametrize("case", sorted(RECIPE))
def test_bad_recipe_value_is_refused(case, world, tmp_path):
    extra, words = RECIPE[case]
    corpus = tmp_path / "train.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in _good(world)), encoding="utf-8")
    argv, work = _run(tmp_path, world, corpus, extra)
    assert_refused(argv, *words, leaves=[work])


def test_paragraph_recipe_with_a_video_section_is_refused(tmp_path):
    assert_refused(["train", "paragraph/c5", "--work-dir", str(tmp_path / "w"), "--set", "video.frames=8"],
                   "--set video", "data.schema: mvc", leaves=[tmp_path / "w"])


def test_paragraph_recipe_batching_mined_videos_is_refused(tmp_path):
    assert_refused(["train", "paragraph/c5", "--work-dir", str(tmp_path / "w"), "--set",
                    "data.hard_negatives.per_anchor=1"],
                   "--set data.hard_negatives", "only data.schema: mvc", "text_views.negatives",
                   leaves=[tmp_path / "w"])


def test_stage_one_checkpoint_that_does_not_fit_is_refused(world, tmp_path):
    import torch

    ckpt = tmp_path / "smile.pth"
    torch.save({"model": {"encoder.patch_embed.proj.weight": torch.zeros(3, 3)}}, ckpt)
    corpus = tmp_path / "train.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in _good(world)), encoding="utf-8")
    argv, work = _run(tmp_path, world, corpus, [f"video.checkpoint={ckpt}"])
    message = assert_refused(argv, str(ckpt), "does not fit", "patch_embed.weight", leaves=[work])
    assert message.count(str(ckpt)) == 1, message


@pytest.mark.parametrize("case", ["not there", "no video tower"])
def test_precompute_with_a_checkpoint_that_trained_no_video_tower_is_refused(case, world, tmp_path):
    import torch

    ckpt = tmp_path / "epoch_1.pth"
    if case == "no video tower":  # what a paragraph recipe's run writes: a text encoder only
        torch.save({"meta": {"vlr_text_encoder": {"type": "BlipTextEncoder"}}, "state_dict": {}}, ckpt)
    words = ["no checkpoint at"] if case == "not there" else ["records no video tower", "data.schema: mvc"]
    assert_refused(["precompute", "--videos", world["eval_videos"], "--encoder", f"vlr:{ckpt}",
                    "--out", str(tmp_path / "store"), "--frames", "4", "--workers", "0"],
                   "--encoder", str(ckpt), *words, leaves=[tmp_path / "store"])
