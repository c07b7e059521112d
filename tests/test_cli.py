"""The `vlr` command: listing, training from a recipe, clear errors with non-zero exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vlr_plugins.cli import main


def test_list_shows_every_kind_with_descriptions(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("InfoNCELoss", "MultiPositiveInfoNCELoss", "HardNegativeInfoNCELoss", "BlipTextEncoder",
                 "paragraph_samples", "retrieval_recall", "paragraph/c5", "paragraph/ablations/neg3"):
        assert name in out, name
    line = next(ln for ln in out.splitlines() if "paragraph/c5 " in ln)
    assert "paragraph" in line.split("paragraph/c5", 1)[1].lower()
    assert main(["list", "losses", "--pattern", "Hard*"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "losses:" and len(out) == 2 and "HardNegativeInfoNCELoss" in out[1]


def test_list_shows_one_entry_whole(capsys):
    """`vlr list readers msrvtt`: the reader's arguments (a benchmark's `args`) and the files it
    reads; a loss's signature; a recipe's file; an unknown name with the close ones, exit 2."""
    import inspect

    from vlr_plugins.registry import READERS

    assert main(["list", "readers", "msrvtt"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("msrvtt(path") and "media_root" in out and "video_ext" in out
    assert inspect.getdoc(READERS.get("msrvtt")) in out and "MSRVTT_JSFUSION_test.csv" in out
    assert main(["list", "losses", "InfoNCELoss"]) == 0
    assert capsys.readouterr().out.startswith("InfoNCELoss(temperature")
    assert main(["list", "recipes", "paragraph/c5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# {_shipped('paragraph/c5')}") and _shipped("paragraph/c5").read_text() in out
    assert main(["list", "readers", "msrvt"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: name: no reader 'msrvt'; did you mean msrvtt") and "`vlr list readers`" in err


def _recipe(tmp_path, tiny_world, tiny_encoder_cfg, extra=""):
    """A tiny variant of the shipped C5 recipe (JSON is valid YAML for the mappings)."""
    p = tmp_path / "tiny.yaml"
    p.write_text(
        f"_base_: {json.dumps(str(_shipped('paragraph/c5')))}\n"
        f"model: {json.dumps(tiny_encoder_cfg)}\n"
        "train: {batch_size: 16, epochs: 1, warmup_steps: 1, num_workers: 0, lr: 0.001}\n" + extra
    )
    return p


def _shipped(name):
    from vlr_plugins.recipe import find_recipe

    return find_recipe(name)


def test_train_runs_a_recipe_and_writes_checkpoints(tmp_path, tiny_world, tiny_encoder_cfg):
    recipe = _recipe(tmp_path, tiny_world, tiny_encoder_cfg)
    work = tmp_path / "work"
    rc = main(["train", str(recipe), "--train", tiny_world["train"], "--image-embeddings",
               tiny_world["image_embeddings"], "--work-dir", str(work)])
    assert rc == 0
    assert (work / "epoch_1.pth").exists()
    import torch

    torch.load(work / "epoch_1.pth", weights_only=True)
    dumped = tmp_path / "cfg.py"
    assert main(["train", str(recipe), "--train", tiny_world["train"], "--image-embeddings",
                 tiny_world["image_embeddings"], "--dump-config", str(dumped), "--set", "train.epochs=4"]) == 0
    from mmengine.config import Config

    cfg = Config.fromfile(str(dumped))
    assert cfg.train_cfg.max_epochs == 4 and cfg.model.loss.type == "MultiPositiveInfoNCELoss"


@pytest.mark.parametrize("case", ["unknown_key", "missing_train", "bad_record"])
def test_bad_input_exits_non_zero_naming_file_and_field(case, tmp_path, tiny_world, tiny_encoder_cfg):
    args = ["--image-embeddings", tiny_world["image_embeddings"], "--work-dir", str(tmp_path / "w")]
    if case == "unknown_key":
        recipe = _recipe(tmp_path, tiny_world, tiny_encoder_cfg, extra="optimiser: {lr: 1}\n")
        args += ["--train", tiny_world["train"]]
        expected = [str(recipe), "optimiser", "unknown key"]
    elif case == "missing_train":
        recipe = _recipe(tmp_path, tiny_world, tiny_encoder_cfg)
        args += ["--train", str(tmp_path / "absent.jsonl")]
        expected = ["data.train", "absent.jsonl"]
    else:
        recipe = _recipe(tmp_path, tiny_world, tiny_encoder_cfg)
        lines = open(tiny_world["train"]).read().splitlines()
        lines[2] = lines[2].replace('"caption": "', '"caption": 7, "x": "')
        bad = tmp_path / "bad.jsonl"
        bad.write_text("\n".join(lines) + "\n")
        args += ["--train", str(bad)]
        expected = [str(bad), "line 3", "caption"]
    out = subprocess.run([sys.executable, "-m", "vlr_plugins.cli", "train", str(recipe), *args],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    err = out.stderr.strip().splitlines()[-1]
    assert err.startswith("error: ")
    for word in expected:
        assert word in err, (word, err)
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").glob("*.pth"))


def test_precompute_writes_a_store_from_a_blip_checkpoint(tmp_path):
    transformers = pytest.importorskip("transformers")
    from PIL import Image

    from vlr_plugins.data import EmbeddingStore

    cfg = transformers.BlipConfig(
        text_config=dict(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32),
        vision_config=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                           image_size=32, patch_size=16, initializer_range=0.02),
        image_text_hidden_size=8,
    )
    model_dir = tmp_path / "blip"
    transformers.BlipForImageTextRetrieval(cfg).save_pretrained(model_dir)
    transformers.BlipImageProcessor(size={"height": 32, "width": 32}).save_pretrained(model_dir)
    images = tmp_path / "images" / "sub"
    images.mkdir(parents=True)
    for i, colour in enumerate(["red", "green", "blue"]):
        Image.new("RGB", (40, 30), colour).save(images / f"im{i}.png")
    out = tmp_path / "store"
    assert main(["precompute", "--images", str(tmp_path / "images"), "--encoder", f"blip:{model_dir}",
                 "--out", str(out), "--batch-size", "2"]) == 0
    store = EmbeddingStore(out)
    assert list(store.ids) == ["sub/im0", "sub/im1", "sub/im2"] and store.dim == 8
    emb = store.get(list(store.ids))
    assert torch_allclose_unit_norm(emb)
    # writing again without --overwrite is refused with a clear message and exit 2
    assert main(["precompute", "--images", str(tmp_path / "images"), "--encoder", f"blip:{model_dir}",
                 "--out", str(out)]) == 2


def torch_allclose_unit_norm(emb):
    import torch

    return torch.allclose(emb.norm(dim=-1), torch.ones(len(emb)), atol=1e-5)


def test_a_bug_in_a_command_shows_its_traceback_not_an_error_line(monkeypatch, capsys):
    import vlr_plugins.cli as cli

    def broken(args):
        return 1 // 0

    monkeypatch.delenv("VLR_DEBUG", raising=False)
    monkeypatch.setattr(cli, "cmd_list", broken)
    with pytest.raises(ZeroDivisionError):
        main(["list"])
    assert "error:" not in capsys.readouterr().err


@pytest.mark.parametrize("argv, option", [
    (["train", "paragraph/c5", "--set", "train.epochs"], "--set"),
    (["train", "paragraph/c5", "--set", "train.epochs=[1"], "--set"),
    (["eval", "--model", "m.pth", "--benchmarks", "b.yaml", "--budget", "short=x"], "--budget"),
])
def test_a_malformed_option_is_named_in_one_error_line(argv, option, capsys, monkeypatch):
    monkeypatch.delenv("VLR_DEBUG", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {option}: "), err


def test_vlr_debug_shows_the_traceback_of_a_bad_input(monkeypatch):
    from vlr_plugins.errors import UsageError

    monkeypatch.setenv("VLR_DEBUG", "1")
    with pytest.raises(UsageError, match="--set"):
        main(["train", "paragraph/c5", "--set", "nokey"])


def test_eval_names_a_malformed_truncation_and_a_missing_model(tiny_world, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("VLR_DEBUG", raising=False)
    bench = tmp_path / "b.yaml"
    bench.write_text(f"benchmarks:\n  - {{name: short, reader: retrieval_jsonl, path: {tiny_world['eval_short']}, "
                     f"item_embeddings: {tiny_world['image_embeddings']}, max_tokens: 20}}\n")
    assert main(["eval", "--model", str(tmp_path / "absent.pth"), "--benchmarks", str(bench),
                 "--truncation", "20,forty"]) == 2
    assert "error: --truncation: " in capsys.readouterr().err
    assert main(["eval", "--model", str(tmp_path / "absent.pth"), "--benchmarks", str(bench)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "absent.pth" in err


def test_dump_config_into_a_missing_folder_is_named(tmp_path, tiny_world, tiny_encoder_cfg, capsys, monkeypatch):
    monkeypatch.delenv("VLR_DEBUG", raising=False)
    recipe = _recipe(tmp_path, tiny_world, tiny_encoder_cfg)
    target = tmp_path / "absent" / "cfg.py"
    assert main(["train", str(recipe), "--train", tiny_world["train"], "--image-embeddings",
                 tiny_world["image_embeddings"], "--dump-config", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "absent" in err


def test_set_items_nest_and_a_later_one_wins():
    from vlr_plugins.recipe.overrides import parse_set_items as _parse_set

    assert _parse_set(["train.epochs=2", "data.fraction=0.5", "train.epochs=3", "train.amp=true"]) == {
        "train": {"epochs": 3, "amp": True}, "data": {"fraction": 0.5}}
    assert _parse_set(["loss={type: InfoNCELoss}", "loss.temperature=0.1"]) == {
        "loss": {"type": "InfoNCELoss", "temperature": 0.1}}
    assert _parse_set(["loss.temperature=0.1", "loss=7"]) == {"loss": 7}


@pytest.mark.parametrize("command", [["train", "paragraph/c5"], ["generate", "paragraph"]])
def test_several_set_options_add_up(command):
    from vlr_plugins.cli import build_parser

    args = build_parser().parse_args([*command, "--set", "a=1", "b.c=2", "--set", "a=3"])
    assert args.set == ["a=1", "b.c=2", "a=3"]


@pytest.mark.parametrize("items, words", [
    (["loss=1", "loss.temperature=2"], "inside loss, which an earlier item set to 1"),
    (["=2"], "expected KEY=VALUE"),
    ([".epochs=2"], "expected a dotted key"),
    (["train. epochs=2"], "expected a dotted key"),
])
def test_set_items_that_cannot_be_merged_are_named(items, words):
    from vlr_plugins.recipe.overrides import parse_set_items as _parse_set
    from vlr_plugins.errors import UsageError

    with pytest.raises(UsageError, match=r"^--set: ") as e:
        _parse_set(items)
    assert words in str(e.value)


@pytest.mark.parametrize("verbose", [False, True])
def test_a_bad_sample_file_is_the_last_thing_train_prints(verbose, tmp_path, tiny_world, tiny_encoder_cfg):
    recipe = _recipe(tmp_path, tiny_world, tiny_encoder_cfg)
    lines = open(tiny_world["train"]).read().splitlines()
    lines[6] = lines[6].replace('"positives": [', '"positives": 5, "was": [', 1)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    work = tmp_path / "work"
    argv = [sys.executable, "-m", "vlr_plugins.cli", "train", str(recipe), "--train", str(bad),
            "--image-embeddings", tiny_world["image_embeddings"], "--work-dir", str(work)]
    out = subprocess.run(argv + (["--verbose"] if verbose else []), capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in os.environ.items() if k != "VLR_DEBUG"})
    console = out.stdout + out.stderr
    assert out.returncode == 2, console[-3000:]
    last = [line for line in out.stderr.splitlines() if line.strip()][-1]
    assert last == f"error: {bad}, line 7, field 'positives': expected a list of strings, found int", console
    # the data is checked before MMEngine starts: no banner, no config, no log folder
    assert "mmengine" not in console and "System environment" not in console and "Traceback" not in console
    assert not work.exists()


def test_the_parser_is_built_without_any_trainer_ecosystem():
    """Every area adds its verbs, in ``vlr --help`` order, and building the parser (what
    ``vlr --help`` and every command do first) imports no ecosystem: transformers, MMEngine,
    open_clip and LAVIS come with the command that needs them (the LAVIS environment has no
    MMEngine and an older transformers)."""
    import subprocess
    import sys

    code = ("import sys; from vlr_plugins.cli import build_parser; p = build_parser(); "
            "verbs = list(p._subparsers._group_actions[0].choices); "
            "print(','.join(verbs)); "
            "print(','.join(m for m in ('transformers', 'mmengine', 'open_clip', 'open_clip_train', 'lavis', "
            "'peft', 'openai', 'mteb', 'datasets', 'sentence_transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].split(",") == ["list", "train", "precompute", "eval", "mine", "calibrate", "export", "openclip-train", "lavis-train",
                                 "lavis-eval", "lavis-export", "mteb", "push", "demo", "capst", "caption", "lens", "generate"]
    assert out[1] == ""
