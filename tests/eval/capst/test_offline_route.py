"""docs/capst.md's "Trying it on a CPU, offline" runs as written: its captions and
``metadata.json`` are saved and its ``capst-offline`` block runs verbatim in a fresh folder,
offline (HF_HUB_OFFLINE=1): the tiny random LM is written, ``transformers serve`` serves it,
and ``vlr capst`` uses it as the judge. At this size no answer is the JSON asked for: every
extraction is asked, re-asked once, and fails, so every video failed: exit 2, no report, the
answers kept in the cache; every call reached the server."""

from __future__ import annotations

from pathlib import Path

import pytest
from _doc_route import route_blocks, run_served_route, served_chat_calls

pytest.importorskip("transformers")

DOC = Path(__file__).resolve().parents[3] / "docs" / "capst.md"
PORT = 8012


def test_the_capst_route_runs_verbatim_against_a_local_server(tmp_path):
    files, route = route_blocks(DOC, "capst-offline")
    assert set(files) == {"captions.jsonl", "metadata.json"}
    for step in ("python -m vlr_plugins.mllm.tiny --text-only tiny-lm",
                 f"transformers serve tiny-lm --device cpu --host 127.0.0.1 --port {PORT}",
                 f"--judge-url http://127.0.0.1:{PORT}/v1", "--max-tokens 24 --reasks 1"):
        assert step in route, step
    work, out, shown = run_served_route(DOC, "capst-offline", PORT, tmp_path)
    assert [line for line in out.stdout.splitlines() if line.startswith("exit status")] == ["exit status 2"], shown
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, shown
    assert errors[0].startswith("error: all 2 videos failed, none was scored (the first: video 'v0', extracting "
                                "events from the prediction: malformed answer after 2 tries: "), shown
    assert errors[0].endswith("no report was written; the answers received are kept in "
                              "capst-tiny/llm-cache.sqlite"), shown
    # nothing but the cache: no capst.* report of a run that scored nothing
    assert sorted(p.name for p in (work / "capst-tiny").iterdir()) == ["llm-cache.sqlite"]
    # the reference elements are listed, so only the predictions' events and objects were asked
    # for: 2 videos x 2 extractions x (1 + 1 re-ask), every one answered by the server
    assert served_chat_calls(work / "server.log") == 2 * 2 * 2, shown
