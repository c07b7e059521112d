"""The GPU check's summary (benchmarks/gpu_summary.py) and the gpu marker's rule (tests/conftest.py):
a gpu test that skips fails under VLR_REQUIRE_GPU=1, except one whose optional package is missing,
which the summary lists as not run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _summary_module():
    spec = importlib.util.spec_from_file_location("gpu_summary", ROOT / "benchmarks" / "gpu_summary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_pytest(folder: Path, body: str, *, require: bool) -> list[dict]:
    """The JUnit cases of ``body`` run under the project's conftest, with or without VLR_REQUIRE_GPU."""
    folder.mkdir()
    (folder / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"))
    (folder / "test_probe.py").write_text(body)
    junit = folder / "junit.xml"
    env = {"PATH": "/usr/bin:/bin", "VLR_REQUIRE_GPU": "1" if require else "0", "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                    "-o", "markers=gpu\noptional_package", "test_probe.py"],
                   cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    return _summary_module().read_junit(junit)


def test_a_skipped_gpu_test_fails_under_require_gpu_and_skips_without(tmp_path):
    body = "import pytest\n\n@pytest.mark.gpu\ndef test_on_cuda():\n    pytest.skip('no package here')\n"
    free = _run_pytest(tmp_path / "free", body, require=False)
    required = _run_pytest(tmp_path / "required", body, require=True)
    assert [c["outcome"] for c in free] == ["skipped"]
    assert [c["outcome"] for c in required] in (["failed"], ["error"])  # error: skipped at setup (no CUDA)
    assert "may not skip" in required[0]["message"]


def test_a_missing_optional_package_is_listed_as_not_run(tmp_path):
    summary = _summary_module()
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.mllm.test_vllm_backend" name="test_vllm" time="0.01">'
        f'<skipped message="{summary.OPTIONAL_SKIP}: vllm (not run)"/></testcase>'
        '<testcase classname="tests.x" name="test_other" time="0.01">'
        '<skipped message="needs a CUDA device"/></testcase>'
        '<testcase classname="tests.y" name="test_ok" time="0.5"/>'
        '</testsuite></testsuites>')
    outcomes = {c["id"].rsplit("::", 1)[-1]: c["outcome"] for c in summary.read_junit(junit)}
    assert outcomes == {"test_vllm": "not run (optional)", "test_other": "skipped", "test_ok": "passed"}


def test_the_summary_and_the_conftest_agree_on_the_optional_skip_reason():
    spec = importlib.util.spec_from_file_location("vlr_conftest", ROOT / "tests" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert conftest.OPTIONAL_SKIP == _summary_module().OPTIONAL_SKIP


def test_the_eol_embedding_benchmark_gets_its_table(tmp_path):
    """``benchmarks/mllm_embed.py --json`` as the GPU check writes it (here: the tiny config on the
    CPU, two items) becomes a table of the summary's Markdown."""
    import json

    out = tmp_path / "out"
    out.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mllm_embed.py"), "--configs", "tiny", "--sets",
                          "text", "--n", "2", "--repeat", "1", "--threads", "1", "--json", str(out / "mllm_embed.json")],
                         env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = _summary_module()
    s = summary.summarize(out, None, [], 0.0, {})
    (row,) = json.loads((out / "mllm_embed.json").read_text())["results"]
    text = summary.markdown(s)
    assert "## EOL embedding (benchmarks/mllm_embed.py): items/s" in text
    assert f"| tiny | float32 | text | {row['text']['1-by-1_per_s']:.1f} |" in text


def test_the_caption_batch_benchmark_gets_its_table(tmp_path):
    """``benchmarks/caption_batch.py --json`` (here: the tiny config on the CPU, two clips of
    mixed lengths, 4 new tokens) becomes a table of the summary's Markdown, saying whether the
    batched captions were the one-by-one captions (greedy decoding: they must be)."""
    import json

    out = tmp_path / "out"
    out.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "caption_batch.py"), "--configs", "tiny",
                          "--sets", "video-mixed", "--n", "3", "--batch", "2", "--new-tokens", "4", "--repeat", "1",
                          "--threads", "1", "--json", str(out / "caption_batch.json")],
                         env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = _summary_module()
    (row,) = json.loads((out / "caption_batch.json").read_text())["results"]
    assert row["video-mixed"]["equal"] is True
    assert row["video-mixed"]["tokens"][0] < row["video-mixed"]["tokens"][1]  # prompts of several lengths
    text = summary.markdown(summary.summarize(out, None, [], 0.0, {}))
    assert "## vlr caption's generation batches (benchmarks/caption_batch.py): clips/s" in text
    assert (f"| tiny | float32 | video-mixed | 4 | {row['video-mixed']['1-by-1_per_s']:.2f} | "
            f"{row['video-mixed']['chunks_per_s']:.2f} |") in text
    assert text.count("| yes |") == 1


def test_the_precompute_scaling_benchmark_gets_its_table(tmp_path):
    """``benchmarks/scaling.py --parts pipeline --json`` (here: the quick images on the CPU, the
    code the GPU check runs with ``--device cuda``) becomes a row of the summary's Markdown; a
    medium it could not measure is a problem."""
    import json

    out = tmp_path / "out"
    out.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scaling.py"), "--parts", "pipeline", "--media",
                          "images", "--quick", "--workers", "1", "--json", str(out / "scaling.json")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads((out / "scaling.json").read_text())
    forward, command = report["pipeline"]["images"]
    assert report["workers"] == 1 and report["device"] == "cpu"
    summary = _summary_module()
    text = summary.markdown(summary.summarize(out, None, [], 0.0, {}))
    assert "1 decoding workers; goal >= 0.9x)" in text
    assert (f"| images | 32, 8 | {forward['items_per_s']:.1f} | {command['items_per_s']:.1f} | "
            f"{command['items_per_s'] / forward['items_per_s']:.2f} |") in text

    report["not_run"] = {"videos": "PyAV (av) is not installed"}
    (out / "scaling.json").write_text(json.dumps(report))
    s = summary.summarize(out, None, [], 0.0, {})
    assert "benchmark scaling: videos not measured: PyAV (av) is not installed" in s["problems"]
    assert "| videos | not measured: PyAV (av) is not installed |" in summary.markdown(s)
