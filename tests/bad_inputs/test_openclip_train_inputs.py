"""The bad-input catalogue of ``vlr openclip-train``'s training data: records that are bad, a
training file or image that is not there. open_clip_train makes its run folder (``--logs``/
``--name``) before the data is read: every case must exit 2 with one ``error:`` line naming the
file, record and field, and leave no run folder (nor ``--logs`` when it was new)."""

from __future__ import annotations

import json

import pytest
from _refusal import assert_refused

pytest.importorskip("open_clip_train")

GOOD = {"id": "a", "image": "images/0.png", "caption": "a red square"}

CASES = {
    "a record without its caption": ([GOOD, {"id": "b", "image": "images/0.png"}],
                                     ["train.jsonl", "line 2", "caption", "missing"]),
    "a record without an id": ([GOOD, {"image": "images/0.png", "caption": "x"}], ["train.jsonl", "line 2", "id"]),
    "a caption that is not a string": ([GOOD, {"id": "b", "image": "images/0.png", "caption": 7}],
                                       ["train.jsonl", "line 2", "caption"]),
    "not JSON": (None, ["train.jsonl", "line 2", "JSON"]),
    "an image that is not there": ([GOOD, {"id": "b", "image": "images/gone.png", "caption": "x"}],
                                   ["gone.png"]),
}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from _tiny_open_clip import write_local_dir_model

    return write_local_dir_model(tmp_path_factory.mktemp("oc_model") / "tiny")


@pytest.mark.parametrize("records, where", list(CASES.values()), ids=list(CASES))
def test_openclip_train_refuses_bad_training_data(records, where, model, tmp_path):
    from PIL import Image

    (tmp_path / "images").mkdir()
    Image.new("RGB", (40, 40), "red").save(tmp_path / "images" / "0.png")
    text = ('{"id": "a", "image": "images/0.png", "caption": "x"}\n{"id": \n' if records is None
            else "".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "train.jsonl").write_text(text)
    logs = tmp_path / "logs"
    assert_refused(["openclip-train", "--model", f"local-dir:{model}", "--train-data", str(tmp_path / "train.jsonl"),
                    "--vlr-image-root", str(tmp_path), "--epochs", "1", "--batch-size", "1", "--workers", "0",
                    "--device", "cpu", "--precision", "fp32", "--logs", str(logs), "--name", "run"],
                   *where, leaves=[logs], cwd=tmp_path)


def test_a_failed_run_keeps_the_other_runs_of_its_logs_folder(model, tmp_path):
    logs = tmp_path / "logs"
    (logs / "earlier" / "checkpoints").mkdir(parents=True)
    (tmp_path / "train.jsonl").write_text(json.dumps({"id": "b", "image": "images/0.png"}) + "\n")
    assert_refused(["openclip-train", "--model", f"local-dir:{model}", "--train-data", str(tmp_path / "train.jsonl"),
                    "--epochs", "1", "--batch-size", "1", "--workers", "0", "--device", "cpu", "--precision", "fp32",
                    "--logs", str(logs), "--name", "run"], "line 1", "caption",
                   leaves=[logs / "run"], cwd=tmp_path)
    assert sorted(p.name for p in logs.iterdir()) == ["earlier"]


@pytest.mark.parametrize("what", ["a file", "a folder with files"])
def test_the_tiny_model_writer_refuses_a_place_already_taken(what, tmp_path, capsys):
    """``python -m vlr_plugins.integrations.open_clip.tiny OUT``: an OUT that is there (a file,
    or a folder that is not empty) is one error line, exit 2, and stays as it was."""
    from vlr_plugins.integrations.open_clip.tiny import main

    out = tmp_path / "tiny-clip"
    if what == "a file":
        out.write_text("mine\n")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine\n")
    assert main([str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and str(out) in err and "already there" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.rglob("*")) == (["tiny-clip"] if what == "a file" else
                                                            ["notes.txt", "tiny-clip"])
