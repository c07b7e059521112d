"""The bad-input catalogue for `vlr generate` and `vlr generate stats`: refused before any
model is asked (the endpoint is a closed port), naming the option, file, line or key, and
leaving no corpus folder behind."""

from __future__ import annotations

import json
import shutil

import pytest
from _refusal import assert_refused, run_vlr

pytest.importorskip("openai")

from _fake_openai import FakeOpenAI, Reply, error, raw

from PIL import Image

from vlr_plugins.generate.pipeline import list_pipelines

CLOSED = "http://127.0.0.1:9/v1"
FAST = ["--set", f"roles.captioner.base_url={CLOSED}", f"roles.judge.base_url={CLOSED}",
        "roles.captioner.max_retries=0", "roles.judge.max_retries=0"]


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def world(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    Image.new("RGB", (4, 4)).save(tmp_path / "a.png")
    items = _write(tmp_path / "items.jsonl", json.dumps({"id": "1", "image": "a.png", "caption": "a dog"}) + "\n")
    return tmp_path, items


def _pipeline_copy(tmp_path, edit):
    """The shipped paragraph pipeline copied with its prompts, ``edit(folder)`` applied."""
    src = list_pipelines()["paragraph"]
    folder = tmp_path / "mine"
    shutil.copytree(src.parent / "prompts", folder / "prompts")
    shutil.copy(src, folder / "paragraph.yaml")
    edit(folder)
    return folder / "paragraph.yaml"


def _unknown_slot(folder):
    _write(folder / "prompts" / "paragraph" / "score.txt", "Score {paragraph} against {reference}.")


def _not_yaml(folder):
    _write(folder / "paragraph.yaml", "pipeline: [paragraph\n")


CASES = {
    "input-missing": (lambda t, i: ["paragraph", "--input", t / "nope.jsonl", *FAST], ["--input", "nope.jsonl"]),
    "no-such-pipeline": (lambda t, i: ["nope", "--input", i, *FAST], ["no pipeline named 'nope'", "paragraph"]),
    "out-is-a-file": (lambda t, i: ["paragraph", "--input", i, "--out", i, *FAST], ["--out", "items.jsonl"]),
    "shard-index-out-of-range": (lambda t, i: ["paragraph", "--input", i, "--shard-index", "2", "--shard-count", "2",
                                               *FAST], ["--shard-index", "0 .. 1"]),
    "shard-count-zero": (lambda t, i: ["paragraph", "--input", i, "--shard-count", "0", *FAST], ["--shard-count"]),
    "set-without-value": (lambda t, i: ["paragraph", "--input", i, *FAST, "roles.judge.model"], ["--set"]),
    "set-unknown-key": (lambda t, i: ["paragraph", "--input", i, *FAST, "temperature=0.5"],
                        ["paragraph.yaml (with --set)", "unknown key 'temperature'"]),
    "negative-temperature": (lambda t, i: ["paragraph", "--input", i, *FAST,
                                           "prompts.paragraph.sampling.temperature=-1"],
                             ["prompts.paragraph.sampling.temperature", "-1"]),
    "unknown-backend": (lambda t, i: ["paragraph", "--input", i, *FAST, "roles.judge.backend=tgi"],
                        ["roles.judge.backend", "tgi"]),
    "unknown-sampling-key": (lambda t, i: ["paragraph", "--input", i, *FAST, "prompts.score.sampling.seed=3"],
                             ["prompts.score.sampling", "seed"]),
    "unknown-stage": (lambda t, i: ["paragraph", "--input", i, "--stages", "caption", *FAST],
                      ["--stages", "'caption'", "score-1"]),
    "input-not-json": (lambda t, i: ["paragraph", "--input", _write(t / "bad.jsonl", '{"id": "1", "image": "a.png", '
                                     '"caption": "a"}\n{"id": 2\n'), *FAST], ["bad.jsonl", "line 2"]),
    "input-without-caption": (lambda t, i: ["paragraph", "--input", _write(t / "nocap.jsonl", json.dumps(
        {"id": "1", "image": "a.png"}) + "\n"), *FAST], ["nocap.jsonl", "line 1", "caption"]),
    "input-duplicate-id": (lambda t, i: ["paragraph", "--input", _write(t / "dup.jsonl", 2 * (json.dumps(
        {"id": "1", "image": "a.png", "caption": "a"}) + "\n")), *FAST], ["dup.jsonl", "line 2", "'1'"]),
    "input-empty": (lambda t, i: ["paragraph", "--input", _write(t / "empty.jsonl", "\n"), *FAST],
                    ["empty.jsonl", "no input records"]),
    "mvc-input-without-video": (lambda t, i: ["mvc", "--input", i, "--set", *(f"roles.{r}.base_url={CLOSED}" for r in
                                              ("captioner_1", "captioner_2", "refiner"))],
                                ["items.jsonl", "line 1", "video"]),
    "mvc-video-file-missing": (lambda t, i: ["mvc", "--input", _write(t / "clips.jsonl", "".join(json.dumps(
        {"id": str(n), "video": name, "caption": "a dog"}) + "\n" for n, name in enumerate(["a.png", "gone.mp4"]))),
        "--set", *(f"roles.{r}.base_url={CLOSED}" for r in ("captioner_1", "captioner_2", "refiner"))],
        ["clips.jsonl", "line 2", "field 'video'", "no such video file", "gone.mp4"]),
    "template-unknown-slot": (lambda t, i: [_pipeline_copy(t, _unknown_slot), "--input", i, *FAST],
                              ["score.txt", "{reference}"]),
    "pipeline-not-yaml": (lambda t, i: [_pipeline_copy(t, _not_yaml), "--input", i], ["paragraph.yaml", "YAML"]),
    "image-file-missing": (lambda t, i: ["paragraph", "--input", _write(t / "gone.jsonl", "\n".join(json.dumps(
        {"id": str(n), "image": name, "caption": "a dog"}) for n, name in enumerate(["a.png", "b.png"])) + "\n"),
        *FAST], ["gone.jsonl", "line 2", "field 'image'", "no such image file", "b.png"]),
    "image-file-missing-csv": (lambda t, i: ["paragraph", "--input", _write(t / "gone.csv", "id,image,caption\n"
                                             "1,a.png,a dog\n7,nope.png,a cat\n"), *FAST],
                               ["gone.csv", "field 'image'", "nope.png", "the record with id '7'"]),
    "unknown-role": (lambda t, i: ["paragraph", "--input", i, *FAST, f"roles.captionr.base_url={CLOSED}"],
                     ["roles.captionr: unknown role", "captioner, judge", "did you mean 'captioner'?"]),
    "cache-and-no-cache": (lambda t, i: ["paragraph", "--input", i, "--cache", t / "c.sqlite", "--no-cache", *FAST],
                           ["--no-cache", "--cache"]),
    "ray-and-shards": (lambda t, i: ["paragraph", "--input", i, "--engine", "ray", "--shard-count", "2", *FAST],
                       ["--shard-count", "ray"]),
    "ray-and-shard-index": (lambda t, i: ["paragraph", "--input", i, "--engine", "ray", "--shard-index", "1", *FAST],
                            ["--shard-index", "ray"]),
    "ray-workers-zero": (lambda t, i: ["paragraph", "--input", i, "--engine", "ray", "--ray-workers", "0", *FAST],
                         ["--ray-workers"]),
    "ray-workers-without-ray": (lambda t, i: ["paragraph", "--input", i, "--ray-workers", "2", *FAST],
                                ["--ray-workers", "--engine ray", "engine is local"]),
    "ray-address-without-ray": (lambda t, i: ["paragraph", "--input", i, "--ray-address", "auto", *FAST],
                                ["--ray-address", "--engine ray", "engine is local"]),
    "stats-without-corpus": (lambda t, i: ["stats"], ["CORPUS"]),
    "stats-missing-corpus": (lambda t, i: ["stats", t / "nowhere"], ["nowhere", "no such corpus"]),
    "stats-unfinished-run": (lambda t, i: ["stats", _mkdir(t / "half")], ["half", "manifest.json"]),
    "stats-with-run-option": (lambda t, i: ["stats", i, "--input", i], ["--input", "stats"]),
    "stats-plot-not-an-image": (lambda t, i: ["stats", i, "--plot", t / "a.txt"], ["--plot", "a.txt"]),
}


def _mkdir(path):
    path.mkdir()
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_generate_refuses_bad_input_before_asking_a_model(world, case):
    tmp_path, items = world
    change, where = CASES[case]
    out = tmp_path / "corpus"
    argv = ["generate", *change(tmp_path, items)]
    if argv[1] != "stats" and "--out" not in argv:
        argv += ["--out", out]
    assert_refused(argv, *where, leaves=[out, tmp_path / "a.txt"], cwd=tmp_path)


TORCHRUN_CASES = {
    "torchrun-rank-and-shard-options-disagree": ({"RANK": "1", "WORLD_SIZE": "2"}, ["--shard-index", "0",
                                                 "--shard-count", "2"], ["--shard-index", "rank 1 of 2", "torchrun"]),
    "torchrun-rank-and-one-shard-option": ({"RANK": "1", "WORLD_SIZE": "2"}, ["--shard-count", "2"],
                                           ["--shard-index", "0 of --shard-count 2", "rank 1 of 2"]),
    "torchrun-rank-outside-the-world": ({"RANK": "2", "WORLD_SIZE": "2"}, [], ["RANK", "0 .. 1", "found 2"]),
    "torchrun-and-ray": ({"RANK": "0", "WORLD_SIZE": "2"}, ["--engine", "ray"], ["--engine", "torchrun", "once"]),
}


@pytest.mark.parametrize("case", list(TORCHRUN_CASES))
def test_generate_under_torchrun_refuses_a_rank_that_disagrees(world, monkeypatch, case):
    tmp_path, items = world
    env, options, where = TORCHRUN_CASES[case]
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "corpus"
    assert_refused(["generate", "paragraph", "--input", items, "--out", out, *options, *FAST], *where, leaves=[out])


def test_no_api_key_is_refused_naming_the_variable(world, monkeypatch):
    tmp_path, items = world
    monkeypatch.delenv("OPENAI_API_KEY")
    out = tmp_path / "corpus"
    assert_refused(["generate", "paragraph", "--input", items, "--out", out, *FAST],
                   "roles.", "OPENAI_API_KEY", leaves=[out])


def test_a_folder_of_another_pipeline_is_refused(world):
    tmp_path, items = world
    out = tmp_path / "corpus"
    out.mkdir()
    _write(out / "run.json", json.dumps({"format": "something else"}))
    assert_refused(["generate", "paragraph", "--input", items, "--out", out, *FAST], "run.json", "--out",
                   leaves=[out / "stages"])


# ---------------------------------------------------------------- models that answer nothing usable

FAILING_MODELS = {
    # (script or None for a closed port, what the error line names, whether answers were received)
    "unreachable": (None, "connection failed", False),
    "http-500": (lambda body: error(500, "the model is down"), "HTTP 500: the model is down", False),
    "hanging": (lambda body: Reply(content="1. a dog", delay=3), "timed out", False),
    "body-not-json": (lambda body: raw('{"id": "chatcmpl-1", "choi'), "not a chat completion: not JSON", False),
    "html-page": (lambda body: raw("<html>Bad gateway</html>", content_type="text/html"),
                  "not a chat completion", False),
    "every-answer-malformed": (lambda body: "", "malformed answer after 1 try", True),
}


@pytest.mark.parametrize("case", list(FAILING_MODELS))
def test_a_run_that_generates_nothing_is_an_error_and_leaves_no_corpus(world, case):
    """Exit 2, one error line naming the stage, the count and the first error (a body that is
    not JSON was a JSONDecodeError traceback; answers all malformed exited 0 with a corpus of
    failures); no corpus folder left (a cache only when some answer came, and then named)."""
    tmp_path, items = world
    script, named, answered = FAILING_MODELS[case]
    out = tmp_path / "corpus"
    argv = ["generate", "paragraph", "--input", items, "--out", out]

    def fast(url):
        return ["--set", *(f"roles.{r}.{k}={v}" for r in ("captioner", "judge")
                           for k, v in (("base_url", url), ("max_retries", 0), ("reasks", 0), ("timeout", 1)))]

    if script is None:
        code, printed, err = run_vlr([*argv, *fast(CLOSED)], cwd=tmp_path)
    else:
        with FakeOpenAI(script) as server:
            code, printed, err = run_vlr([*argv, *fast(server.url)], cwd=tmp_path)
    shown = f"\nstdout:\n{printed}\nstderr:\n{err}"
    assert code == 2 and "Traceback" not in err, shown
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and err.splitlines()[-1] == errors[0], shown
    assert errors[0].startswith("error: stage texts, part 0: all 3 requests failed") and named in errors[0], shown
    assert "nothing was written for this part: check roles.captioner" in errors[0]
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert left == (["llm-cache.sqlite"] if answered else []), shown
    assert ("llm-cache.sqlite" in errors[0]) == answered


# ---------------------------------------------------------------- --merge-only: the parts a run left

@pytest.fixture(scope="module")
def parts_only(tmp_path_factory):
    """A 2-record paragraph run (one record a part), its corpus.jsonl and manifest.json removed:
    every part of every stage there, none merged (a job array whose last task was killed)."""
    from _scripted_models import ParagraphModels, write_images

    from vlr_plugins.generate.pipeline import load_pipeline
    from vlr_plugins.generate.runner import generate_corpus

    root = tmp_path_factory.mktemp("parts")
    records = write_images(root / "images", ["a red bus", "two cats"])
    items = _write(root / "images" / "items.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    with pytest.MonkeyPatch.context() as mp, FakeOpenAI(ParagraphModels(glitches=False)) as server:
        mp.setenv("OPENAI_API_KEY", "EMPTY")
        role = {"base_url": server.url, "backoff": 0.01, "max_backoff": 0.02}
        pipeline = load_pipeline("paragraph", {"roles": {"captioner": role, "judge": role}, "records_per_part": 1})
        assert generate_corpus(pipeline, items, root / "corpus", cache=None)["complete"]
    for name in ("corpus.jsonl", "manifest.json"):
        (root / "corpus" / name).unlink()
    return root


def _drop_line(path):
    path.write_text("", encoding="utf-8")


def _other_model(path):
    record = json.loads(path.read_text(encoding="utf-8"))
    record["generated_by"]["paragraph"] = "another-model"
    _write(path, json.dumps(record) + "\n")


def _swap_parts(a, b):
    def swap(root):
        pa, pb = root / a, root / b
        ta, tb = pa.read_bytes(), pb.read_bytes()
        pa.write_bytes(tb)
        pb.write_bytes(ta)
    return swap


MERGE = ["paragraph", "--out", "{c}", "--merge-only", "--set", "records_per_part=1"]
MERGE_CASES = {
    "merge-only-nothing-there": (None, ["paragraph", "--out", "{t}/nowhere", "--merge-only"],
                                 ["--merge-only", "nothing to merge", "run.json"]),
    "merge-only-without-out": (None, ["paragraph", "--merge-only"], ["--out"]),
    "merge-only-part-missing": (lambda c: (c / "stages/score-2/part-000001.jsonl").unlink(), MERGE,
                                ["--merge-only", "1 of 12 parts are missing", "stages/score-2/part-000001.jsonl"]),
    "merge-only-parts-missing": (lambda c: [p.unlink() for p in (c / "stages").glob("score-*/part-000000.jsonl")],
                                 MERGE, ["3 of 12 parts", "stages/score-1/part-000000.jsonl",
                                         "stages/score-3/part-000000.jsonl"]),
    "merge-only-other-pipeline": (None, [*MERGE, "prompts.paragraph.sampling.temperature=0.3"],
                                  ["PIPELINE", "not the pipeline that wrote the parts", "fingerprint"]),
    "merge-only-other-part-size": (None, MERGE[:-1] + ["records_per_part=2"], ["PIPELINE", "part size"]),
    "merge-only-other-input": (None, [*MERGE[:4], "--input", "{t}/items.jsonl", *MERGE[4:]],
                               ["--input", "items.jsonl", "not the input"]),
    "merge-only-part-of-another-model": (lambda c: _other_model(c / "stages/texts/part-000001.jsonl"), MERGE,
                                         ["stages/texts/part-000001.jsonl", "line 1", "generated_by",
                                          "'another-model'", "another run"]),
    "merge-only-part-of-another-size": (lambda c: _drop_line(c / "stages/score-1/part-000000.jsonl"), MERGE,
                                        ["stages/score-1/part-000000.jsonl", "holds 0 records", "holds 1"]),
    "merge-only-parts-swapped": (_swap_parts("stages/score-3/part-000000.jsonl", "stages/score-3/part-000001.jsonl"),
                                 MERGE, ["stages/score-3/part-000000.jsonl", "field 'id'", "stage before"]),
    "merge-only-run-file-corrupt": (lambda c: _write(c / "run.json", "{not json"), MERGE,
                                    ["run.json", "cannot read the run"]),
    "merge-only-with-shard-index": (None, [*MERGE[:4], "--shard-index", "0", *MERGE[4:]],
                                    ["--shard-index", "--merge-only generates nothing"]),
    "merge-only-with-stages": (None, [*MERGE[:4], "--stages", "texts", *MERGE[4:]], ["--stages", "--merge-only"]),
    "merge-only-with-engine-ray": (None, [*MERGE[:4], "--engine", "ray", *MERGE[4:]], ["--engine", "--merge-only"]),
    "merge-only-with-no-merge": (None, [*MERGE[:4], "--no-merge", *MERGE[4:]], ["--no-merge", "--merge-only"]),
    "stats-with-merge-only": (None, ["stats", "{c}", "--merge-only"], ["--merge-only", "stats"]),
}


@pytest.mark.parametrize("case", list(MERGE_CASES))
def test_merge_only_refuses_and_writes_nothing(parts_only, tmp_path, case):
    from _refusal import tree

    edit, argv, where = MERGE_CASES[case]
    corpus = tmp_path / "corpus"
    shutil.copytree(parts_only / "corpus", corpus)
    _write(tmp_path / "items.jsonl", json.dumps({"id": "9", "image": "a.png", "caption": "another"}) + "\n")
    if edit is not None:
        edit(corpus)
    before = tree(tmp_path)
    argv = ["generate", *[a.replace("{c}", str(corpus)).replace("{t}", str(tmp_path)) for a in argv]]
    assert_refused(argv, *where, leaves=[corpus / "corpus.jsonl", corpus / "manifest.json", tmp_path / "nowhere"])
    assert tree(tmp_path) == before, "the folder changed"
