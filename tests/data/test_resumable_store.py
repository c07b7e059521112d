"""The resumable store writer: durable parts, resuming, refusals, and kill -9 at every step of a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from vlr_plugins.data import (
    EmbeddingStore,
    EmbeddingStoreWriter,
    ResumableEmbeddingStoreWriter,
    check_resumable_target,
    read_store_progress,
    work_dir_of,
)
from vlr_plugins.errors import ConfigError, DataFormatError, OutputExistsError

DIM = 4
META = {"encoder": "test", "frames": 16}
IDS = [f"v{i:02d}" for i in range(7)]


def _row(video_id: str) -> torch.Tensor:
    """The embedding every run gives ``video_id`` (a deterministic encoder)."""
    return torch.randn(DIM, generator=torch.Generator().manual_seed(int(video_id[1:])))


def _rows(ids) -> torch.Tensor:
    return torch.stack([_row(i) for i in ids])


def _writer(out, **kwargs) -> ResumableEmbeddingStoreWriter:
    return ResumableEmbeddingStoreWriter(out, DIM, meta=META, **{"flush_rows": 2, **kwargs})


def _parts(work: Path) -> list[list[str]]:
    """The ids of each durable part, read with safetensors itself, in file order."""
    out = []
    for path in sorted(work.glob("embeddings-*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            out.append(json.loads(f.metadata()["ids"]))
    return out


def _check_final(out: Path, ids: list[str], ordered: bool = True) -> None:
    """One row per id, each the encoder's, in that order (``ordered``; else in any), and nothing
    else beside the store."""
    store = EmbeddingStore(out)
    assert store.ids == tuple(ids) if ordered else sorted(store.ids) == sorted(ids)
    torch.testing.assert_close(store.get(ids), _rows(ids), rtol=0, atol=0)
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith("embeddings-")) == ["index.json"]


def test_rows_become_durable_parts_as_they_complete(tmp_path):
    out = tmp_path / "store"
    writer = _writer(out, flush_rows=2)
    writer.add(IDS[:3], _rows(IDS[:3]))
    writer.add(IDS[3:5], _rows(IDS[3:5]))
    work = work_dir_of(out)
    assert work == tmp_path / ".store.partial" and not out.exists()
    assert _parts(work) == [IDS[0:2], IDS[2:4]]  # v04 still pending
    progress = read_store_progress(out)
    assert progress.ids == tuple(IDS[:4]) and (progress.stored, progress.unfinished) == (0, 4)
    assert progress.meta == META and progress.dim == DIM and progress.dtype == "float32"
    writer.close()
    _check_final(out, IDS[:5])


def test_flush_seconds_makes_every_batch_durable(tmp_path):
    writer = _writer(tmp_path / "store", flush_rows=1000, flush_seconds=1e-9)
    writer.add(IDS[:3], _rows(IDS[:3]))
    writer.add(IDS[3:4], _rows(IDS[3:4]))
    assert _parts(work_dir_of(tmp_path / "store")) == [IDS[:3], IDS[3:4]]


def test_an_exception_keeps_the_rows_and_a_resumed_run_adds_only_the_rest(tmp_path):
    out = tmp_path / "store"
    with pytest.raises(RuntimeError, match="decoder crashed"):
        with _writer(out, flush_rows=100) as writer:
            writer.add(IDS[:3], _rows(IDS[:3]))
            raise RuntimeError("decoder crashed")
    assert _parts(work_dir_of(out)) == [IDS[:3]]  # the pending rows were made durable on the way out

    writer = _writer(out, resume=True)
    assert writer.ids == tuple(IDS[:3]) and IDS[0] in writer and IDS[3] not in writer
    with pytest.raises(ValueError, match="duplicate id 'v01'"):
        writer.add([IDS[1]], _rows([IDS[1]]))
    writer.add(IDS[3:], _rows(IDS[3:]))
    writer.close()
    _check_final(out, IDS)


def test_rows_there_need_resume_or_overwrite(tmp_path):
    out = tmp_path / "store"
    writer = _writer(out)
    writer.add(IDS[:2], _rows(IDS[:2]))
    with pytest.raises(OutputExistsError, match=r"an interrupted run left 2 embeddings for .*store in "
                                                r".*\.store\.partial; pass --resume to finish it, or --overwrite"):
        check_resumable_target(out, resume_flag="--resume", overwrite_flag="--overwrite")
    with pytest.raises(OutputExistsError, match="pass resume=True"):
        _writer(out)

    fresh = _writer(out, overwrite=True)  # starts over: the old parts are gone
    assert fresh.ids == () and _parts(work_dir_of(out)) == []
    fresh.add(IDS[:1], _rows(IDS[:1]))
    fresh.close()
    with pytest.raises(OutputExistsError, match="already exists at .*store; pass resume=True to add the ids it lacks"):
        _writer(out)
    with pytest.raises(ValueError, match="exclude each other"):
        _writer(out, resume=True, overwrite=True)


def test_resume_refuses_rows_written_with_other_settings_and_names_each(tmp_path):
    out = tmp_path / "store"
    writer = _writer(out)
    writer.add(IDS[:2], _rows(IDS[:2]))
    writer.close()
    with pytest.raises(ConfigError) as info:
        ResumableEmbeddingStoreWriter(out, DIM + 1, dtype=torch.float16, meta={**META, "frames": 8, "seed": 1},
                                      resume=True)
    message = str(info.value)
    for part in ("its 2 rows", f"dim: {DIM} there, {DIM + 1} now", "dtype: float32 there, float16 now",
                 "frames: 16 there, 8 now", "seed: None there, 1 now", "overwrite=True"):
        assert part in message
    assert EmbeddingStore(out).ids == tuple(IDS[:2])  # untouched


def test_resume_adds_to_a_finished_store_and_replaces_it_only_at_the_end(tmp_path):
    out = tmp_path / "store"
    with EmbeddingStoreWriter(out, DIM, meta=META, shard_size=2) as plain:
        plain.add(IDS[:3], _rows(IDS[:3]))
    writer = _writer(out, resume=True)
    assert writer.ids == tuple(IDS[:3])
    writer.add(IDS[3:], _rows(IDS[3:]))
    assert EmbeddingStore(out).ids == tuple(IDS[:3])  # the finished store stands until close
    writer.close()
    _check_final(out, IDS)


def test_overwrite_replaces_a_finished_store_at_close(tmp_path):
    out = tmp_path / "store"
    with EmbeddingStoreWriter(out, DIM, meta={"encoder": "old"}) as plain:
        plain.add(["x"], torch.zeros(1, DIM))
    writer = _writer(out, overwrite=True)
    writer.add(IDS[:3], _rows(IDS[:3]))
    assert EmbeddingStore(out).ids == ("x",)
    writer.close()
    _check_final(out, IDS[:3])


def test_foreign_files_and_damaged_parts_are_refused_not_deleted(tmp_path):
    out = tmp_path / "store"
    writer = _writer(out)
    writer.add(IDS[:2], _rows(IDS[:2]))
    work = work_dir_of(out)
    (work / "notes.txt").write_text("mine")
    for kwargs in ({"resume": True}, {"overwrite": True}):
        with pytest.raises(OutputExistsError, match=r"\.store\.partial holds notes.txt, which vlr did not write"):
            _writer(out, **kwargs)
    (work / "notes.txt").unlink()
    (work / "embeddings-00000.safetensors").write_bytes(b"garbage")
    with pytest.raises(DataFormatError, match=r"embeddings-00000\.safetensors: cannot read this part"):
        _writer(out, resume=True)
    assert _writer(out, overwrite=True).ids == ()  # starting over needs no readable part


def test_a_work_folder_without_rows_is_started_over(tmp_path):
    out = tmp_path / "store"
    work = work_dir_of(out)
    work.mkdir()
    (work / ".partial.json.tmp").write_text("{")  # killed while writing its settings
    assert read_store_progress(out) is None
    check_resumable_target(out)  # nothing to resume: not refused
    writer = _writer(out)
    writer.add(IDS[:1], _rows(IDS[:1]))
    writer.close()
    _check_final(out, IDS[:1])


def test_what_a_killed_safetensors_write_leaves_is_cleaned_up_not_refused(tmp_path):
    """safetensors writes a part to a temporary file of its own beside it (``.tmp`` and six
    letters or digits, Rust's tempfile) and renames it onto the part's name: a kill between
    the two leaves that file in the work folder."""
    out = tmp_path / "store"
    writer = _writer(out)
    writer.add(IDS[:2], _rows(IDS[:2]))
    work = work_dir_of(out)
    (work / ".tmp4fQz9K").write_bytes(b"half a part")
    (work / ".tmpAB").write_bytes(b"not safetensors'")  # not its name: someone else's
    with pytest.raises(OutputExistsError, match=r"holds \.tmpAB, which vlr did not write"):
        _writer(out, resume=True)
    (work / ".tmpAB").unlink()
    resumed = _writer(out, resume=True)
    assert resumed.ids == tuple(IDS[:2]) and not (work / ".tmp4fQz9K").exists()
    resumed.add(IDS[2:], _rows(IDS[2:]))
    resumed.close()
    _check_final(out, IDS)


# ------------------------------------------------------------------ kill -9 at every step

# One fresh interpreter forks a child per crash point k; the child runs the writer and is
# SIGKILLed just before its k-th file-system call (mkdir, rename, unlink, rmdir),
# then the parent reruns with resume=True, as a user would, into that case's folder.
KILLER = textwrap.dedent(
    """
    import json, os, signal, sys
    import torch
    torch.set_num_threads(1)
    from vlr_plugins.data import EmbeddingStoreWriter, ResumableEmbeddingStoreWriter

    root, scenario = sys.argv[1], sys.argv[2]
    ids = [f"v{i:02d}" for i in range(7)]
    rows = {i: torch.randn(4, generator=torch.Generator().manual_seed(int(i[1:]))) for i in ids}
    meta = {"encoder": "test", "frames": 16}

    def run(mode="resume"):
        with ResumableEmbeddingStoreWriter(out, 4, meta=meta, flush_rows=2, **{mode: True}) as w:
            todo = [i for i in ids if i not in w]
            for a in range(0, len(todo), 3):
                w.add(todo[a:a + 3], torch.stack([rows[i] for i in todo[a:a + 3]]))

    def crash_before(k):
        calls = [0]
        def wrap(fn):
            def inner(*args, **kwargs):
                calls[0] += 1
                if calls[0] == k:
                    os.kill(os.getpid(), signal.SIGKILL)
                return fn(*args, **kwargs)
            return inner
        for name in ("mkdir", "replace", "rename", "unlink", "rmdir"):
            setattr(os, name, wrap(getattr(os, name)))

    k = 0
    while True:
        k += 1
        out = os.path.join(root, f"k{k:03d}", "store")
        os.makedirs(os.path.dirname(out))
        if scenario == "add-to-store":
            with EmbeddingStoreWriter(out, 4, meta=meta, shard_size=2) as w:
                w.add(ids[:3], torch.stack([rows[i] for i in ids[:3]]))
        if scenario == "overwrite":  # an interrupted run's parts, which the killed run discards
            w = ResumableEmbeddingStoreWriter(out, 4, meta=meta, flush_rows=1)
            w.add(ids[4:], torch.stack([rows[i] for i in ids[4:]]))
            w.interrupt()
        pid = os.fork()
        if pid == 0:
            crash_before(k)
            run("overwrite" if scenario == "overwrite" else "resume")
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if not os.WIFSIGNALED(status):
            break  # k is past the last call: the run finished untouched
        run()
    print(json.dumps({"crash_points": k - 1}))
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("scenario", ["fresh", "add-to-store", "overwrite"])
def test_kill_9_at_any_step_then_a_rerun_ends_with_one_row_per_id_and_nothing_left(tmp_path, scenario):
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    root = tmp_path / "cases"
    root.mkdir()
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run([sys.executable, str(script), str(root), scenario], env=env, capture_output=True,
                         text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stderr
    crash_points = json.loads(run.stdout.strip().splitlines()[-1])["crash_points"]
    assert crash_points >= 8  # the work folder, its settings, each part, the index and each rename of the move
    for case in sorted(root.iterdir())[:crash_points]:
        # killed before it discarded the earlier parts, the overwrite leaves them to the resumed run
        _check_final(case / "store", IDS, ordered=scenario != "overwrite")
