"""list_videos and benchmark_videos: the videos to encode and their ids."""

from __future__ import annotations

import json

import pytest

from vlr_plugins.errors import DataFormatError, MissingFileError
from vlr_plugins.precompute import VideoItem, benchmark_videos, list_videos


def test_list_videos_from_a_folder_a_txt_and_a_jsonl_list(tmp_path):
    clips = tmp_path / "clips"  # listing reads names, not contents
    for name in ("a.mp4", "b.MKV", "c.webm", "sub/d.avi", "sub/e.mp4", ".hidden.mp4", ".git/f.mp4", "notes.txt"):
        (clips / name).parent.mkdir(parents=True, exist_ok=True)
        (clips / name).write_bytes(b"x")
    (clips / "folder.mp4").mkdir()
    found = list_videos(clips)
    assert [v.id for v in found] == ["a", "b", "c", "sub/d", "sub/e"]
    assert found[3].path == clips / "sub" / "d.avi" and found[3].window is None

    (tmp_path / "list.txt").write_text(f"{clips}/sub/e.mp4\n\n{clips}/a.mp4\n")
    assert [(v.id, v.path) for v in list_videos(tmp_path / "list.txt")] == [  # ids: the paths as written
        (str(clips / "sub" / "e"), clips / "sub" / "e.mp4"), (str(clips / "a"), clips / "a.mp4")]

    (tmp_path / "clips.jsonl").write_text(
        json.dumps({"id": "a#0", "path": str(clips / "a.mp4"), "start": 0, "end": 0.2}) + "\n"
        + json.dumps({"id": 7, "path": "missing.mp4"}) + "\n")
    listed = list_videos(tmp_path / "clips.jsonl")
    assert listed == [VideoItem("a#0", clips / "a.mp4", 0.0, 0.2), VideoItem("7", tmp_path / "missing.mp4")]
    assert listed[0].window == (0.0, 0.2)


@pytest.mark.parametrize("content, where", [
    ('{"id": "a", "path": "a.mp4", "start": -1}\n', "line 1, field 'start': expected seconds"),
    ('{"id": "a", "path": "a.mp4", "start": 2, "end": 1}\n', "line 1, field 'end': expected the end after"),
    ('{"id": "a", "path": "a.mp4"}\n{"id": "a", "path": "b.mp4"}\n', "line 2, field 'id': duplicate video id 'a'"),
])
def test_a_bad_jsonl_list_names_line_and_field(tmp_path, content, where):
    (tmp_path / "list.jsonl").write_text(content)
    with pytest.raises(DataFormatError, match=where):
        list_videos(tmp_path / "list.jsonl")


def test_a_list_none_of_whose_videos_exist_is_refused(tmp_path):
    (tmp_path / "list.txt").write_text("x.mp4\ny.mp4\n")
    with pytest.raises(MissingFileError, match=r"none of the 2 videos listed in .*list.txt exist: .*x.mp4"):
        list_videos(tmp_path / "list.txt")


MSRVTT_CSV = """key,vid_key,video_id,sentence
ret0,msr7579,video7579,a girl is putting a sweater on a dog
ret1,msr7725,video7725,young people sit around the edges of a room clapping
"""
CAREBENCH = [{"video": "v1.mp4", "caption": "a long caption", "spatial_caption": "where", "temporal_caption": "when"},
             {"video": "v2.mp4", "caption": "another caption", "spatial_caption": "there", "temporal_caption": "then"}]


def test_benchmark_videos_takes_each_readers_ids_once_even_before_the_store_exists(tmp_path):
    from vlr_plugins.data.readers import read_carebench, read_msrvtt

    (tmp_path / "msrvtt.csv").write_text(MSRVTT_CSV)
    (tmp_path / "carebench.json").write_text(json.dumps(CAREBENCH))
    for name in ("msrvtt/video7579.mp4", "msrvtt/video7725.mp4", "care/v1.mp4", "care/v2.mp4"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    media = {"msrvtt": str(tmp_path / "msrvtt"), "care": str(tmp_path / "care")}
    (tmp_path / "bench.yaml").write_text(
        "benchmarks:\n"
        f"  - {{name: msrvtt, reader: msrvtt, path: msrvtt.csv, item_embeddings: stores/v, "
        f"args: {{media_root: {media['msrvtt']}}}}}\n"
        f"  - {{name: care, reader: carebench, path: carebench.json, item_embeddings: stores/v, "
        f"args: {{media_root: {media['care']}}}, text_kinds: [spatial, temporal]}}\n")
    found = benchmark_videos(tmp_path / "bench.yaml")
    msrvtt = read_msrvtt(tmp_path / "msrvtt.csv", media_root=media["msrvtt"])
    care = read_carebench(tmp_path / "carebench.json", media_root=media["care"])
    expected = list(zip(msrvtt.item_ids, msrvtt.media_paths())) + list(zip(care.item_ids, care.media_paths()))
    assert [(v.id, str(v.path)) for v in found] == expected  # CaReBench's two text kinds share its videos
    assert not (tmp_path / "stores").exists()
