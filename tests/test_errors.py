"""One UserError hierarchy: what a command reports as an ``error:`` line, and what it lets through."""

from __future__ import annotations

import pytest

from vlr_plugins.errors import (
    ConfigError,
    DataFormatError,
    InputError,
    MissingEmbeddingsError,
    MissingFileError,
    UsageError,
    UserError,
    as_user_error,
    run_cli,
)
from vlr_plugins.recipe import RecipeError


@pytest.mark.parametrize("error, standard", [
    (DataFormatError("train.jsonl", "expected an object", record=3), ValueError),
    (MissingEmbeddingsError(["img7"], "store"), KeyError),
    (RecipeError("c5.yaml", "loss.type", "unknown loss"), ValueError),
    (UsageError("--budget", "expected NAME=INTEGER"), ValueError),
    (ConfigError("model.vit: unknown keys"), ValueError),
    (MissingFileError("no checkpoint at x.pth"), FileNotFoundError),
])
def test_user_errors_keep_the_standard_base_callers_catch(error, standard):
    assert isinstance(error, UserError) and isinstance(error, standard)


def test_usage_error_names_the_option():
    err = UsageError("--set", "expected KEY=VALUE, found 'x'")
    assert (err.option, err.problem, str(err)) == ("--set", "expected KEY=VALUE, found 'x'",
                                                   "--set: expected KEY=VALUE, found 'x'")


def _raising(exc: BaseException):
    def command() -> int:
        raise exc
    return command


@pytest.mark.parametrize("error, line", [
    (UsageError("--budget", "expected NAME=INTEGER, found 'a=b'"), "error: --budget: expected NAME=INTEGER, found 'a=b'"),
    # a KeyError-based UserError reads as written, not repr()-quoted as KeyError.__str__ would
    (MissingEmbeddingsError(["img7"]), "error: 1 id has no embedding: 'img7'"),
    (InputError("x exists"), "error: x exists"),
])
def test_a_user_error_is_one_error_line_and_status_2(error, line, capsys, monkeypatch):
    monkeypatch.delenv("VLR_DEBUG", raising=False)
    assert run_cli(_raising(error)) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [line] and captured.out == ""


def test_vlr_debug_shows_the_traceback_of_a_user_error(monkeypatch):
    monkeypatch.setenv("VLR_DEBUG", "1")
    with pytest.raises(UsageError):
        run_cli(_raising(UsageError("--set", "bad")))


@pytest.mark.parametrize("bug", [ZeroDivisionError("division by zero"), ValueError("a bug"),
                                 KeyError("a bug"), FileNotFoundError("a bug")])
def test_anything_else_is_a_bug_and_propagates(bug, capsys, monkeypatch):
    monkeypatch.delenv("VLR_DEBUG", raising=False)
    with pytest.raises(type(bug)):
        run_cli(_raising(bug))
    assert "error:" not in capsys.readouterr().err


def test_interrupt_is_status_130(capsys):
    assert run_cli(_raising(KeyboardInterrupt())) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_the_status_of_the_command_is_returned():
    assert run_cli(lambda: 0) == 0 and run_cli(lambda: 3) == 3


def test_as_user_error_turns_only_the_named_kinds_into_input_errors():
    exists = FileExistsError("out exists; pass overwrite=True")
    with pytest.raises(InputError) as info:
        with as_user_error(FileExistsError, KeyError):
            raise exists
    assert str(info.value) == "out exists; pass overwrite=True" and info.value.__cause__ is exists
    with pytest.raises(InputError, match="^unknown protocol 'x'$"):  # KeyError's message, unquoted
        with as_user_error(KeyError):
            raise KeyError("unknown protocol 'x'")
    with pytest.raises(ValueError) as info:
        with as_user_error(FileExistsError):
            raise ValueError("a bug")
    assert not isinstance(info.value, UserError)
    usage = UsageError("--set", "bad")
    with pytest.raises(UsageError) as info:  # a UserError passes unchanged, though it is a ValueError
        with as_user_error(ValueError):
            raise usage
    assert info.value is usage


def test_a_model_that_cannot_be_loaded_names_itself_the_setting_and_the_doc(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from vlr_plugins.errors import ModelLoadError, loading_pretrained

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError) as e:
        with loading_pretrained("nobody/no-such-model", "model.pretrained"):
            AutoTokenizer.from_pretrained("nobody/no-such-model")
    message = str(e.value)
    assert message.startswith("model.pretrained: cannot load 'nobody/no-such-model': ")
    assert "local folder" in message and "docs/quickstart.md" in message
    assert "set HF_HUB_OFFLINE=1" not in message  # already set: no point suggesting it
    with pytest.raises(ModelLoadError, match=r"^--encoder: cannot load '.*empty'"):
        with loading_pretrained(str(tmp_path / "empty"), "--encoder"):
            AutoTokenizer.from_pretrained(str(tmp_path / "empty"))
    with pytest.raises(ZeroDivisionError):  # not a loading failure: untouched
        with loading_pretrained("x", "model.pretrained"):
            1 / 0


@pytest.mark.parametrize("error", [
    DataFormatError("train.jsonl", "expected an object", record=3, field="caption"),
    MissingEmbeddingsError(["img7"], "store"),
    RecipeError("c5.yaml", "loss.type", "unknown loss"),
    UsageError("--budget", "expected NAME=INTEGER"),
    ConfigError("model.vit: unknown keys"),
])
def test_user_errors_pickle_with_their_attributes(error):
    import pickle

    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error) and back.__dict__ == error.__dict__


class _RefusingDataset:
    """A map-style dataset whose item 1 is a bad record, as a reader would report it."""

    def __init__(self, error: Exception):
        self.error = error

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> int:
        if i == 1:
            raise self.error
        return i


@pytest.mark.parametrize("error", [
    DataFormatError("clips.jsonl", "cannot decode the video", record=2, field="video"),  # no 1-arg init
    ConfigError("data.frames: expected a positive integer"),  # built again from torch's message
])
def test_a_user_error_in_a_dataloader_worker_is_one_error_line(error, capsys, monkeypatch):
    from torch.utils.data import DataLoader

    monkeypatch.delenv("VLR_DEBUG", raising=False)

    def command() -> int:
        for _ in DataLoader(_RefusingDataset(error), batch_size=1, num_workers=1):
            pass
        return 0

    assert run_cli(command) == 2
    err = capsys.readouterr().err
    assert err == f"error: {error} (in DataLoader worker process 0)\n"


def test_a_bug_in_a_dataloader_worker_keeps_its_traceback(monkeypatch):
    from torch.utils.data import DataLoader

    monkeypatch.delenv("VLR_DEBUG", raising=False)

    def command() -> int:
        for _ in DataLoader(_RefusingDataset(ZeroDivisionError("bug")), batch_size=1, num_workers=1):
            pass
        return 0

    with pytest.raises(ZeroDivisionError, match="Caught ZeroDivisionError in DataLoader worker"):
        run_cli(command)


def test_a_path_that_is_not_there_is_a_missing_folder_not_a_hub_id(tmp_path):
    from vlr_plugins.errors import MissingFileError, ModelLoadError, check_pretrained_location

    for path in (str(tmp_path / "gone"), "./gone", "../gone", "~/gone-vlr", "runs/stage1/merged"):
        with pytest.raises(MissingFileError, match=r"^--model: cannot load '[^']+': no such folder") as e:
            check_pretrained_location(path, "--model")
        assert isinstance(e.value, ModelLoadError) and "not looked up on the Hugging Face Hub" in str(e.value)
    for name in ("Qwen/Qwen2-VL-2B-Instruct", "bert-base-uncased", "ViT-B-32:/no/such/epoch_1.pt"):
        check_pretrained_location(name, "--model")  # Hub ids and scheme specs are for their loaders to judge
    (tmp_path / "empty").mkdir()
    check_pretrained_location(str(tmp_path / "empty"), "tokenizer")
    with pytest.raises(ModelLoadError, match=rf"^model.pretrained: the folder {tmp_path / 'empty'} has no config.json"):
        check_pretrained_location(str(tmp_path / "empty"), "model.pretrained", needs="config.json")


def test_pickled_weights_are_named_by_file_and_the_outer_setting(tmp_path):
    import os

    import torch

    from vlr_plugins.errors import ModelLoadError, loading_pretrained

    class Call:
        def __reduce__(self):
            return os.getcwd, ()

    (tmp_path / "m").mkdir()
    weights = tmp_path / "m" / "pytorch_model.bin"
    torch.save({"w": torch.zeros(2), "x": Call()}, weights)
    with pytest.raises(ModelLoadError) as e:
        with loading_pretrained(str(tmp_path / "m"), "--model"):
            with loading_pretrained(str(tmp_path / "m"), "pretrained"):  # the library's own block, inside
                torch.load(weights, weights_only=True)
    message = str(e.value)
    assert message.startswith(f"--model: cannot load '{tmp_path / 'm'}': {weights} is not a weights-only checkpoint")
    assert "posix.getcwd" in message and "weights_only=False" not in message and "\n" not in message


@pytest.mark.parametrize("failed, total, status", [(0, 0, 0), (0, 5, 0), (1, 5, 1), (4, 5, 1), (5, 5, 2), (1, 1, 2)])
def test_failed_items_status_is_the_documented_convention(failed, total, status):
    from vlr_plugins.errors import failed_items_status

    assert failed_items_status(failed, total) == status
