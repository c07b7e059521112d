"""Main environment: a LAVIS-trained text side, converted by `vlr lavis-export` in the LAVIS
environment, exported by `vlr export` and loaded with AutoModel under transformers 5.

CI sets VLR_LAVIS_ARTIFACTS for both suites (the LAVIS suite writes the checkpoint and the
LAVIS model's own embeddings there); elsewhere this test skips.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

ART = os.environ.get("VLR_LAVIS_ARTIFACTS")


@pytest.mark.skipif(importlib.util.find_spec("lavis") is not None,
                    reason="runs in the main environment (transformers 5), not LAVIS'")
@pytest.mark.skipif(not ART or not (Path(ART) / "c5-text-expected.pt").is_file(),
                    reason="needs the LAVIS suite's export (VLR_LAVIS_ARTIFACTS, set by .ci/run)")
def test_lavis_trained_text_encoder_exports_and_loads_with_automodel(tmp_path):
    pytest.importorskip("transformers")
    from transformers import AutoModel, AutoTokenizer

    from vlr_plugins.cli import main

    ckpt = Path(ART) / "c5-text.pth"
    assert main(["export", str(ckpt), str(tmp_path / "hub")]) == 0
    ref = torch.load(Path(ART) / "c5-text-expected.pt", weights_only=True)
    model = AutoModel.from_pretrained(tmp_path / "hub", trust_remote_code=True).eval()
    tok = AutoTokenizer.from_pretrained(tmp_path / "hub")
    batch = tok(ref["texts"], truncation=True, max_length=128, padding=True, return_tensors="pt")
    with torch.no_grad():
        got = model.get_text_features(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    torch.testing.assert_close(got, ref["embeddings"], atol=1e-5, rtol=1e-5)
    assert "C5" in (tmp_path / "hub" / "README.md").read_text()
