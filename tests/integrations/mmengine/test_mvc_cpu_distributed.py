"""``vlr train mvc/mvc_b`` under ``torchrun --nproc_per_node 2`` on CPU processes (gloo), on
the tiny MVC world and towers, against one process with the same global batch and seed.

What makes the runs comparable: ``train.batch_size`` (4) is the global batch (2 per rank);
the MVC loader's ``GlobalBatchSampler`` deals one seeded permutation of the 8 clips (a
multiple of the world size) so that each rank takes a contiguous half of every global batch:
gathered rank by rank, global batch ``i`` is one-process batch ``i`` in its order
(``DefaultSampler``'s round-robin dealing gives the same clips in another order, and VTM,
which draws a negative per row, then draws others: 4e-3 apart after 4 steps). A
clip's frames, crop, flip and captions are its own draws (``MVCVideoTextDataset`` seeds
them by seed, epoch and sample in the main process; from the process's global generator
they differ: 5e-3 apart), and VTM's hard negatives are drawn over the gathered batch from a
generator seeded by seed and iteration, the same on every rank
(``VideoTextPretrainingModel(draw_seed=)``; from the global generator 1 and 2 processes
still agree, but a resumed run draws other negatives than the uninterrupted one). So VTC
and VTM with hard negatives are the one-process terms. What cannot agree, by design, is
switched off in the equality runs:

- dropout, stochastic depth and the tower's token dropping (masks drawn per rank, over
  that rank's rows);
- MLM (``loss.mlm_weight: 0``): each rank masks its own captions (drawn over its own
  ``(N / 2, L)`` block, ``L`` its longest caption), so no draw of two ranks is the draw of
  one process over the whole batch. Its head then gets no gradient, which DDP is told
  (``find_unused_parameters``, set by the MVC config for any term switched off).

A separate two-process run with all of them on (MLM, dropout, token dropping, hard
negatives) only has to complete.

Tolerances: the final weights agree within 1e-5 everywhere but on the parameters whose true
gradient is zero (the attention key biases: softmax is invariant to a constant added to
every score), where float noise in the gradient becomes AdamW steps of order lr (seen: 4e-4
on the key third of the tower's fused ``qkv.bias``, 2e-6 on BERT's ``key.bias``); those are
compared through what they feed: the embeddings of both towers on a fixed clip and two
captions, within 1e-5. Per step, the logged losses (total and every term) agree within
1e-5. What the tolerances cover: the order of float additions (each rank's half of a batch
through the towers, the backward pass of each half, DDP's averaged gradients) over four
AdamW steps; not another batch, clip, caption or negative, which move the weights by
about 1e-3 (the numbers above).

The resume case: a two-process run dies at its epoch-2 checkpoint (a folder stands where
rank 0 would write it; torchrun stops both ranks), and ``--resume`` under torchrun
continues from epoch 1's checkpoint to where the uninterrupted two-process run ends.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _mvc_world import EMBED_DIM, mvc_world

pytest.importorskip("mmengine")
pytest.importorskip("av")

from _torchrun import load_checkpoint, logged_rows, require_torchrun, run_vlr_processes  # noqa: E402

require_torchrun()

TOL = 1e-5
EPOCHS, SAMPLES, BATCH = 2, 8, 4


def _sets(world: dict[str, str], *, deterministic: bool = True, epochs: int = EPOCHS) -> list[str]:
    """``mvc/mvc_b`` shrunk to the tiny world; ``deterministic``: no dropout, no stochastic
    depth, no token dropping, no MLM (what is drawn per rank)."""
    drop = 0.0 if deterministic else 0.1
    bert = (f"{{vocab_size: {world['vocab']}, hidden_size: 32, num_hidden_layers: 2, num_attention_heads: 2, "
            f"intermediate_size: 64, max_position_embeddings: 96, hidden_dropout_prob: {drop}, "
            f"attention_probs_dropout_prob: {drop}}}")
    return [
        f"model={{type: DualCLSTextEncoder, pretrained: null, config: {bert}, num_fusion_layers: 1, "
        f"embed_dim: {EMBED_DIM}, dual_cls: true, max_tokens: 64, tokenizer: {world['tokenizer']}}}",
        "video.encoder={type: SpaceTimeViT, patch_size: 16, tubelet_size: 2, width: 32, depth: 2, num_heads: 2, "
        f"pool_norm: true, embed_dim: {EMBED_DIM}, token_drop_ratio: {drop}, drop_path_rate: {drop}}}",
        "video.checkpoint=null", "video.frames=4", "video.image_size=32",
        "text_views.positives=[{name: summary, field: [O, S1, S2], take: random, count: 1, max_tokens: 64}, "
        "{name: detailed, field: [D1*, D2*, P1, P2], take: random, count: 1, max_tokens: 64}]",
        f"train.batch_size={BATCH}", f"train.epochs={epochs}", "train.num_workers=0", "train.log_interval=1",
        "train.lr=0.001", "loss.hard_negatives=true", f"loss.mlm_weight={0.0 if deterministic else 1.0}",
    ]


def _train(world: dict[str, str], work: Path, *, processes: int, resume: bool = False, fails: bool = False,
           deterministic: bool = True, epochs: int = EPOCHS) -> str:
    """``vlr train mvc/mvc_b`` into ``work`` in a fresh interpreter with no GPU visible, under
    ``torchrun --standalone`` (a local rendezvous on a free port) for several processes."""
    args = ["train", "mvc/mvc_b", "--train", world["train"], "--work-dir", str(work), *(["--resume"] if resume else []),
            "--set", *_sets(world, deterministic=deterministic, epochs=epochs)]
    return run_vlr_processes(args, processes, fails=fails, stderr=True)


_checkpoint, _rows = load_checkpoint, logged_rows


TERMS = ("loss", "vtc", "vtm", "vtc_summary", "vtc_detailed", "vtm_summary", "vtm_detailed")


def _losses(where: Path) -> list[list[float]]:
    return [[row[t] for t in TERMS] for row in _rows(where)]


def _without_key_biases(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` less the attention key biases (zero true gradient): BERT's ``key.bias``
    dropped, the middle third (the key's) of the video tower's fused ``qkv.bias`` cut out."""
    out = {}
    for name, value in state.items():
        if name.endswith(".key.bias"):
            continue
        if name.endswith(".attn.qkv.bias"):
            q, _, v = value.chunk(3)
            value = torch.cat([q, v])
        out[name] = value
    return out


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def _embeddings(checkpoint: Path, world: dict[str, str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Both towers' embeddings of fixed inputs (a seeded clip, the world's first captions)
    under ``checkpoint``'s weights, in eval mode."""
    from mmengine.config import Config

    from vlr_plugins.integrations.mmengine.registry import MODELS

    (dumped,) = checkpoint.parent.glob("*.py")  # the config the Runner wrote
    cfg = Config.fromfile(str(dumped))
    model = MODELS.build(cfg.model)
    model.load_state_dict(_checkpoint(checkpoint)["state_dict"])
    model.eval()
    tokenizer = model.text_encoder.load_tokenizer()
    batch = tokenizer(["a red ball rolls left", "two squares meet in the middle"], padding=True,
                      return_tensors="pt")
    frames = torch.randn(2, 4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        video, text = model(frames, batch["input_ids"], batch["attention_mask"], torch.tensor([0, 1]),
                            torch.tensor([0, 1]), mode="tensor")
    return video, text


@pytest.fixture(scope="module")
def world():
    return mvc_world()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, world):
    tmp = tmp_path_factory.mktemp("mvc-ddp")
    one, two = tmp / "one", tmp / "two"
    _train(world, one, processes=1)
    stdout = _train(world, two, processes=2)
    return {"tmp": tmp, "one": one, "two": two, "stdout": stdout}


def test_two_processes_end_where_one_process_ends(runs, world):
    one, two = runs["one"], runs["two"]
    final_one, final_two = (_checkpoint(w / "epoch_2.pth")["state_dict"] for w in (one, two))
    compared = _without_key_biases(final_one)
    assert any(k.endswith(".key.bias") for k in final_one) and any(k.endswith(".attn.qkv.bias") for k in compared)
    # training moved the weights far beyond the tolerance, so equality is not trivial
    assert _max_diff(_without_key_biases(_checkpoint(one / "epoch_1.pth")["state_dict"]), compared) > 100 * TOL
    assert _max_diff(compared, _without_key_biases(final_two)) < TOL
    # the key biases, through the embeddings they feed (a fixed clip and two captions)
    for a, b in zip(_embeddings(one / "epoch_2.pth", world), _embeddings(two / "epoch_2.pth", world)):
        assert (a - b).abs().max().item() < TOL
    # the same global batch, clips, captions and hard negatives at every step: the same terms
    l1, l2 = _losses(one), _losses(two)
    assert len(l1) == len(l2) == EPOCHS * SAMPLES // BATCH
    assert all(r[TERMS.index("vtm")] > 0 for r in l1)  # VTM with hard negatives trained
    for a, b in zip(l1, l2):
        assert a == pytest.approx(b, abs=TOL)


def test_resumed_two_process_run_ends_where_the_uninterrupted_one_does(runs, world):
    # a two-process run that dies at its last checkpoint: rank 0 cannot write epoch_2.pth (a
    # folder is in the way), so torchrun stops every rank with epoch 1's checkpoint the last
    killed = runs["tmp"] / "killed"
    (killed / "epoch_2.pth").mkdir(parents=True)
    log = _train(world, killed, processes=2, fails=True)
    assert "IsADirectoryError" in log and "epoch_2.pth" in log
    assert (killed / "last_checkpoint").read_text().strip() == str(killed / "epoch_1.pth")
    (killed / "epoch_2.pth").rmdir()
    _train(world, killed, processes=2, resume=True)
    died, resumed = sorted(killed.glob("*/vis_data/scalars.json"))  # the killed run's log, then the resumed's
    steps = SAMPLES // BATCH
    assert len(_rows(died)) == EPOCHS * steps
    for a, b in zip(_losses(resumed), _losses(runs["two"])[steps:], strict=True):  # epoch 2's steps again
        assert a == pytest.approx(b, abs=TOL)
    final, uninterrupted = _checkpoint(killed / "epoch_2.pth"), _checkpoint(runs["two"] / "epoch_2.pth")
    assert final["meta"]["iter"] == EPOCHS * steps
    assert _max_diff(final["state_dict"], uninterrupted["state_dict"]) < TOL


def test_two_processes_train_with_every_per_rank_draw_on(tmp_path, world):
    """MLM, dropout, stochastic depth and token dropping on (what the equality runs leave out):
    one epoch under torchrun completes, every term logged and finite."""
    work = tmp_path / "full"
    _train(world, work, processes=2, deterministic=False, epochs=1)
    rows = _rows(work)
    assert len(rows) == SAMPLES // BATCH and (work / "epoch_1.pth").exists()
    assert all(r["mlm"] > 0 and r["vtm"] > 0 and torch.isfinite(torch.tensor(r["loss"])) for r in rows)
