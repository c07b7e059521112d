"""VTC and VTM (alone and inside VideoTextPretrainingLoss) on two real gloo processes equal
one process on the concatenated batch, with the same seeded negative draws."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _gloo import run_on_ranks
from _video_text_model import TinyVideoTextModel, video_text_batch

from vlr_plugins.losses import (
    VideoTextPretrainingLoss,
    sample_hard_negatives,
    video_text_contrastive,
    video_text_matching,
)

WORLD_SIZE = 2
VIEWS = ("summary", "detailed")
LEAVES = ("video_emb", "text_emb", "video_tokens", "text_hidden")


def _make_ranks() -> list[dict[str, torch.Tensor]]:
    """Different numbers of videos and captions, and different caption lengths, per rank."""
    ranks = [
        video_text_batch(3, [4, 7, 3, 8, 5, 6], [0, 0, 1, 1, 2, 2], seed=1),
        video_text_batch(2, [5, 11, 4, 9], [0, 0, 1, 1], seed=2),
    ]
    for batch in ranks:
        batch["text_view"] = torch.arange(len(batch["text_owner"])) % 2
    return ranks


def _concatenated() -> dict[str, torch.Tensor]:
    """The global batch: rank 0's rows then rank 1's, captions padded to the longest, owners
    shifted by rank 0's videos."""
    ranks = _make_ranks()
    longest = max(r["input_ids"].shape[1] for r in ranks)

    def pad(x: torch.Tensor) -> torch.Tensor:
        extra = longest - x.shape[1]
        return F.pad(x, (0, 0, 0, extra)) if x.ndim == 3 else F.pad(x, (0, extra))

    full = {k: torch.cat([r[k] for r in ranks]) for k in ("video_emb", "text_emb", "video_tokens",
                                                          "text_view")}
    for k in ("text_hidden", "input_ids", "attention_mask"):
        full[k] = torch.cat([pad(r[k]) for r in ranks])
    shift = ranks[0]["video_emb"].shape[0]
    full["text_owner"] = torch.cat([ranks[0]["text_owner"], ranks[1]["text_owner"] + shift])
    return full


def _run(batch: dict[str, torch.Tensor], gather: bool | None) -> dict:
    """VTC and VTM as functions, then the combined loss (MLM off: it is per rank)."""
    model = TinyVideoTextModel(seed=0)
    leaves = {k: batch[k].clone().requires_grad_() for k in LEAVES}
    vtc = video_text_contrastive(leaves["video_emb"], leaves["text_emb"], batch["text_owner"],
                                 batch["text_view"], views=VIEWS, temperature=0.1, gather=gather)
    # all captions at once: two per video, so "same video" is the owner
    vtm = video_text_matching(
        model, leaves["video_emb"], leaves["text_emb"], batch["text_owner"],
        leaves["video_tokens"], leaves["text_hidden"], batch["attention_mask"], temperature=0.1,
        generator=torch.Generator().manual_seed(7), gather=gather)
    (vtc + vtm).backward()
    functions = {"vtc": vtc.detach(), "vtm": vtm.detach(),
                 "grads": {k: v.grad for k, v in leaves.items()},
                 "params": {n: p.grad for n, p in model.named_parameters()}}

    model = TinyVideoTextModel(seed=0)
    leaves = {k: batch[k].clone().requires_grad_() for k in LEAVES}
    loss_fn = VideoTextPretrainingLoss(vocab_size=40, mask_id=3, special_ids=[0, 1, 2],
                                       mlm_weight=0.0, gather=gather)
    out = loss_fn(model, leaves["video_emb"], leaves["text_emb"], batch["text_owner"],
                  batch["text_view"], video_tokens=leaves["video_tokens"],
                  text_hidden=leaves["text_hidden"], input_ids=batch["input_ids"],
                  attention_mask=batch["attention_mask"],
                  generator=torch.Generator().manual_seed(5))
    out["loss"].backward()
    combined = {"values": {k: v.detach() for k, v in out.items()},
                "grads": {k: v.grad for k, v in leaves.items()},
                "params": {n: p.grad for n, p in model.named_parameters()},
                "temperature": loss_fn.temperature.grad}
    return {"functions": functions, "combined": combined}


def _rank_results(rank: int) -> dict:
    return _run(_make_ranks()[rank], gather=None)  # None: must detect the 2-process group


@pytest.mark.timeout(180)
def test_two_processes_equal_one_process(tmp_path):
    results = run_on_ranks(_rank_results, WORLD_SIZE, tmp_path)
    single = _run(_concatenated(), gather=False)
    ranks = _make_ranks()

    def rows(k: str, r: int) -> slice:
        start = sum(x[k].shape[0] for x in ranks[:r])
        return slice(start, start + ranks[r][k].shape[0])

    for part in ("functions", "combined"):
        one = single[part]
        for r, result in enumerate(results):
            got = result[part]
            if part == "functions":
                torch.testing.assert_close(got["vtc"], one["vtc"])
                torch.testing.assert_close(got["vtm"], one["vtm"])
            else:
                for k, v in one["values"].items():
                    torch.testing.assert_close(got["values"][k], v, msg=f"{k} on rank {r}")
                # the temperature is not gathered: each rank's copy sees one global loss
                torch.testing.assert_close(got["temperature"], one["temperature"])
            # as for every gathered loss, a rank's rows get world_size times their gradient
            for k in LEAVES:
                single_rows = one["grads"][k][rows(k, r)][:, : ranks[r][k].shape[1]] \
                    if k == "text_hidden" else one["grads"][k][rows(k, r)]
                torch.testing.assert_close(got["grads"][k], WORLD_SIZE * single_rows,
                                           msg=f"{part}: gradient of {k} on rank {r}")
        # DDP averages the model's gradients over ranks: that is the one-process gradient
        for name, grad in one["params"].items():
            if grad is None:  # not used by VTC / VTM (the MLM head, the view CLS)
                assert all(result[part]["params"][name] is None for result in results)
                continue
            mean = sum(result[part]["params"][name] for result in results) / WORLD_SIZE
            torch.testing.assert_close(mean, grad, msg=f"{part}: gradient of {name}")
    assert single["functions"]["vtm"] > 0 and single["combined"]["values"]["vtm_detailed"] > 0

    # the draws the ranks matched do cross ranks: negatives come from the global batch
    full = _concatenated()
    sim = F.normalize(full["text_emb"], dim=-1) @ F.normalize(full["video_emb"], dim=-1).T / 0.1
    videos, texts = sample_hard_negatives(sim, full["text_owner"],
                                          generator=torch.Generator().manual_seed(7))
    rank_of_video = (torch.arange(5) >= 3).long()
    rank_of_text = (torch.arange(10) >= 6).long()
    assert bool((rank_of_video[videos] != rank_of_text).any())
    assert bool((rank_of_text[texts] != rank_of_text).any())
