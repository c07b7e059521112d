"""The gather helper, on one process and across two real gloo processes."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from _gloo import run_on_ranks

from vlr_plugins.losses import multi_positive_infonce
from vlr_plugins.losses._gather import (
    gather_owners,
    gather_rows_at,
    gather_rows_with_grad,
    gather_sizes,
    should_gather,
)

WORLD_SIZE = 2
# (variant, hard_negative_scope, gather): gather=None must detect the 2-process group
CASES = [
    ("mean_log", "batch", True),
    ("log_sum", "own", True),
    ("mean_log", "own", None),
]


def _key(variant: str, scope: str, gather: bool | None) -> str:
    return f"{variant}/{scope}/{gather}"


def test_single_process_is_a_no_op():
    assert not dist.is_initialized()
    assert should_gather(None) is False
    assert should_gather(True) is True and should_gather(False) is False
    x = torch.randn(3, 4, requires_grad=True)
    assert gather_rows_with_grad(x) is x
    owner, offsets = gather_owners(torch.tensor([0, 0, 1]), num_local_items=2)
    assert owner.tolist() == [0, 0, 1] and offsets.tolist() == [0]
    assert gather_sizes(3) == [3]
    torch.testing.assert_close(gather_rows_at(x, torch.tensor([2, 0, 2])), x[[2, 0, 2]])


def _make_ranks() -> list[dict[str, torch.Tensor]]:
    """Different numbers of images, captions and negatives on each rank."""
    g = torch.Generator().manual_seed(0)

    def rows(n: int) -> torch.Tensor:
        return torch.randn(n, 6, generator=g, dtype=torch.float64)

    return [
        dict(image=rows(3), text=rows(5), text_owner=torch.tensor([0, 0, 1, 2, 2]),
             neg=rows(4), neg_owner=torch.tensor([0, 1, 1, 2])),
        # image 0 of rank 1 has no negative of its own
        dict(image=rows(2), text=rows(4), text_owner=torch.tensor([0, 1, 1, 1]),
             neg=rows(2), neg_owner=torch.tensor([1, 1])),
    ]


def _loss_and_grads(local: dict[str, torch.Tensor], variant: str, scope: str,
                    gather: bool | None) -> dict[str, torch.Tensor]:
    leaves = {k: local[k].clone().requires_grad_() for k in ("image", "text", "neg")}
    temperature = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    loss = multi_positive_infonce(
        leaves["image"], leaves["text"], local["text_owner"], temperature=temperature,
        neg_emb=leaves["neg"], neg_owner=local["neg_owner"], variant=variant,
        hard_negative_scope=scope, gather=gather,
    )
    loss.backward()
    return {"loss": loss.detach(), "temperature": temperature.grad,
            **{k: v.grad for k, v in leaves.items()}}


def _rank_results(rank: int) -> dict:
    local = _make_ranks()[rank]
    results = {_key(*case): _loss_and_grads(local, *case) for case in CASES}
    results["local_only"] = _loss_and_grads(local, "mean_log", "batch", False)
    owner, offsets = gather_owners(local["text_owner"], local["image"].shape[0])
    results["gathered"] = {"owner": owner, "offsets": offsets,
                           "text": gather_rows_with_grad(local["text"]).detach()}
    return results


@pytest.mark.timeout(120)
def test_two_processes_match_the_concatenated_batch(tmp_path):
    results = run_on_ranks(_rank_results, WORLD_SIZE, tmp_path)
    ranks = _make_ranks()

    # the global batch: rank 1's owners shift by the 3 images of rank 0
    image_offsets = [0, ranks[0]["image"].shape[0]]
    full = {k: torch.cat([r[k] for r in ranks]) for k in ("image", "text", "neg")}
    for k in ("text_owner", "neg_owner"):
        full[k] = torch.cat([r[k] + off for r, off in zip(ranks, image_offsets)])
    for r, result in enumerate(results):
        assert result["gathered"]["owner"].tolist() == full["text_owner"].tolist()
        assert result["gathered"]["offsets"].tolist() == image_offsets
        torch.testing.assert_close(result["gathered"]["text"], full["text"])

    for case in CASES:
        single = _loss_and_grads(full, *case)
        for r, result in enumerate(results):
            got = result[_key(*case)]
            torch.testing.assert_close(got["loss"], single["loss"])
            # Every rank computes the same full loss from the gathered rows, and
            # all_gather's backward sums the gradient arriving at rank r's rows from
            # all WORLD_SIZE copies of that loss; so the local gradient is WORLD_SIZE
            # times the single-process one (DDP's averaging over ranks undoes it).
            for k in ("image", "text", "neg"):
                rows = slice(sum(len(x[k]) for x in ranks[:r]),
                             sum(len(x[k]) for x in ranks[: r + 1]))
                torch.testing.assert_close(got[k], WORLD_SIZE * single[k][rows])
            # the temperature is not gathered: each rank's copy sees one full loss
            torch.testing.assert_close(got["temperature"], single["temperature"])

    # gather=False stays local even inside a process group
    for r, result in enumerate(results):
        alone = _loss_and_grads(ranks[r], "mean_log", "batch", False)
        torch.testing.assert_close(result["local_only"]["loss"], alone["loss"])
        torch.testing.assert_close(result["local_only"]["image"], alone["image"])


def _rows_at_ranks() -> list[dict[str, torch.Tensor]]:
    """Rank 0 holds 3 rows, rank 1 holds 2; each asks for global rows, with repeats; rank 1
    asks nothing of itself, and a weight per fetched row makes a loss."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 2, 3, generator=g, dtype=torch.float64)
    return [
        dict(x=x[:3], index=torch.tensor([4, 0, 4, 2, 3]), weight=torch.randn(5, 2, 3, generator=g,
                                                                               dtype=torch.float64)),
        dict(x=x[3:], index=torch.tensor([1, 1]), weight=torch.randn(2, 2, 3, generator=g,
                                                                      dtype=torch.float64)),
    ]


def _rows_at_results(rank: int) -> dict[str, torch.Tensor]:
    local = _rows_at_ranks()[rank]
    x = local["x"].clone().requires_grad_()
    rows = gather_rows_at(x, local["index"])
    (rows * local["weight"]).sum().backward()
    empty = gather_rows_at(local["x"], torch.zeros(0, dtype=torch.long))  # asking for nothing
    return {"rows": rows.detach(), "grad": x.grad, "sizes": torch.tensor(gather_sizes(len(x))),
            "empty": torch.tensor(empty.shape)}


@pytest.mark.timeout(120)
def test_rows_at_fetches_only_the_asked_rows_with_their_gradient(tmp_path):
    results = run_on_ranks(_rows_at_results, WORLD_SIZE, tmp_path)
    ranks = _rows_at_ranks()
    full = torch.cat([r["x"] for r in ranks])
    # the gradient of sum_r <weight_r, full[index_r]>: each asked row gets its weights, summed
    grad = torch.zeros_like(full)
    for r in ranks:
        grad.index_add_(0, r["index"], r["weight"])
    for r, result in enumerate(results):
        torch.testing.assert_close(result["rows"], full[ranks[r]["index"]])
        torch.testing.assert_close(result["grad"], grad[[0, 1, 2]] if r == 0 else grad[[3, 4]])
        assert result["sizes"].tolist() == [3, 2]
        assert result["empty"].tolist() == [0, 2, 3]
