"""MVC training on mined hard negatives (hard_negative_sampler.py, mvc_config.py): ``vlr mine mvc``
writes the tiny world's corpus with ``hard_negatives``, ``vlr train mvc/mvc_b --set
data.hard_negatives.per_anchor=1`` trains on it, and the batches the loss receives hold each
anchor's mined negative; MMEngine builds the batch sampler from its own ``DefaultSampler``
(its seed, rank, world size and epoch)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _mvc_world import mvc_world, tiny_sets

pytest.importorskip("mmengine")
pytest.importorskip("av")

from _refusal import run_vlr  # noqa: E402
from vlr_plugins.data import HardNegativeBatchSampler, negative_indices, read_mvc_samples  # noqa: E402


@pytest.fixture(scope="module")
def world():
    return mvc_world()


@pytest.fixture(scope="module")
def mined(world, tmp_path_factory) -> Path:
    """The tiny world's corpus with one mined hard-negative video per video, written beside it
    (its relative video paths resolve)."""
    out = Path(world["train"]).parent / "mined.jsonl"
    if not out.exists():
        code, _, stderr = run_vlr(["mine", "mvc", world["train"], "--model", "_bow_model:BagOfWords",
                                   "--out", out, "-k", "2"])
        assert code == 0, stderr
    return out


def _loss_batches(monkeypatch) -> list[list[str]]:
    """The sample ids of every batch the model's loss is computed on, in order."""
    from vlr_plugins.integrations.mmengine.mvc_model import VideoTextPretrainingModel

    seen: list[list[str]] = []
    forward = VideoTextPretrainingModel.forward

    def recording(self, *args, ids=None, mode="tensor", **kwargs):
        if mode == "loss":
            seen.append(list(ids))
        return forward(self, *args, ids=ids, mode=mode, **kwargs)

    monkeypatch.setattr(VideoTextPretrainingModel, "forward", recording)
    return seen


def test_vlr_train_batches_each_video_with_its_mined_negatives(world, mined, tmp_path, monkeypatch):
    samples = read_mvc_samples(mined)
    negatives = {s.id: s.hard_negatives for s in samples}
    assert all(len(n) == 2 for n in negatives.values())
    seen = _loss_batches(monkeypatch)
    work = tmp_path / "run"
    code, stdout, stderr = run_vlr(["train", "mvc/mvc_b", "--train", mined, "--work-dir", work, "--set",
                                    *tiny_sets(world, epochs=2), "data.hard_negatives.per_anchor=1"])
    assert code == 0, stderr
    assert "on 8 samples (8 with mined hard negatives, up to 1 batched with each anchor)" in stdout
    assert (work / "epoch_2.pth").exists()
    assert len(seen) == 4 and all(len(b) == 4 for b in seen)  # 2 epochs of 8 videos in batches of 4
    epochs = [seen[:2], seen[2:]]
    for batches in epochs:
        assert sorted(i for b in batches for i in b) == sorted(negatives)  # every video once an epoch
        where = {i: n for n, b in enumerate(batches) for i in b}
        for n, batch in enumerate(batches):
            for pos, vid in enumerate(batch):
                companion = any(vid in negatives[other] for other in batch[:pos])
                # a video without its best negatives beside it: a companion, the batch's last, or
                # its negatives all went into an earlier batch
                if not any(where[j] == n for j in negatives[vid]):
                    assert companion or pos == 3 or all(where[j] < n for j in negatives[vid]), (batch, vid)
        # the epoch's first video is an anchor with a free negative: its best one follows it
        assert batches[0][1] == negatives[batches[0][0]][0]
    assert epochs[0] != epochs[1]  # the epoch's order changes
    # what MMEngine fed the loss is the core sampler's plan at the run's seed (train.seed) and epoch
    core = HardNegativeBatchSampler(negative_indices(samples), 4, negatives_per_anchor=1, seed=0)
    for e, batches in enumerate(epochs):
        core.set_epoch(e)
        assert [[samples[i].id for i in b] for b in core] == batches


def test_the_config_batches_with_the_registered_sampler(world, mined, tmp_path):
    from mmengine.config import Config
    from mmengine.runner import Runner

    from vlr_plugins.integrations.mmengine import MinedHardNegativeBatchSampler, recipe_to_mmengine_config
    from vlr_plugins.recipe import Overrides, load_recipe
    from vlr_plugins.recipe.overrides import parse_set_items

    recipe = load_recipe("mvc/mvc_b", [Overrides(parse_set_items(tiny_sets(world)), "--set"),
                                       Overrides({"data": {"train": str(mined), "hard_negatives": {"per_anchor": 1}}})])
    cfg = recipe_to_mmengine_config(recipe, str(tmp_path / "work"), log_level="WARNING")
    loader = cfg["train_dataloader"]
    assert "drop_last" not in loader and loader["batch_sampler"] == dict(
        type="MinedHardNegativeBatchSampler", negatives_per_anchor=1, drop_last=True)
    runner = Runner.from_cfg(Config(cfg))
    batches = runner.train_dataloader.batch_sampler
    assert isinstance(batches, MinedHardNegativeBatchSampler)
    assert batches.sampler is not None and batches.sampler.seed == recipe.train.seed
    assert len(runner.train_dataloader) == 2
    batches.sampler.set_epoch(1)  # what DistSamplerSeedHook does before an epoch
    first = list(batches)
    batches.sampler.set_epoch(0)
    assert list(batches) != first
    ids = [[runner.train_dataloader.dataset.samples[i].id for i in b] for b in first]
    assert sorted(i for b in ids for i in b) == sorted(s.id for s in read_mvc_samples(mined))


class _Corpus:
    """A dataset as the batch sampler reads it: ``samples`` with ids and ``hard_negatives``."""

    def __init__(self, n: int) -> None:
        from vlr_plugins.data import MVCSample

        self.samples = [MVCSample(f"v{i}", f"v{i}.mp4", {"O": f"video {i}"},
                                  hard_negatives=(f"v{(i + 1) % n}", f"v{(i + 5) % n}")) for i in range(n)]

    def __len__(self) -> int:
        return len(self.samples)


def _rank_batches(rank: int) -> dict:
    """On one gloo process: MMEngine's DefaultSampler (its rank and world size from the process
    group, its seed synchronised across ranks: none given) wrapped as the config does."""
    from mmengine.dataset import DefaultSampler

    from vlr_plugins.integrations.mmengine.hard_negative_sampler import MinedHardNegativeBatchSampler

    corpus = _Corpus(21)
    batches = MinedHardNegativeBatchSampler(DefaultSampler(corpus, shuffle=True), 4, negatives_per_anchor=1)
    out = {"len": len(batches), "seed": batches.seed}
    for e in range(2):
        batches.sampler.set_epoch(e)
        out[e] = [[corpus.samples[i].id for i in b] for b in batches]
    return out


def test_two_gloo_processes_get_disjoint_batches_that_hold_the_epoch(tmp_path):
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("no gloo backend")
    from _gloo import run_on_ranks

    ranks = run_on_ranks(_rank_batches, 2, tmp_path)
    assert ranks[0]["seed"] == ranks[1]["seed"] and ranks[0]["len"] == ranks[1]["len"] == 3  # ceil(21 / 8)
    for e in range(2):
        got = [r[e] for r in ranks]
        assert len(got[0]) == len(got[1]) == 3 and all(b for r in got for b in r)
        both = [i for r in got for b in r for i in b]
        assert sorted(both) == sorted(f"v{i}" for i in range(21))  # disjoint and complete
        first = got[0][0]  # the epoch's first anchor, followed by its best negative
        assert first[1] == f"v{(int(first[0][1:]) + 1) % 21}"
    assert ranks[0][0] != ranks[0][1]


def test_a_sampler_that_is_not_a_default_sampler_is_refused():
    from mmengine.dataset import DefaultSampler, InfiniteSampler

    from vlr_plugins.errors import ConfigError
    from vlr_plugins.integrations.mmengine import MinedHardNegativeBatchSampler

    with pytest.raises(ConfigError, match="a sampler without .*epoch.*InfiniteSampler"):
        MinedHardNegativeBatchSampler(InfiniteSampler(_Corpus(8), seed=0), 4)
    with pytest.raises(ConfigError, match="a dataset without samples"):
        MinedHardNegativeBatchSampler(DefaultSampler(list(range(8)), seed=0), 4)


def test_the_schedule_counts_the_steps_the_sampler_gives(world, mined, tmp_path):
    """7 of the 8 videos (data.fraction) over 2 processes of 2 with drop_last: DefaultSampler
    would give each rank ceil(7 / 2) // 2 = 2 batches, the hard-negative batches one whole step
    of 4; the cosine's end is the run's iterations under the latter."""
    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.recipe import Overrides, load_recipe
    from vlr_plugins.recipe.overrides import parse_set_items

    def config(hard_negatives):
        data = {"train": str(mined), "fraction": 0.875}
        if hard_negatives:
            data["hard_negatives"] = hard_negatives
        recipe = load_recipe("mvc/mvc_b", [Overrides(parse_set_items(tiny_sets(world, epochs=3)), "--set"),
                                           Overrides({"data": data})])
        return recipe_to_mmengine_config(recipe, str(tmp_path / "work"), world_size=2)

    plain, batched = config(None), config({"per_anchor": 1})
    assert plain["param_scheduler"][-1]["end"] == 3 * 2
    samples = read_mvc_samples(mined)[:7]
    steps = len(HardNegativeBatchSampler(negative_indices(samples), 2, num_replicas=2, rank=0, drop_last=True))
    assert steps == 1 and batched["param_scheduler"][-1]["end"] == 3 * steps
