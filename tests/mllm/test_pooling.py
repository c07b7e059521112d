"""last_token_pool: each row's state at its last real token, whatever the padding side."""

from __future__ import annotations

import pytest
import torch

from vlr_plugins.mllm import last_token_pool


def reference(hidden, mask):
    rows = []
    for h, m in zip(hidden, mask):
        last = max(i for i, v in enumerate(m.tolist()) if v)
        rows.append(h[last])
    return torch.stack(rows)


@pytest.mark.parametrize("side", ["left", "right", "none"])
def test_last_token_pool_reads_the_last_real_token(side):
    hidden = torch.randn(3, 6, 4, generator=torch.Generator().manual_seed(0))
    lengths = [6, 6, 6] if side == "none" else [6, 2, 4]
    mask = torch.zeros(3, 6, dtype=torch.long)
    for i, n in enumerate(lengths):
        if side == "right":
            mask[i, :n] = 1
        else:
            mask[i, 6 - n:] = 1
    torch.testing.assert_close(last_token_pool(hidden, mask), reference(hidden, mask))


def test_last_token_pool_refuses_empty_rows_and_bad_shapes():
    with pytest.raises(ValueError, match=r"rows \[1\] have no token"):
        last_token_pool(torch.randn(2, 3, 4), torch.tensor([[1, 1, 1], [0, 0, 0]]))
    with pytest.raises(ValueError, match=r"expected hidden \(B, L, D\) and attention_mask \(B, L\)"):
        last_token_pool(torch.randn(2, 3, 4), torch.ones(2, 4))
