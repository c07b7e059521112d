"""The bad-input catalogue of `vlr train` (and `vlr list`): every case writes one real bad
input -- a sample file, a recipe, a `--set` item, a store, a tokenizer, a budget, a
checkpoint, an output path -- and `vlr` must refuse it with exit status 2, one error line
naming where the problem is, no traceback, and no work dir left behind.

Read a row as: *this input* -> *the message names these words*.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from _refusal import assert_refused

pytest.importorskip("mmengine")


@pytest.fixture(autouse=True)
def _plain_run(monkeypatch):
    monkeypatch.delenv("VLR_DEBUG", raising=False)
    monkeypatch.delenv("RANK", raising=False)  # not started by torchrun


@dataclass
class Kit:
    """A good run (tiny world, tiny recipe) and the means to spoil one part of it."""

    tmp: Path
    world: dict
    vocab: int

    @property
    def work(self) -> Path:
        return self.tmp / "work"

    def model(self, **config) -> dict:
        """A random-init encoder as a user writes it: no special-token ids (they come
        from the tokenizer)."""
        cfg = dict(vocab_size=self.vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=160)
        cfg.update(config)
        return {"type": "BlipTextEncoder", "pretrained": None, "config": cfg, "embed_dim": 32,
                "tokenizer": self.world["tokenizer"]}

    def recipe(self, extra: str = "", *, model: dict | None = None, name: str = "tiny.yaml") -> Path:
        """C5 (caption 77 + paragraph 128 tokens), made tiny; ``extra`` YAML is appended."""
        from vlr_plugins.recipe import find_recipe

        p = self.tmp / name
        p.write_text(
            f"_base_: {json.dumps(str(find_recipe('paragraph/c5')))}\n"
            f"name: tiny\n"
            f"model: {json.dumps(model or self.model())}\n"
            "train: {batch_size: 16, epochs: 1, warmup_steps: 1, num_workers: 0}\n" + extra)
        return p

    def argv(self, recipe: Path | str | None = None, *, train: str | Path | None = None,
             store: str | Path | None = None, more: tuple = ()) -> list[str]:
        return ["train", str(recipe or self.recipe()), "--train", str(train or self.world["train"]),
                "--image-embeddings", str(store or self.world["image_embeddings"]),
                "--work-dir", str(self.work), *map(str, more)]

    def lines(self) -> list[str]:
        return Path(self.world["train"]).read_text().splitlines()

    def samples(self, name: str, lines: list[str] | str | bytes) -> Path:
        p = self.tmp / name
        if isinstance(lines, bytes):
            p.write_bytes(lines)
        else:
            p.write_text(lines if isinstance(lines, str) else "\n".join(lines) + "\n")
        return p

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.lines()]

    def store_copy(self, name: str = "store") -> Path:
        dst = self.tmp / name
        shutil.copytree(self.world["image_embeddings"], dst)
        return dst


@pytest.fixture
def kit(tmp_path, tiny_world):
    return Kit(tmp_path, tiny_world, len(tiny_world["object"].tokenizer()))


def _replace_line(kit: Kit, index: int, line: str) -> list[str]:
    lines = kit.lines()
    lines[index] = line
    return lines


def _record_with(kit: Kit, index: int, **changes) -> list[str]:
    records = kit.records()
    records[index].update(changes)
    return [json.dumps(r) for r in records]


def _parquet(kit: Kit, drop: str | None = None) -> Path:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    records = kit.records()
    if drop:
        for r in records:
            r.pop(drop)
    p = kit.tmp / "samples.parquet"
    pq.write_table(pa.Table.from_pylist(records), p)
    return p


def _csv(kit: Kit) -> Path:
    """open_clip's CSV layout; the second data row's list cell is broken JSON."""
    import csv

    p = kit.tmp / "samples.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "caption", "positives", "paragraph"])
        for i, r in enumerate(kit.records()[:20]):
            w.writerow([r["id"], r["caption"], '["unclosed' if i == 1 else json.dumps(r["positives"]),
                        r["paragraph"]])
    return p


def _store_of_width(kit: Kit, dim: int) -> Path:
    from vlr_plugins.data import EmbeddingStore, EmbeddingStoreWriter

    ids = list(EmbeddingStore(kit.world["image_embeddings"]).ids)
    out = kit.tmp / f"store{dim}"
    with EmbeddingStoreWriter(out, dim) as w:
        w.add(ids, torch.randn(len(ids), dim))
    return out


def _store_without(kit: Kit, missing: int) -> Path:
    from vlr_plugins.data import EmbeddingStore, EmbeddingStoreWriter

    src = EmbeddingStore(kit.world["image_embeddings"])
    ids = list(src.ids)[missing:]
    out = kit.tmp / "partial"
    with EmbeddingStoreWriter(out, src.dim) as w:
        w.add(ids, src.get(ids))
    return out


def _shard(store: Path) -> Path:
    return next(store.glob("*.safetensors"))


def _truncated_shard(kit: Kit) -> Path:
    store = kit.store_copy()
    shard = _shard(store)
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    return store


def _pickled_checkpoint(kit: Kit) -> Path:
    p = kit.tmp / "pickled.pth"
    torch.save({"state_dict": {}, "meta": {"when": Path("/tmp")}}, p)  # a PosixPath: not weights-only
    return p


def _deepspeed_folder(kit: Kit) -> Path:
    """A DeepSpeed checkpoint folder (DeepSpeedStrategy's) whose model states hold no weights."""
    p = kit.tmp / "epoch_5.pth"
    p.mkdir()
    torch.save({"meta": {"epoch": 5}}, p / "mp_rank_00_model_states.pt")
    return p


def _fsdp_local_folder(kit: Kit) -> Path:
    """A sharded FSDP checkpoint (``state_dict_cfg: local``) of two processes: one file a rank."""
    p = kit.tmp / "epoch_6.pth"
    p.mkdir()
    for rank in range(2):
        torch.save({"state_dict": {}, "meta": {"epoch": 6}}, p / f"rank{rank}.pth")
    return p


def _tokenizer_folder_without_files(kit: Kit) -> Path:
    p = kit.tmp / "empty_tokenizer"
    p.mkdir()
    (p / "README.md").write_text("nothing here\n")
    return p


def _not_a_dir(kit: Kit) -> Path:
    p = kit.tmp / "work"
    p.write_text("a file where the work dir goes\n")
    return p


# (case id, argv for the kit, words the error line names)
CASES = [
    # ---- training samples: JSON Lines
    ("jsonl-invalid-json", lambda k: k.argv(train=k.samples("bad.jsonl", _replace_line(k, 2, '{"id": "x", '))),
     ["bad.jsonl", "line 3", "invalid JSON"]),
    ("jsonl-not-utf8", lambda k: k.argv(train=k.samples("latin1.jsonl", b"\n".join(
        line.encode().replace(b'"caption": "', b'"caption": "caf\xe9 ', 1) if i == 1 else line.encode()
        for i, line in enumerate(k.lines())))),
     ["latin1.jsonl", "line 2", "UTF-8"]),
    ("jsonl-caption-not-a-string", lambda k: k.argv(train=k.samples("bad.jsonl", _record_with(k, 2, caption=7))),
     ["bad.jsonl", "line 3", "'caption'", "expected a string"]),
    ("jsonl-positives-not-a-list", lambda k: k.argv(train=k.samples(
        "bad.jsonl", _record_with(k, 4, positives="one caption"))), ["line 5", "'positives'", "list of strings"]),
    ("jsonl-score-out-of-range", lambda k: k.argv(train=k.samples("bad.jsonl", _record_with(k, 0, score=11))),
     ["line 1", "'score'", "between 0 and 10"]),
    ("jsonl-missing-id", lambda k: k.argv(train=k.samples("bad.jsonl", _record_with(k, 1, id=None))),
     ["line 2", "'id'", "missing"]),
    ("jsonl-duplicate-id", lambda k: k.argv(train=k.samples(
        "dup.jsonl", _record_with(k, 5, id=k.records()[1]["id"]))), ["dup.jsonl", "line 6", "duplicate id", "line 2"]),
    ("jsonl-an-array", lambda k: k.argv(train=k.samples("array.jsonl", json.dumps(k.records()[:3], indent=1))),
     ["array.jsonl", "line 1", "JSON Lines"]),
    ("jsonl-empty", lambda k: k.argv(train=k.samples("empty.jsonl", "")),
     ["--train (data.train)", "empty.jsonl", "holds no samples"]),
    ("jsonl-lacks-the-paragraph-c5-reads", lambda k: k.argv(train=k.samples(
        "nopara.jsonl", _record_with(k, 3, paragraph=None))), ["nopara.jsonl", "paragraph"]),
    # ---- training samples: Parquet, CSV, other files
    ("parquet-not-parquet", lambda k: k.argv(train=k.samples("bad.parquet", b"PAR1 but not really")),
     ["bad.parquet", "Parquet"]),
    ("parquet-without-caption-column", lambda k: k.argv(train=_parquet(k, drop="caption")),
     ["samples.parquet", "'caption'"]),
    ("csv-list-cell-not-json", lambda k: k.argv(train=_csv(k)), ["samples.csv", "line 3", "'positives'"]),
    ("samples-of-unknown-suffix", lambda k: k.argv(train=k.samples("samples.txt", k.lines())),
     ["--train (data.train)", "samples.txt", ".jsonl"]),
    ("train-file-missing", lambda k: k.argv(train=k.tmp / "absent.jsonl"),
     ["--train (data.train)", "no such file", "absent.jsonl"]),
    ("train-is-a-folder", lambda k: k.argv(train=k.tmp), ["--train (data.train)", "is a folder"]),
    # ---- recipes
    ("recipe-unknown-key", lambda k: k.argv(k.recipe("optimiser: {lr: 1}\n")),
     ["tiny.yaml", "optimiser", "unknown key"]),
    ("recipe-epochs-not-an-integer", lambda k: k.argv(k.recipe("train: {epochs: two}\n", name="two.yaml")),
     ["two.yaml: train.epochs", "expected an integer, found 'two'"]),
    ("recipe-view-of-no-field", lambda k: k.argv(k.recipe(
        "text_views: {positives: [{field: summary, max_tokens: 77}]}\n")),
     ["tiny.yaml: text_views.positives[0].field", "no text field 'summary'"]),
    ("recipe-view-without-budget", lambda k: k.argv(k.recipe(
        "text_views: {positives: [{field: caption}]}\n")), ["text_views.positives[0].max_tokens", "missing"]),
    ("recipe-temperature-zero", lambda k: k.argv(k.recipe("loss: {temperature: 0}\n")),
     ["tiny.yaml: loss.temperature", "temperature must be > 0"]),
    ("recipe-temperature-negative", lambda k: k.argv(k.recipe("loss: {temperature: -0.5}\n")),
     ["tiny.yaml: loss.temperature", "found -0.5"]),
    ("recipe-temperature-not-a-number", lambda k: k.argv(k.recipe("loss: {temperature: warm}\n")),
     ["loss.temperature", "expected a number, found 'warm'"]),
    ("recipe-loss-unknown-argument", lambda k: k.argv(k.recipe("loss: {temprature: 0.1}\n")),
     ["loss.temprature", "takes no argument"]),
    ("recipe-loss-does-not-fit-views", lambda k: k.argv(k.recipe("loss: {type: InfoNCELoss}\n")),
     ["text_views.positives", "exactly one positive"]),
    ("recipe-model-unknown-argument", lambda k: k.argv(k.recipe(model={**k.model(), "pretrianed": "x"})),
     ["model.pretrianed", "takes no argument"]),
    ("recipe-model-heads-do-not-divide", lambda k: k.argv(k.recipe(model=k.model(num_attention_heads=5))),
     ["tiny.yaml: model.config", "num_attention_heads"]),
    ("recipe-model-not-registered", lambda k: k.argv(k.recipe(model={"type": "GPT"})),
     ["model.type", "'GPT'", "registered"]),
    ("recipe-circular-base", lambda k: k.argv(_circular(k)), ["_base_", "circular"]),
    ("recipe-base-missing", lambda k: k.argv(k.samples("child.yaml", "_base_: parent.yaml\nname: c\n")),
     ["child.yaml: _base_", "no such file", "parent.yaml"]),
    ("recipe-missing", lambda k: k.argv(k.tmp / "nope.yaml"), ["nope.yaml", "file not found"]),
    ("recipe-shipped-name-unknown", lambda k: k.argv("paragraph/c99"), ["paragraph/c99", "no shipped recipe"]),
    ("recipe-not-yaml", lambda k: k.argv(k.samples("broken.yaml", "name: [unclosed\nloss: {}\n")),
     ["broken.yaml", "not valid YAML", "line"]),
    ("recipe-a-list", lambda k: k.argv(k.samples("list.yaml", "- name: a\n")),
     ["list.yaml", "expected a mapping"]),
    ("recipe-batch-larger-than-data", lambda k: k.argv(k.recipe("train: {batch_size: 4096}\n")),
     ["tiny.yaml: train.batch_size", "no full batch of 4096"]),
    ("recipe-negative-lr", lambda k: k.argv(k.recipe("train: {lr: -0.001}\n")),
     ["tiny.yaml: train.lr", "expected > 0, found -0.001"]),
    ("recipe-beta-of-one", lambda k: k.argv(k.recipe("train: {betas: [0.9, 1.0]}\n")),
     ["train.betas[1]", "0 <= beta < 1"]),
    ("recipe-grad-clip-zero", lambda k: k.argv(k.recipe("train: {grad_clip: 0}\n")), ["train.grad_clip", "> 0"]),
    ("recipe-schedule-unknown", lambda k: k.argv(k.recipe("train: {schedule: linear}\n")),
     ["train.schedule", "expected one of ['cosine', 'constant']"]),
    ("recipe-length-blocks-zero", lambda k: k.argv(k.recipe("train: {length_blocks: 0}\n")),
     ["tiny.yaml: train.length_blocks", "expected >= 1", "found 0"]),
    ("recipe-length-blocks-negative", lambda k: k.argv(k.recipe("train: {length_blocks: -2}\n")),
     ["tiny.yaml: train.length_blocks", "expected >= 1", "found -2"]),
    ("recipe-length-blocks-not-an-integer", lambda k: k.argv(k.recipe("train: {length_blocks: 1.5}\n")),
     ["tiny.yaml: train.length_blocks", "expected an integer, found 1.5"]),
    ("recipe-length-blocks-a-string", lambda k: k.argv(k.recipe("train: {length_blocks: two}\n")),
     ["tiny.yaml: train.length_blocks", "expected an integer, found 'two'"]),
    # ---- --set
    ("set-epochs-not-an-integer", lambda k: k.argv(more=("--set", "train.epochs=two")),
     ["--set train.epochs", "expected an integer, found 'two'"]),
    ("set-unknown-key", lambda k: k.argv(more=("--set", "trian.epochs=1")), ["--set trian", "unknown key"]),
    ("set-temperature-zero", lambda k: k.argv(more=("--set", "loss.temperature=0")),
     ["--set loss.temperature", "> 0"]),
    ("set-fraction-out-of-range", lambda k: k.argv(more=("--set", "data.fraction=0")),
     ["--set data.fraction", "0 < fraction <= 1"]),
    ("set-inside-a-value", lambda k: k.argv(more=("--set", "loss=1", "loss.temperature=2")),
     ["--set", "inside loss"]),
    ("set-without-value", lambda k: k.argv(more=("--set", "train.epochs")), ["--set", "KEY=VALUE"]),
    ("set-empty-key-part", lambda k: k.argv(more=("--set", "train..epochs=2")), ["--set", "dotted key"]),
    ("set-value-not-yaml", lambda k: k.argv(more=("--set", "train.epochs=[1")), ["--set", "not valid YAML"]),
    ("set-view-budget-past-positions", lambda k: k.argv(more=(
        "--set", "text_views={positives: [{field: caption, max_tokens: 400}]}")),
     ["--set text_views.positives[0].max_tokens", "400 tokens exceed", "160 positions"]),
    ("set-amp-without-a-gpu", lambda k: k.argv(more=("--set", "train.amp=true")),
     ["--set train.amp", "GPU"]),
    ("set-length-blocks-zero", lambda k: k.argv(more=("--set", "train.length_blocks=0")),
     ["--set train.length_blocks", "expected >= 1", "found 0"]),
    ("launcher-outside-torchrun", lambda k: k.argv(more=("--launcher", "pytorch")), ["--launcher", "torchrun", "RANK"]),
    # ---- embedding stores
    ("store-missing", lambda k: k.argv(store=k.tmp / "absent_store"),
     ["--image-embeddings (data.image_embeddings)", "no such folder"]),
    ("store-without-index", lambda k: k.argv(store=_mkdir(k.tmp / "not_a_store")),
     ["--image-embeddings (data.image_embeddings)", "index.json"]),
    ("store-index-not-json", lambda k: k.argv(store=_spoil_index(k)), ["index.json", "not valid JSON"]),
    ("store-lacks-ids", lambda k: k.argv(store=_store_without(k, 3)), ["partial", "3 ids have no embedding"]),
    ("store-of-another-width", lambda k: k.argv(store=_store_of_width(k, 16)),
     ["--image-embeddings (data.image_embeddings)", "16-d", "32-d"]),
    ("store-shard-truncated", lambda k: k.argv(store=_truncated_shard(k)), ["embeddings-00000.safetensors"]),
    ("store-shard-missing", lambda k: k.argv(store=_without_shard(k)), ["embeddings-00000.safetensors", "missing"]),
    # ---- tokenizers and pretrained models
    ("tokenizer-folder-missing", lambda k: k.argv(more=("--tokenizer", k.tmp / "no_tokenizer")),
     ["--tokenizer", "no such folder", "no_tokenizer"]),
    ("tokenizer-folder-empty", lambda k: k.argv(more=("--tokenizer", _tokenizer_folder_without_files(k))),
     ["--tokenizer", "holds no tokenizer"]),
    ("tokenizer-hub-id-offline", lambda k: k.argv(k.recipe(model={**k.model(), "tokenizer": "someone/no-such-tok"})),
     ["tiny.yaml: model.tokenizer", "'someone/no-such-tok'", "offline use"]),
    ("pretrained-model-offline", lambda k: k.argv("paragraph/c5", more=("--set", "train.batch_size=16")),
     ["model.pretrained", "Salesforce/blip-itm-base-coco", "local folder", "offline use"]),
    ("vocab-smaller-than-tokenizer", lambda k: k.argv(k.recipe(model=k.model(vocab_size=50))),
     ["model.config", "vocab"]),
    ("special-id-outside-vocab", lambda k: k.argv(k.recipe(model=k.model(bos_token_id=30522))),
     ["model.config.bos_token_id", "30522", "outside the vocabulary"]),
    # ---- budgets against the encoder's positions
    ("view-budget-past-positions", lambda k: k.argv(k.recipe(model=k.model(max_position_embeddings=100))),
     ["c5.yaml: text_views.positives[1].max_tokens", "128 tokens exceed", "100 positions",
      "model.config.max_position_embeddings"]),
    ("eval-budget-past-positions", lambda k: k.argv(k.recipe(
        f"eval: [{{name: s, ann_file: {json.dumps(k.world['eval_short'])}, max_tokens: 999}}]\n")),
     ["eval[0].max_tokens", "999 tokens exceed"]),
    ("eval-split-file-missing", lambda k: k.argv(k.recipe("eval: [{name: s, ann_file: gone.jsonl, max_tokens: 77}]\n")),
     ["eval[0].ann_file", "gone.jsonl"]),
    # ---- checkpoints to resume from, output paths
    ("resume-missing", lambda k: k.argv(more=("--resume", k.tmp / "epoch_9.pth")), ["--resume", "epoch_9.pth"]),
    ("resume-pickled", lambda k: k.argv(more=("--resume", _pickled_checkpoint(k))),
     ["--resume", "pickled.pth", "weights_only=True"]),
    ("resume-not-a-checkpoint", lambda k: k.argv(more=("--resume", k.samples("notes.pth", "not a checkpoint\n"))),
     ["--resume", "notes.pth"]),
    ("resume-a-folder", lambda k: k.argv(more=("--resume", _mkdir(k.tmp / "epoch_4.pth"))),
     ["--resume", "epoch_4.pth", "(it is a folder)"]),
    ("resume-deepspeed-folder-without-weights", lambda k: k.argv(more=("--resume", _deepspeed_folder(k))),
     ["--resume", "mp_rank_00_model_states.pt", "holds no 'module'"]),
    ("resume-fsdp-sharded-checkpoint-of-two-processes-in-one",
     lambda k: k.argv(more=("--resume", _fsdp_local_folder(k))),
     ["--resume", "epoch_6.pth", "state_dict_cfg: local", "of 2 processes", "this run has 1"]),
    ("dump-config-into-missing-folder", lambda k: k.argv(more=("--dump-config", k.tmp / "absent" / "cfg.py")),
     ["--dump-config", "no such folder"]),
    ("dump-config-onto-a-folder", lambda k: k.argv(more=("--dump-config", k.tmp)), ["--dump-config", "is a folder"]),
]


def _mkdir(p: Path) -> Path:
    p.mkdir()
    return p


def _circular(kit: Kit) -> Path:
    kit.samples("a.yaml", "_base_: b.yaml\nname: a\n")
    kit.samples("b.yaml", "_base_: a.yaml\n")
    return kit.tmp / "a.yaml"


def _spoil_index(kit: Kit) -> Path:
    store = kit.store_copy()
    (store / "index.json").write_text('{"format": "vlr-embedding-store", ')
    return store


def _without_shard(kit: Kit) -> Path:
    store = kit.store_copy()
    _shard(store).unlink()
    return store


@pytest.mark.parametrize("case, argv, where", CASES, ids=[c[0] for c in CASES])
def test_vlr_train_refuses(case, argv, where, kit):
    if case == "set-amp-without-a-gpu" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU: mixed precision is allowed")
    assert_refused(argv(kit), *where, leaves=[kit.work])


def test_a_work_dir_that_is_a_file_is_refused_and_kept(kit):
    target = _not_a_dir(kit)
    assert_refused(kit.argv(), "--work-dir", "is a file")
    assert target.read_text() == "a file where the work dir goes\n"


def test_a_failure_in_an_existing_work_dir_leaves_only_what_was_there(kit):
    kit.work.mkdir()
    (kit.work / "notes.txt").write_text("mine\n")
    assert_refused(kit.argv(train=kit.samples("bad.jsonl", _record_with(kit, 2, caption=7))), "line 3")
    assert sorted(p.name for p in kit.work.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("argv, where", [
    (["list", "lossess"], ["kind", "invalid choice: 'lossess'"]),
    (["train"], ["recipe"]),
    (["train", "paragraph/c5", "--launcher", "ssh"], ["--launcher", "invalid choice"]),
])
def test_argparse_refusals_name_the_argument(argv, where):
    assert_refused(argv, *where)


@pytest.mark.parametrize("args, where", [
    (["--epochs", "0"], ["--epochs", "expected an integer >= 1, found 0"]),
    (["--epochs", "two"], ["--epochs", "expected an integer, found 'two'"]),
    (["--seed", "-1"], ["--seed", "expected an integer >= 0"]),
    (["--recipes", "open_clip/long_clip"], ["--recipes", "open_clip/long_clip", "'open_clip'"]),
    (["--recipes", "paragraph/c99"], ["--recipes", "paragraph/c99", "no shipped recipe"]),
    (["--world-only"], ["--world-only", "vlr demo mvc --world-only"]),
    (["mvc", "--world-only", "--epochs", "2"], ["--epochs", "--world-only trains nothing"]),
])
def test_vlr_demo_refuses(args, where, tmp_path):
    assert_refused(["demo", "--quick", "--out", tmp_path / "demo", *args], *where, leaves=[tmp_path / "demo"])


def test_vlr_demo_refuses_an_output_that_is_a_file(tmp_path):
    (tmp_path / "demo").write_text("mine\n")
    assert_refused(["demo", "--quick", "--out", tmp_path / "demo"], "--out", "is a file")
    assert (tmp_path / "demo").read_text() == "mine\n"


@pytest.mark.parametrize("how", ["named", "auto"])
def test_resume_with_another_number_of_epochs_is_refused(how, kit):
    # MMEngine would restore the checkpoint's schedule, built for 7 epochs, into a run of another length
    kit.work.mkdir()
    ckpt = kit.work / "epoch_3.pth"
    torch.save({"state_dict": {}, "meta": {"epoch": 3, "vlr_schedule": {"max_epochs": 7}}}, ckpt)
    (kit.work / "last_checkpoint").write_text(str(ckpt))
    more = ("--resume", ckpt) if how == "named" else ("--resume",)
    assert_refused(kit.argv(more=more), "--resume", "epoch_3.pth", "7 epochs", "asks for 1",  # kit: 1 epoch
                   "--set train.epochs=7")
    assert sorted(p.name for p in kit.work.iterdir()) == ["epoch_3.pth", "last_checkpoint"]


def test_resume_auto_from_a_damaged_latest_checkpoint_is_refused(kit):
    kit.work.mkdir()
    (kit.work / "epoch_2.pth").write_bytes(b"half a checkpoint")
    (kit.work / "last_checkpoint").write_text(str(kit.work / "epoch_2.pth"))
    assert_refused(kit.argv(more=("--resume",)), "--resume", "last_checkpoint", "epoch_2.pth")
    assert sorted(p.name for p in kit.work.iterdir()) == ["epoch_2.pth", "last_checkpoint"]


@pytest.mark.parametrize("name, command", [
    ("generate/paragraph", "vlr generate paragraph"),
    ("generate/mvc", "vlr generate mvc"),
    ("lavis/c5", "vlr lavis-train --cfg-path lavis/c5"),
])
def test_train_on_a_file_another_command_runs_names_that_command(name, command, capsys):
    from vlr_plugins.cli import main

    assert main(["train", name]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: recipe: {name} is a ") and f"`{command} " in err
