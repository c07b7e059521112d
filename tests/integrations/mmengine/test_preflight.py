"""Before the Runner: datasets built and checked against the model; output paths and the
resume checkpoint checked; what a failed run created removed."""

from __future__ import annotations

import os
from fractions import Fraction

import pytest
import torch

pytest.importorskip("mmengine")
from vlr_plugins.data import EmbeddingStore, EmbeddingStoreWriter, read_paragraph_samples  # noqa: E402
from vlr_plugins.errors import MissingFileError, UsageError, UserError  # noqa: E402
from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config  # noqa: E402
from vlr_plugins.integrations.mmengine.preflight import (  # noqa: E402
    check_output_file,
    check_output_folder,
    check_resume_checkpoint,
    check_run_inputs,
    nothing_left_on_failure,
)
from vlr_plugins.recipe import Overrides, RecipeError, load_recipe  # noqa: E402


def _recipe(tiny_world, tiny_encoder_cfg, store=None, **data):
    return load_recipe("paragraph/c5", [
        Overrides({"model": tiny_encoder_cfg, "train": {"batch_size": 16, "num_workers": 0},
                   "data": {"train": tiny_world["train"], **data},
                   "eval": [{"name": "short", "ann_file": tiny_world["eval_short"], "max_tokens": 77}]}),
        Overrides({"data": {"image_embeddings": store or tiny_world["image_embeddings"]}}, "--image-embeddings",
                  keyed=False)])


def test_inputs_are_counted_as_the_runner_will_see_them(tiny_world, tiny_encoder_cfg, tmp_path):
    recipe = _recipe(tiny_world, tiny_encoder_cfg, fraction=0.5)
    inputs = check_run_inputs(recipe, recipe_to_mmengine_config(recipe, str(tmp_path / "w")))
    total = len(read_paragraph_samples(tiny_world["train"]))
    assert inputs.samples == round(0.5 * total)
    assert inputs.dim == EmbeddingStore(tiny_world["image_embeddings"]).dim
    assert inputs.eval_items == sum(1 for line in open(tiny_world["eval_short"]) if line.strip())
    assert not (tmp_path / "w").exists()


def test_a_store_of_another_width_is_blamed_on_its_option(tiny_world, tiny_encoder_cfg, tmp_path):
    src = EmbeddingStore(tiny_world["image_embeddings"])
    with EmbeddingStoreWriter(tmp_path / "wide", src.dim * 2) as w:
        w.add(list(src.ids), torch.randn(len(src), src.dim * 2))
    recipe = _recipe(tiny_world, tiny_encoder_cfg, store=str(tmp_path / "wide"))
    with pytest.raises(RecipeError) as e:
        check_run_inputs(recipe, recipe_to_mmengine_config(recipe, str(tmp_path / "w")))
    assert str(e.value).startswith("--image-embeddings (data.image_embeddings): ")
    assert f"{src.dim * 2}-d image embeddings" in str(e.value) and f"outputs {src.dim}-d" in str(e.value)


def test_output_paths(tmp_path):
    check_output_folder(tmp_path / "new" / "deeper", "--work-dir")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match=r"^--work-dir: .*file is a file"):
        check_output_folder(tmp_path / "file", "--work-dir")
    with pytest.raises(UsageError, match=r"^--work-dir: cannot create .*: .*file is a file"):
        check_output_folder(tmp_path / "file" / "sub", "--work-dir")
    check_output_file(tmp_path / "cfg.py", "--dump-config")
    with pytest.raises(UsageError, match=r"^--dump-config: .* is a folder"):
        check_output_file(tmp_path, "--dump-config")
    with pytest.raises(UsageError, match=r"^--dump-config: no such folder"):
        check_output_file(tmp_path / "absent" / "cfg.py", "--dump-config")
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(UsageError, match="permission denied"):
            check_output_folder(locked / "run", "--work-dir")


def test_the_resume_checkpoint(tmp_path):
    good = tmp_path / "epoch_1.pth"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "meta": {"epoch": 1}}, good)
    check_resume_checkpoint(good)
    with pytest.raises(MissingFileError, match=r"^--resume: no checkpoint at"):
        check_resume_checkpoint(tmp_path / "epoch_9.pth")
    torch.save({"state_dict": {}, "meta": {"share": Fraction(1, 3)}}, tmp_path / "pickled.pth")
    with pytest.raises(UsageError, match=r"^--resume: .*pickled.pth: not a weights-only checkpoint: it holds pickled Python objects"):
        check_resume_checkpoint(tmp_path / "pickled.pth")
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.pth")
    with pytest.raises(UsageError, match="holds no 'state_dict'"):
        check_resume_checkpoint(tmp_path / "other.pth")
    # DeepSpeedStrategy's checkpoint: a folder, the weights and the runner's state in one file
    deepspeed = tmp_path / "epoch_2.pth"
    deepspeed.mkdir()
    with pytest.raises(MissingFileError, match=r"no checkpoint at .*epoch_2.pth \(it is a folder\)"):
        check_resume_checkpoint(deepspeed)
    torch.save({"module": {"w": torch.zeros(2)}, "meta": {"epoch": 2}}, deepspeed / "mp_rank_00_model_states.pt")
    check_resume_checkpoint(deepspeed)


def test_a_failed_run_leaves_nothing_new(tmp_path):
    work = tmp_path / "work"
    with pytest.raises(UserError):
        with nothing_left_on_failure(work):
            (work / "20250101_000000").mkdir(parents=True)
            raise UserError("bad input")
    assert not work.exists()
    work.mkdir()
    (work / "mine.txt").write_text("kept")
    with pytest.raises(UserError):
        with nothing_left_on_failure(work):
            (work / "20250101_000000").mkdir()
            (work / "20250101_000000.py").write_text("cfg")
            raise UserError("bad input")
    assert sorted(p.name for p in work.iterdir()) == ["mine.txt"]


def test_a_run_that_saved_a_checkpoint_or_hit_a_bug_keeps_its_files(tmp_path):
    work = tmp_path / "work"
    with pytest.raises(UserError):
        with nothing_left_on_failure(work):
            work.mkdir()
            (work / "epoch_1.pth").write_bytes(b"")
            raise UserError("bad record in epoch 2")
    assert (work / "epoch_1.pth").exists()
    with pytest.raises(ZeroDivisionError):
        with nothing_left_on_failure(tmp_path / "bug"):
            (tmp_path / "bug").mkdir()
            1 / 0
    assert (tmp_path / "bug").exists()


def test_resume_auto_checks_the_checkpoint_the_work_dir_names(tmp_path, capsys, monkeypatch):
    from vlr_plugins.integrations.mmengine.preflight import check_resume

    monkeypatch.delenv("RANK", raising=False)
    check_resume("auto", tmp_path / "new")  # nothing to resume: training starts afresh, and says so
    said = capsys.readouterr().err
    assert said.startswith("note: --resume: no checkpoint to resume from in ") and "starts from the beginning" in said
    monkeypatch.setenv("RANK", "1")  # once, by the first process
    check_resume("auto", tmp_path / "new")
    assert capsys.readouterr().err == ""
    monkeypatch.delenv("RANK")
    work = tmp_path / "work"
    work.mkdir()
    (work / "epoch_3.pth").write_bytes(b"cut short")
    (work / "last_checkpoint").write_text(str(work / "epoch_3.pth"))
    with pytest.raises(UsageError, match=r"^--resume \(the latest checkpoint, named in .*last_checkpoint\): "):
        check_resume("auto", work)
    torch.save({"state_dict": {}, "meta": {}}, work / "epoch_3.pth")
    capsys.readouterr()
    check_resume("auto", work)
    assert "note:" not in capsys.readouterr().err


def test_texts_far_past_their_budget_are_warned_of(tiny_world, tiny_encoder_cfg, tmp_path, capsys, monkeypatch):
    """A paragraph of 200,000 words is accepted (cut to its view's budget) with one warning line
    naming the view, the sample and the length: every epoch tokenizes it whole."""
    import json

    monkeypatch.delenv("RANK", raising=False)
    lines = open(tiny_world["train"], encoding="utf-8").read().splitlines()
    first = json.loads(lines[0])
    first["paragraph"] = "word " * 200_000
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    recipe = _recipe({**tiny_world, "train": str(path)}, tiny_encoder_cfg)
    check_run_inputs(recipe, recipe_to_mmengine_config(recipe, str(tmp_path / "w")))
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(said) == 1, said
    assert f"data.train {path}" in said[0] and "view paragraph" in said[0] and repr(first["id"]) in said[0]
    assert "1,000,000 characters" in said[0] and "max_tokens 128" in said[0]
    # the ordinary tiny world: no warning
    recipe = _recipe(tiny_world, tiny_encoder_cfg)
    check_run_inputs(recipe, recipe_to_mmengine_config(recipe, str(tmp_path / "w")))
    assert "warning:" not in capsys.readouterr().err
