"""``vlr openclip-train``: open_clip_train's own loop with the vlr losses, end to end."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("open_clip_train")
import open_clip  # noqa: E402

from vlr_plugins.integrations.open_clip import add_cli  # noqa: E402
from vlr_plugins.integrations.open_clip.patch import PATCHED_NAMES  # noqa: E402
from vlr_plugins.integrations.open_clip.train import main, resolve_arguments  # noqa: E402
from vlr_plugins.recipe import list_recipes, load_recipe  # noqa: E402


def run_args(data, logs, *extra):
    return [
        "--train-data",
        data,
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--workers",
        "0",
        "--device",
        "cpu",
        "--logs",
        str(logs),
        "--name",
        "run",
        "--lr",
        "1e-3",
        "--warmup",
        "1",
        "--precision",
        "fp32",
        *extra,
    ]


def checkpoint(logs):
    return os.path.join(logs, "run", "checkpoints", "epoch_1.pt")


def changed(before, after):
    return {k for k in before if not torch.equal(before[k], after[k])}


def test_two_steps_with_hard_negatives_write_a_checkpoint_open_clip_loads(
    tiny_model, tiny_data, tmp_path, restore_logging
):
    torch.manual_seed(0)
    before = open_clip.create_model(tiny_model).state_dict()
    init = tmp_path / "init.pt"
    torch.save({"state_dict": before}, init)
    views = (
        "{positives: [{field: caption, max_tokens: 77}, {field: positives, take: random, count: 1, "
        "max_tokens: 77}], negatives: [{field: hard_negatives, max_tokens: 77}]}"
    )
    code = main(
        run_args(
            tiny_data["jsonl"],
            tmp_path / "logs",
            "--model",
            tiny_model,
            "--pretrained",
            str(init),
            "--vlr-loss",
            "HardNegativeInfoNCELoss",
            "--vlr-text-views",
            views,
        )
    )
    assert code == 0
    import open_clip_train.main as ocm

    assert all(getattr(ocm, n).__module__.startswith("open_clip") for n in PATCHED_NAMES), (
        "patches undone"
    )
    saved = torch.load(checkpoint(tmp_path / "logs"), weights_only=True)["state_dict"]
    assert list(saved) == list(before), "a plain open_clip state dict"
    assert {"positional_embedding", "visual.conv1.weight", "logit_scale"} <= changed(before, saved)
    loaded = open_clip.create_model(
        tiny_model, pretrained=checkpoint(tmp_path / "logs")
    ).state_dict()
    assert not changed(saved, loaded)


def test_csv_data_with_precomputed_image_embeddings_trains_only_text(
    tiny_model, tiny_data, tmp_path, restore_logging
):
    store = tmp_path / "store"
    torch.manual_seed(0)
    before = open_clip.create_model(tiny_model).state_dict()
    init = tmp_path / "init.pt"
    torch.save(before, init)
    code = main(
        run_args(
            tiny_data["csv"],
            tmp_path / "logs",
            "--model",
            tiny_model,
            "--pretrained",
            str(init),
            "--lock-image",
            "--vlr-image-embeddings",
            str(store),
            "--vlr-loss",
            "MultiPositiveInfoNCELoss",
        )
    )
    assert code == 0
    from vlr_plugins.data import EmbeddingStore

    assert len(EmbeddingStore(store)) == 8, "computed once with the locked vision tower"
    saved = torch.load(checkpoint(tmp_path / "logs"), weights_only=True)["state_dict"]
    moved = changed(before, saved)
    assert "token_embedding.weight" in moved and not any(k.startswith("visual.") for k in moved)


def test_long_context_with_primary_component_matching(
    tiny_model, tiny_data, tmp_path, restore_logging
):
    pytest.importorskip("vlr_plugins.text.length")
    from vlr_plugins.integrations.open_clip import add_long_context_config
    from vlr_plugins.text import stretch_positional_embedding

    name = add_long_context_config(tiny_model, 96, tmp_path / "configs")
    torch.manual_seed(0)
    short = open_clip.create_model(tiny_model).state_dict()
    init = tmp_path / "init.pt"
    torch.save({"state_dict": short}, init)
    code = main(
        run_args(
            tiny_data["jsonl"],
            tmp_path / "logs",
            "--model",
            name,
            "--pretrained",
            str(init),
            "--vlr-recipe",
            "open_clip/long_clip",
            "--vlr-loss-args",
            "{num_components: 2}",
            "--vlr-text-views",
            "[{field: paragraph, max_tokens: 96}]",
        )
    )
    assert code == 0
    saved = torch.load(checkpoint(tmp_path / "logs"), weights_only=True)["state_dict"]
    stretched = stretch_positional_embedding(short["positional_embedding"], 96, keep=20)
    pos = saved["positional_embedding"]
    assert pos.shape == (96, 32)
    assert torch.equal(pos[:20], stretched[:20]), (
        "the kept positions are frozen, weight decay included"
    )
    assert not torch.equal(pos[20:], stretched[20:])
    loaded = open_clip.create_model(name, pretrained=checkpoint(tmp_path / "logs"))
    assert torch.equal(loaded.positional_embedding, pos)


def test_a_long_clip_checkpoint_trains_on_from_its_two_tables(tiny_data, tmp_path, restore_logging):
    from _long_clip import register_tiny_long_clip, save_long_clip_checkpoint

    from vlr_plugins.integrations.open_clip import add_long_context_config

    base = register_tiny_long_clip(tmp_path / "configs", "vlr-test-longclip-train")
    name = add_long_context_config(base, 248, tmp_path / "configs")
    state = save_long_clip_checkpoint(tmp_path / "longclip-tiny.pt")
    code = main(
        run_args(
            tiny_data["jsonl"],
            tmp_path / "logs",
            "--model",
            name,
            "--pretrained",
            str(tmp_path / "longclip-tiny.pt"),
            "--vlr-text-views",
            "[{field: paragraph, max_tokens: 248}]",
        )
    )
    assert code == 0
    saved = torch.load(checkpoint(tmp_path / "logs"), weights_only=True)["state_dict"]
    pos = saved["positional_embedding"]
    assert "positional_embedding_res" not in saved and pos.shape == (248, 32)
    assert torch.equal(pos[:20], state["positional_embedding"][:20]), "Long-CLIP's frozen rows"
    assert not torch.equal(pos[20:], state["positional_embedding_res"][20:]), "its trained rows"
    loaded = open_clip.create_model(name, pretrained=checkpoint(tmp_path / "logs"))
    assert torch.equal(loaded.positional_embedding, pos)


def test_a_long_clip_checkpoint_under_a_short_name_is_refused_naming_the_long_one(tiny_data, tmp_path,
                                                                                  restore_logging):
    from _long_clip import register_tiny_long_clip, save_long_clip_checkpoint

    from vlr_plugins.errors import ConfigError

    base = register_tiny_long_clip(tmp_path / "configs", "vlr-test-longclip-train-short")
    save_long_clip_checkpoint(tmp_path / "longclip-tiny.pt")
    argv = run_args(tiny_data["jsonl"], tmp_path / "logs", "--model", base, "--pretrained",
                    str(tmp_path / "longclip-tiny.pt"))
    with pytest.raises(ConfigError, match=rf"--pretrained: .*longclip-tiny.pt is a Long-CLIP checkpoint "
                                          rf"\(key 'positional_embedding_res'\).*--model {base}-ctx248"):
        main(argv)


def test_recipes_give_defaults_and_the_command_line_wins(tiny_data):
    options, rest = resolve_arguments(
        ["--vlr-recipe", "open_clip/c7", "--train-data", tiny_data["jsonl"], "--lr", "0.5"]
    )
    assert options.loss["type"] == "HardNegativeInfoNCELoss" and options.views.negatives
    assert options.context_length == 248 and options.keep_positions == 20
    assert rest[rest.index("--model") + 1] == "ViT-B-16-quickgelu-ctx248" and "--lock-image" in rest
    assert rest[-2:] == ["--force-context-length", "248"]
    from open_clip_train.params import parse_args

    a = parse_args(rest)
    assert (a.lr, a.batch_size, a.epochs, a.warmup, a.wd, a.pretrained) == (
        0.5,
        256,
        10,
        500,
        0.05,
        "openai",
    )


def test_every_shipped_open_clip_recipe_loads():
    names = [n for n in list_recipes() if n.startswith("open_clip/")]
    assert {f"open_clip/c{i}" for i in range(1, 11)} | {"open_clip/long_clip"} <= set(names)
    for n in names:
        r = load_recipe(n)
        assert r.model["type"] == "open_clip" and r.model["name"].endswith("-ctx248")
    assert load_recipe("open_clip/c5").text_views == load_recipe("paragraph/c5").text_views
    assert load_recipe("open_clip/c5").train.length_blocks == 1  # paragraph/c5's 2 does not apply here


def test_a_recipe_with_length_blocks_is_refused_with_the_reason(tiny_data, tmp_path):
    from vlr_plugins.recipe import RecipeError

    recipe = tmp_path / "blocks.yaml"
    recipe.write_text(f"_base_: {list_recipes()['open_clip/c5']}\nname: blocks\ntrain: {{length_blocks: 2}}\n")
    with pytest.raises(RecipeError, match=r"blocks\.yaml: train\.length_blocks: 2, but vlr openclip-train encodes "
                                          r"a batch's texts in one block"):
        resolve_arguments(["--vlr-recipe", str(recipe), "--train-data", tiny_data["jsonl"]])


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--accum-freq", "2"], "accum-freq"),
        (["--siglip"], "siglip"),
        (["--local-loss"], "global-batch loss"),
        (["--distill-model", "ViT-B-32", "--distill-pretrained", "openai"], "distillation"),
        (["--vlr-image-embeddings", "somewhere"], "add --lock-image"),
        (
            [
                "--vlr-loss",
                "InfoNCELoss",
                "--vlr-text-views",
                "[{field: caption, max_tokens: 77}, {field: positives, max_tokens: 77}]",
            ],
            "exactly one positive",
        ),
        (["--vlr-short-text", "first-sentence"], "takes no short captions"),
        (["--vlr-loss-args", "{varaint: log_sum}"], "takes no argument 'varaint'"),
    ],
)
def test_unsupported_combinations_are_refused(tiny_data, extra, words):
    with pytest.raises(ValueError, match=words):
        resolve_arguments(["--train-data", tiny_data["jsonl"], "--model", "vlr-tiny", *extra])


def test_the_module_entry_point_exits_2_with_the_reason(tiny_data):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vlr_plugins.integrations.open_clip.train",
            "--train-data",
            tiny_data["jsonl"],
            "--accum-freq",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2 and "error:" in result.stderr and "--accum-freq" in result.stderr
    assert (
        "--vlr-recipe"
        in subprocess.run(
            [sys.executable, "-m", "vlr_plugins.integrations.open_clip.train", "--help"],
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
    )


def test_add_cli_hands_every_argument_through():
    parser = argparse.ArgumentParser(prog="vlr")
    add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["openclip-train", "--train-data", "x.jsonl", "--vlr-loss", "InfoNCELoss", "--help"]
    )
    assert args.argv == ["--train-data", "x.jsonl", "--vlr-loss", "InfoNCELoss", "--help"]
    assert callable(args.fn)


@pytest.mark.parametrize(
    "extra, option",
    [
        (["--vlr-loss-args", "[1, 2]"], "--vlr-loss-args"),
        (["--vlr-text-views", "{positives: [}"], "--vlr-text-views"),
        (["--vlr-short-text", "first-sentence"], "--vlr-short-text"),
    ],
)
def test_refusals_are_usage_errors_naming_the_option(tiny_data, extra, option):
    from vlr_plugins.errors import UsageError

    with pytest.raises(UsageError) as info:
        resolve_arguments(["--train-data", tiny_data["jsonl"], "--model", "vlr-tiny", *extra])
    assert info.value.option == option and str(info.value).startswith(f"{option}: ")


def test_vlr_openclip_train_reports_a_refusal_as_vlr_does(tiny_data, capsys, monkeypatch):
    from vlr_plugins.cli import main as vlr

    monkeypatch.delenv("VLR_DEBUG", raising=False)
    assert vlr(["openclip-train", "--train-data", tiny_data["jsonl"], "--model", "vlr-tiny", "--siglip"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: vlr openclip-train: cannot run this combination") and "--siglip" in err


def test_a_loss_that_cannot_be_built_is_a_user_error(tiny_data):
    from vlr_plugins.errors import UserError

    with pytest.raises(UserError, match="temperature must be > 0"):
        resolve_arguments(["--train-data", tiny_data["jsonl"], "--model", "vlr-tiny",
                           "--vlr-loss-args", "{temperature: -1}"])


@pytest.mark.parametrize("env, processes", [({}, 1), ({"WORLD_SIZE": "4"}, 4), ({"SLURM_NTASKS": "4"}, 4),
                                            ({"OMPI_COMM_WORLD_SIZE": "2"}, 1)])
def test_a_recipes_global_batch_is_split_over_the_processes_of_any_launcher(tiny_data, monkeypatch, env,
                                                                            processes):
    """torchrun's WORLD_SIZE, srun's SLURM_NTASKS (srun sets no WORLD_SIZE: every process once
    took the whole global batch): counted as open_clip_train counts them (it does not run
    distributed on MPI's variables alone, so neither is the batch split there)."""
    for name in ("WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _, rest = resolve_arguments(["--vlr-recipe", "open_clip/c7", "--train-data", tiny_data["jsonl"]])
    from open_clip_train.params import parse_args

    assert parse_args(rest).batch_size * processes == 256


def test_a_learning_rate_that_prints_as_zero_is_explained_up_front():
    """open_clip's log shows the rate with 6 decimals: Long-CLIP's 1e-6 reads 'LR: 0.000000'."""
    from open_clip_train.params import parse_args

    from vlr_plugins.integrations.open_clip.train import _lr_print_note

    note = _lr_print_note(parse_args(["--lr", "1e-6", "--warmup", "200"]))
    assert note.startswith("lr 1e-06: open_clip's log prints the learning rate with 6 decimals")
    assert "0.000000" in note and "200 steps" in note
    assert _lr_print_note(parse_args(["--lr", "1e-3"])) is None
