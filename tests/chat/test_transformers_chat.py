"""The transformers backend on a tiny random Qwen2-VL built here (tests/mllm/_tiny_mllm.py):
its text is nonsense, so these check the plumbing (batched, left-padded generation with
images and video frames, seeds, the cache) and that unreadable answers and unreadable
media become recorded failures, never silent values."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torchvision")  # Qwen2-VL's video processor

from _tiny_mllm import save_model_folder, tiny_qwen2vl, write_clip  # noqa: E402

from _scripted_models import write_images  # noqa: E402

from vlr_plugins.chat.cache import ChatCache  # noqa: E402
from vlr_plugins.chat.request import ChatRequest  # noqa: E402
from vlr_plugins.chat.transformers_chat import TransformersChatBackend  # noqa: E402
from vlr_plugins.errors import ConfigError, UserError  # noqa: E402
from vlr_plugins.generate.parsing import parse_score_answer  # noqa: E402
from vlr_plugins.generate.pipeline import load_pipeline  # noqa: E402
from vlr_plugins.generate.runner import generate_corpus  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    return tiny_qwen2vl()


def backend(tiny, **kw):
    model, processor = tiny
    return TransformersChatBackend(model=model, processor=processor, name="tiny-qwen2-vl", **kw)


def ask(text, media=(), max_tokens=6, seed=1, parse=None):
    content = [*media, {"type": "text", "text": text}]
    return ChatRequest([{"role": "user", "content": content}], parse=parse,
                       sampling={"temperature": 0.7, "top_p": 0.9, "max_tokens": max_tokens, "seed": seed})


def test_a_batch_with_images_and_a_video_answers_each_in_order(tiny, tmp_path):
    [image] = write_images(tmp_path, ["x"])
    video = write_clip(tmp_path / "clip.mkv", num_frames=8)
    requests = [ask("Describe.", [{"type": "image", "image": str(tmp_path / image["image"])}]),
                ask("A much longer prompt, so that the batch needs left padding."),
                ask("What happens?", [{"type": "video", "video": video, "num_frames": 4, "strategy": "uniform"}]),
                ask("Describe.", [{"type": "image", "image": str(tmp_path / "missing.png")}])]
    b = backend(tiny, batch_size=4)
    results = b.complete_many(requests)
    assert [r.ok for r in results] == [True, True, True, False]
    assert all(isinstance(r.text, str) for r in results[:3])
    # the missing image fails alone, saying why
    assert results[3].error.startswith("cannot generate: ") and "missing.png" in results[3].error
    # the same batch again gives the same answers: the requests' seeds seed it (a sampled
    # answer may still change with the batch it shares, as the backend's docstring says)
    again = backend(tiny, batch_size=4).complete_many(requests)
    assert [r.text for r in again] == [r.text for r in results]
    assert b.summary.requests == 4 and b.summary.failures == 1 and b.summary.completion_tokens > 0


def test_unreadable_answers_are_asked_again_then_failures(tiny, tmp_path):
    with ChatCache(tmp_path / "cache.sqlite") as cache:
        b = backend(tiny, reasks=1, cache=cache)
        [result] = b.complete_many([ask("Score 0 to 10.", max_tokens=4, parse=parse_score_answer)])
        if result.ok:  # random bytes may hold exactly one number from 0 to 10: then it is read
            assert 0 <= result.value <= 10
        else:
            assert result.error.startswith("malformed answer after 2 tries: ")
            assert b.summary.reasks == 1 and b.summary.malformed == 2 and b.summary.failures == 1
        calls = b.summary.calls
        # a rerun answers from the cache
        rerun = backend(tiny, reasks=1, cache=cache)
        [same] = rerun.complete_many([ask("Score 0 to 10.", max_tokens=4, parse=parse_score_answer)])
        assert (same.text, same.error) == (result.text, result.error)
        assert rerun.summary.calls == 0 and rerun.summary.cache_hits == calls


def test_the_paragraph_pipeline_on_the_tiny_model(tiny, tmp_path):
    records = write_images(tmp_path / "images", ["a red bus", "two cats", "a kite"])
    items = tmp_path / "images" / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    short = {name: {"sampling": {"max_tokens": 6}} for name in ("positives", "hard_negatives", "paragraph")}
    roles = {"captioner": {"model": "tiny-qwen2-vl"}, "judge": {"model": "tiny-qwen2-vl"}}
    pipeline = load_pipeline("paragraph", {"prompts": short, "roles": roles,
                                           "regenerate": {"at_or_below": 5, "max_attempts": 2}})
    b = backend(tiny, batch_size=8, reasks=0)
    with pytest.raises(ConfigError, match="roles.captioner.model is 'Qwen/Qwen2-VL-7B-Instruct'"):
        generate_corpus(load_pipeline("paragraph"), items, tmp_path / "other", backends={"captioner": b, "judge": b})
    out = tmp_path / "corpus"
    result = generate_corpus(pipeline, items, out, stages=["texts"], backends={"captioner": b, "judge": b})
    assert not result["complete"] and result["failed_records"] == 3
    texts = [json.loads(line) for line in (out / "stages" / "texts" / "part-000000.jsonl").read_text().splitlines()]
    assert [r["id"] for r in texts] == ["r0", "r1", "r2"]
    for r in texts:
        failed = {(f["stage"], f["prompt"]) for f in r["failures"]}
        # nonsense is not a list of five: the lists are empty and their failures recorded
        for name in ("positives", "hard_negatives"):
            assert (r[name] == []) == (("texts", name) in failed)
        for f in r["failures"]:
            assert set(f) >= {"stage", "prompt", "error", "answer"} and f["error"]
        assert r["generated_by"]["paragraph"] == "tiny-qwen2-vl" and r["attempts"][0]["paragraph"]
    assert result["backends"]["captioner"]["backend"] == "transformers"
    # the random judge's nonsense is no score: the stage scores nothing, so the run stops at its
    # first part (the part is not written), naming the stage, the role and the model's answer
    with pytest.raises(UserError, match=r"stage score-1, part 0: all 3 requests failed and no part of the stage is "
                                        r"written yet \(the first: record 'r0', prompt score: malformed answer "
                                        r".*check roles.judge"):
        generate_corpus(pipeline, items, out, backends={"captioner": b, "judge": b})
    assert not (out / "stages" / "score-1" / "part-000000.jsonl").exists()


def test_a_saved_model_folder_loads_as_the_mllm_package_loads_it(tiny, tmp_path):
    save_model_folder(tmp_path / "tiny", *tiny)
    b = TransformersChatBackend(str(tmp_path / "tiny"), dtype="float32", batch_size=2)
    assert b.model_name == str(tmp_path / "tiny") and b.describe()["backend"] == "transformers"
    [image] = write_images(tmp_path, ["x"])
    request = ask("Describe.", [{"type": "image", "image": str(tmp_path / image["image"])}])
    # the same weights answer the same: the folder round-trips
    assert b.complete_many([request])[0].text == backend(tiny).complete_many([request])[0].text
