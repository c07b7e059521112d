"""Caption shards merged without a model: a captioner whose caption names the batch it was made
in (so only the single-process batches give the single-process file), over shard counts that
leave some shards empty, merges into the bytes :func:`caption_videos` writes in one go."""

from __future__ import annotations

import pytest

from vlr_plugins.errors import DataFormatError
from vlr_plugins.mllm.caption_run import caption_videos
from vlr_plugins.mllm.caption_shards import CaptionShardJob, parts_dir_of
from vlr_plugins.mllm.captions_file import CaptionsFile, failures_path_of, settings_path_of

RECORD = {"model": "fake", "prompt": "Describe.", "generation": {"do_sample": False}}


class BatchNamingCaptioner:
    def frames(self, path):
        if "broken" in path:
            raise DataFormatError(path, "cannot be decoded")
        return path

    def caption_clips(self, clips):
        return [f"{c} in a batch of {len(clips)} starting at {clips[0]}" for c in clips]


def _videos(n):
    return [(f"v{i}", f"/videos/{'broken' if i == 4 else 'v'}{i}.mp4") for i in range(n)]


def _files(out):
    return {s: (out.parent / (out.name + s)).read_bytes() if (out.parent / (out.name + s)).exists() else None
            for s in ("", ".settings.json", ".failures.jsonl")}


@pytest.mark.parametrize("n, batch, count", [(7, 2, 2), (7, 3, 3), (5, 2, 4), (3, 1, 3), (9, 4, 2)])
def test_shards_in_any_order_merge_into_the_single_process_file(tmp_path, capsys, n, batch, count):
    single = tmp_path / "one" / "caps.jsonl"
    with CaptionsFile(single, RECORD) as out:
        caption_videos(BatchNamingCaptioner(), _videos(n), out, batch_size=batch, progress=False)
    merged = tmp_path / "many" / "caps.jsonl"
    codes = []
    for index in reversed(range(count)):  # the last to finish merges, whichever it is
        assert not merged.exists()
        job = CaptionShardJob(merged, _videos(n), index, count, batch)
        codes.append(job.run(BatchNamingCaptioner(), RECORD, resume=False, overwrite=False, batch_size=batch,
                             progress=False))
    assert _files(merged) == _files(single)
    assert not parts_dir_of(merged).exists()
    assert "wrote" in capsys.readouterr().out
    assert codes[-1] == (1 if n > 4 else 0)  # the merge reports the broken video as one process does


def test_a_finished_shard_rerun_with_resume_only_merges(tmp_path, capsys):
    out = tmp_path / "caps.jsonl"
    first = CaptionShardJob(out, _videos(4), 0, 2, 1)
    assert first.run(BatchNamingCaptioner(), RECORD, resume=False, overwrite=False, batch_size=1, progress=False) == 0
    part = first.part.read_bytes()

    class Refuses(BatchNamingCaptioner):
        def caption_clips(self, clips):
            raise AssertionError("a finished part is captioned again")

    assert first.run(Refuses(), RECORD, resume=True, overwrite=False, batch_size=1, progress=False) == 0
    assert first.part.read_bytes() == part and "finished already" in capsys.readouterr().out
    CaptionShardJob(out, _videos(4), 1, 2, 1).run(BatchNamingCaptioner(), RECORD, resume=False, overwrite=False,
                                                  batch_size=1, progress=False)
    assert out.read_bytes().count(b"\n") == 4 and settings_path_of(out).is_file()
    assert not failures_path_of(out).exists()
