"""The bad-input catalogue for `vlr lens`: refused before a model is loaded (or naming the
model that cannot be), and no lens.json written."""

from __future__ import annotations

import pytest
from _refusal import assert_refused

CASES = {
    "no-input": (lambda t: [], ["--text/--image/--video"]),
    "no-image-file": (lambda t: ["--image", t / "gone.png"], ["--image", "gone.png"]),
    "no-video-file": (lambda t: ["--video", t / "gone.mp4"], ["--video", "gone.mp4"]),
    "top-k": (lambda t: ["--text", "a", "--top-k", "0"], ["--top-k"]),
    "out-is-a-file": (lambda t: ["--text", "a", "--out", t / "file.txt"], ["--out", "file.txt"]),
    "no-model": (lambda t: ["--text", "a"], ["no-model"]),
    "model-dtype": (lambda t: ["--text", "a", "--model-dtype", "fp16"], ["--model-dtype", "invalid choice: 'fp16'"]),
    "dtype-alias": (lambda t: ["--text", "a", "--dtype", "half"], ["--model-dtype/--dtype", "invalid choice: 'half'"]),
    "two-prompts": (lambda t: ["--text", "a", "--model", f"mllm:{t / 'no-model'}:care", "--prompt", "e5v"],
                    ["--prompt", "'e5v'", "names the prompt 'care'"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lens_refuses_bad_input(tmp_path, case):
    (tmp_path / "file.txt").write_text("x")
    change, where = CASES[case]
    argv = ["lens", "--model", str(tmp_path / "no-model"), "--out", str(tmp_path / "lens"),
            *[str(a) for a in change(tmp_path)]]
    assert_refused(argv, *where, leaves=[tmp_path / "lens" / "lens.json"])
