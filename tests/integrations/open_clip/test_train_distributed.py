"""``vlr openclip-train`` under ``torchrun --nproc_per_node 2`` on CPU processes (gloo): open_clip_train's
own distributed path, end to end, against one process with the same global batch and seed.

What makes the runs comparable: one process of batch 8 or two of batch 4 (open_clip's
``--batch-size`` is per process), the same ``DistributedSampler`` order in both
(``make_train_loader``: one permutation per epoch from ``--seed``, rank ``r`` taking positions
``r, r + 2, ...``), so global batch ``i`` holds the same 8 samples; the vlr loss gathers both
ranks' features with gradient and DDP averages the gradients, so each step is the one-process
step up to the order of float additions. The tolerance (1e-5 on every weight and on the
embeddings the two models give) covers that order over four AdamW steps; it does not cover the
attention layers' key biases, whose true gradient is zero (a softmax does not change when every
key score moves by the same amount) and whose float noise AdamW turns into steps of up to ``lr``
that differ between any two runs adding in another order: they are compared through what the
models compute instead, which they cannot change.

The resume case: a two-process run dies writing its epoch-2 checkpoint (a folder stands there;
rank 0's save fails and torchrun stops both ranks); ``--resume latest`` under torchrun continues
from epoch 1's checkpoint to where the uninterrupted two-process run ends, bit for bit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("open_clip_train")
from _torchrun import cpu_env, require_torchrun  # noqa: E402

require_torchrun()
TOL = 1e-5
GLOBAL_BATCH = 8


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_config):
    """A tiny random CLIP as an open_clip ``local-dir:`` folder and 16 distinct images with captions."""
    from _tiny_open_clip import write_local_dir_model
    from PIL import Image

    root = tmp_path_factory.mktemp("oc_ddp")
    write_local_dir_model(root / "model", tiny_config)
    (root / "images").mkdir()
    records = []
    for i in range(16):
        Image.new("RGB", (40, 40), (i * 15, 255 - i * 10, (i * 37) % 255)).save(root / "images" / f"{i}.png")
        records.append({"id": f"img{i}", "image": f"images/{i}.png", "caption": f"picture number {i} of a colour"})
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


def _train(world: Path, logs: Path, *, processes: int, resume: bool = False, fails: bool = False) -> str:
    args = ["openclip-train", "--model", f"local-dir:{world / 'model'}", "--train-data", str(world / "train.jsonl"),
            "--vlr-image-root", str(world), "--epochs", "2", "--batch-size", str(GLOBAL_BATCH // processes),
            "--workers", "0", "--device", "cpu", "--logs", str(logs), "--name", "run", "--lr", "1e-3",
            "--warmup", "1", "--precision", "fp32", "--seed", "0", *(["--resume", "latest"] if resume else [])]
    argv = [sys.executable, "-m", "vlr_plugins.cli", *args]
    if processes > 1:
        # "--": torchrun's own parser would take open_clip's --logs for an abbreviation of its --logs-specs
        argv[1:2] = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes), "-m", "--"]
    out = subprocess.run(argv, capture_output=True, text=True, env=cpu_env(), timeout=300)
    assert (out.returncode != 0) == fails, out.stdout[-3000:] + out.stderr[-5000:]
    return out.stdout + out.stderr


def _weights(logs: Path, epoch: int = 2) -> dict[str, torch.Tensor]:
    state = torch.load(logs / "run" / "checkpoints" / f"epoch_{epoch}.pt", map_location="cpu",
                       weights_only=True)["state_dict"]
    return {k.removeprefix("module."): v for k, v in state.items()}


def _outputs(config: dict, weights: dict[str, torch.Tensor]) -> torch.Tensor:
    """The image and text embeddings the model of ``config`` with ``weights`` gives a fixed batch."""
    import open_clip

    model = open_clip.CLIP(**config)
    model.load_state_dict(weights)
    model.eval()
    g = torch.Generator().manual_seed(1)
    images = torch.rand(4, 3, 32, 32, generator=g)
    texts = torch.randint(1, 49407, (4, 77), generator=g)
    with torch.no_grad():
        return torch.cat([model.encode_image(images), model.encode_text(texts)])


def _key_bias(name: str, value: torch.Tensor) -> slice | None:
    """The key part of an attention layer's packed q/k/v bias."""
    if name.endswith("attn.in_proj_bias"):
        width = len(value) // 3
        return slice(width, 2 * width)
    return None


@pytest.fixture(scope="module")
def runs(tmp_path_factory, world):
    tmp = tmp_path_factory.mktemp("oc_runs")
    one, two = tmp / "one", tmp / "two"
    said = _train(world, one, processes=1)
    _train(world, two, processes=2)
    return {"tmp": tmp, "one": one, "two": two, "said": said}


def test_two_processes_end_where_one_process_ends(runs, tiny_config):
    # open_clip_train's logging setup left TorchDynamo's INFO dump of its metrics at every exit
    assert "TorchDynamo" not in runs["said"] and "FakeTensor cache stats" not in runs["said"]
    one, two = _weights(runs["one"]), _weights(runs["two"])
    assert one.keys() == two.keys()
    worst = {}
    for name in one:
        a, b = one[name].double(), two[name].double()
        keys = _key_bias(name, a)
        if keys is not None:
            a, b = torch.cat([a[:keys.start], a[keys.stop:]]), torch.cat([b[:keys.start], b[keys.stop:]])
        worst[name] = (a - b).abs().max().item()
    assert max(worst.values()) <= TOL, sorted(worst.items(), key=lambda kv: -kv[1])[:3]
    # the runs trained: the weights moved well beyond the tolerance
    first = _weights(runs["one"], epoch=1)
    assert max((first[k].double() - one[k].double()).abs().max().item() for k in one) > 100 * TOL
    # and the two models compute the same embeddings (the key biases included)
    torch.testing.assert_close(_outputs(tiny_config, one), _outputs(tiny_config, two), rtol=0, atol=TOL)


def test_resumed_two_process_run_ends_where_the_uninterrupted_one_does(runs, world):
    logs = runs["tmp"] / "killed"
    blocker = logs / "run" / "checkpoints" / "epoch_2.pt"
    blocker.mkdir(parents=True)  # rank 0 cannot write epoch 2's checkpoint: torchrun stops both ranks
    _train(world, logs, processes=2, fails=True)
    assert (logs / "run" / "checkpoints" / "epoch_1.pt").is_file()
    blocker.rmdir()
    out = _train(world, logs, processes=2, resume=True)
    assert "resuming checkpoint" in out and "epoch_1.pt" in out
    resumed, uninterrupted = _weights(logs), _weights(runs["two"])
    assert resumed.keys() == uninterrupted.keys()
    for name in resumed:
        assert torch.equal(resumed[name], uninterrupted[name]), name
