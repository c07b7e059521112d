"""`vlr eval` on video benchmarks, end to end: tiny videos and official annotation files (MSR-VTT
1k-A, CaReBench) -> frame-pooled video stores written here -> `vlr eval` (in-process) with an
open_clip model and with a `vlr train` checkpoint -> recall and the papers' tables, each number
equal to a plain full-matrix reference computed here."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("av")
pytest.importorskip("torchvision")
pytest.importorskip("open_clip")
pytest.importorskip("mmengine")

from _reference import reference_ranks  # noqa: E402
from _video_world import (  # noqa: E402
    embed_videos,
    load_tiny_open_clip,
    save_tiny_open_clip,
    write_carebench,
    write_msrvtt,
    write_video_store,
)

from vlr_plugins.cli import main  # noqa: E402
from vlr_plugins.data.readers import read_carebench, read_msrvtt  # noqa: E402
from vlr_plugins.vision import FramePooledVideoEncoder  # noqa: E402


def reference_recall(items: torch.Tensor, texts: torch.Tensor, owner: torch.Tensor) -> dict[str, float]:
    """R@1/5/10 both directions from the full cosine matrix, ranked by (-score, index)."""
    i2t, t2i = reference_ranks(items, texts, owner)
    out = {}
    for direction, ranks in (("i2t", i2t), ("t2i", t2i)):
        for k in (1, 5, 10):
            out[f"{direction}_r{k}"] = 100.0 * sum(r < k for r in ranks) / len(ranks)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("video-world")
    clip_dir = save_tiny_open_clip(root / "tiny-clip")
    model, tokenizer = load_tiny_open_clip(clip_dir)
    encoder = FramePooledVideoEncoder(tower=model).eval()
    msrvtt, msrvtt_videos = write_msrvtt(root)
    care, care_videos = write_carebench(root)
    emb = {
        "msrvtt16": embed_videos(msrvtt_videos, encoder, 16, "middle"),
        "care16": embed_videos(care_videos, encoder, 16, "middle"),
        "care32": embed_videos(care_videos, encoder, 32, "uniform"),
    }
    stores = {name: write_video_store(root / "stores" / name, e, frames=int(name[-2:]),
                                      sampler="middle" if name.endswith("16") else "uniform")
              for name, e in emb.items()}
    kinds = "text_kinds: [general, spatial, temporal]"
    (root / "mvc.yaml").write_text(
        "benchmarks:\n"
        f"  - {{name: msrvtt, reader: msrvtt, path: {msrvtt}, item_embeddings: {stores['msrvtt16']}}}\n"
        f"  - {{name: carebench, reader: carebench, path: {care}, item_embeddings: {stores['care16']}, {kinds}}}\n")
    (root / "care.yaml").write_text(
        "benchmarks:\n"
        f"  - {{name: carebench, reader: carebench, path: {care}, item_embeddings: {stores['care32']}, {kinds}}}\n")
    return {"root": root, "clip": clip_dir, "model": model, "tokenizer": tokenizer, "emb": emb,
            "sets": {"msrvtt": read_msrvtt(msrvtt), "carebench": read_carebench(care)}}


def open_clip_reference(world, store: str, name: str, kind: str | None = None) -> dict[str, float]:
    rs = world["sets"][name] if kind is None else world["sets"][name].with_texts(kind)
    items = torch.stack([world["emb"][store][i] for i in rs.item_ids])
    with torch.no_grad():
        texts = world["model"].encode_text(world["tokenizer"](list(rs.texts)))
    return reference_recall(items, texts, rs.text_owner)


def checkpoint_reference(world, checkpoint, tokenizer, store: str, name: str, kind: str | None,
                         budget: int) -> dict[str, float]:
    from vlr_plugins.specs import load_text_encoder

    encoder = load_text_encoder(checkpoint)
    rs = world["sets"][name] if kind is None else world["sets"][name].with_texts(kind)
    items = torch.stack([world["emb"][store][i] for i in rs.item_ids])
    rows = []
    with torch.no_grad():
        for text in rs.texts:  # each text alone, cut to the budget: no padding
            tok = tokenizer(text, truncation=True, max_length=budget, return_tensors="pt")
            rows.append(encoder(tok["input_ids"], tok["attention_mask"])[0])
    return reference_recall(items, torch.stack(rows), rs.text_owner)


def run_eval(*argv: str) -> tuple[dict, str]:
    out = argv[argv.index("--out") + 1]
    assert main(list(argv)) == 0
    from pathlib import Path

    return json.loads((Path(out) / "results.json").read_text()), (Path(out) / "results.md").read_text()


def table_values(report: dict, table: str) -> list:
    return report["tables"][table]["rows"][0]["values"]


def test_open_clip_model_in_the_multi_view_captions_tables(world, tmp_path, capsys):
    out = tmp_path / "out"
    report, markdown = run_eval("eval", "--model", f"open_clip:local-dir:{world['clip']}",
                                "--benchmarks", str(world["root"] / "mvc.yaml"), "--label", "tiny-clip",
                                "--protocol", "multi-view-captions/zero-shot", "--tables", "mvc-table1,mvc-table3",
                                "--out", str(out))
    expected = {"msrvtt": open_clip_reference(world, "msrvtt16", "msrvtt"),
                **{f"carebench/{k}": open_clip_reference(world, "care16", "carebench", k)
                   for k in ("general", "spatial", "temporal")}}
    assert set(report["recall"]) == set(expected)
    for name, metrics in expected.items():
        for key, value in metrics.items():
            assert report["recall"][name][key] == pytest.approx(value), (name, key)
    # open_clip encodes at its own 24 positions: the protocol's budgets are for BERT-tokenized models
    assert set(report["budgets"].values()) == {None}
    assert report["sampling"]["msrvtt"] == {"frames": 16, "sampler": "middle"}
    # Table 1: T2V R@1 of MSR-VTT, DiDeMo, ActivityNet, LSMDC, MSVD; only MSR-VTT was scored
    assert table_values(report, "mvc-table1") == [pytest.approx(expected["msrvtt"]["t2i_r1"]), None, None, None, None]
    # Table 3: CARE-S, CARE-T, DREAM-D, DREAM-E, S2S-W, S2S-S
    assert table_values(report, "mvc-table3") == [pytest.approx(expected["carebench/spatial"]["t2i_r1"]),
                                                  pytest.approx(expected["carebench/temporal"]["t2i_r1"]),
                                                  None, None, None, None]
    assert report["tables"]["mvc-table3"]["missing"] == ["dream1k/detailed", "dream1k/event", "shot2story-clip",
                                                         "shot2story-shot"]
    assert "| Model | MSR-VTT | DiDeMo | ActivityNet | LSMDC | MSVD |" in markdown
    assert f"| tiny-clip | {expected['msrvtt']['t2i_r1']:.1f} | – | – | – | – |" in markdown
    assert (out / "table-mvc-table1.png").read_bytes()[:4] == b"\x89PNG"
    err = capsys.readouterr().err
    assert "warning: --tables mvc-table1" in err and "didemo, activitynet, lsmdc, msvd" in err


def test_open_clip_model_in_the_carebench_tables(world, tmp_path):
    report, markdown = run_eval("eval", "--model", f"open_clip:local-dir:{world['clip']}",
                                "--benchmarks", str(world["root"] / "care.yaml"), "--label", "tiny-clip",
                                "--protocol", "carebench/zero-shot", "--tables", "carebench-table3,carebench-table4",
                                "--out", str(tmp_path / "out"))
    ref = {k: open_clip_reference(world, "care32", "carebench", k) for k in ("general", "spatial", "temporal")}
    order = [f"{d}_r{k}" for d in ("t2i", "i2t") for k in (1, 5, 10)]  # T2V then V2T, as the paper prints
    assert table_values(report, "carebench-table3") == [pytest.approx(ref["general"][m]) for m in order]
    mean = {kind: sum(ref[kind].values()) / 6 for kind in ("spatial", "temporal")}
    rebias = 100 * abs(1 - mean["spatial"] / mean["temporal"])
    assert table_values(report, "carebench-table4") == (
        [pytest.approx(ref["spatial"][m]) for m in order] + [pytest.approx(ref["temporal"][m]) for m in order]
        + [pytest.approx(rebias)])
    assert report["sampling"]["carebench/general"] == {"frames": 32, "sampler": "uniform"}
    assert "| Model | CaReBench Spatial Retrieval |" in markdown and "ReBias%↓" in markdown
    assert "Note:" not in markdown.split("**CaReBench, Table 4")[1]  # the paper's protocol, every column scored


def test_checkpoint_in_the_multi_view_captions_tables(world, tiny_checkpoint, tiny_world, tmp_path):
    from transformers import AutoTokenizer

    report, _ = run_eval("eval", "--model", str(tiny_checkpoint), "--benchmarks", str(world["root"] / "mvc.yaml"),
                         "--protocol", "multi-view-captions/zero-shot", "--tables", "mvc-table1,mvc-table3",
                         "--out", str(tmp_path / "out"))
    # the protocol's budgets: UMT's 32 tokens for MSR-VTT, 128 for CaReBench
    assert report["budgets"] == {"msrvtt": 32, "carebench/general": 128, "carebench/spatial": 128,
                                 "carebench/temporal": 128}
    tokenizer = AutoTokenizer.from_pretrained(tiny_world["tokenizer"])
    for name, store, kind, budget in (("msrvtt", "msrvtt16", None, 32), ("carebench", "care16", "spatial", 128),
                                      ("carebench", "care16", "temporal", 128)):
        expected = checkpoint_reference(world, tiny_checkpoint, tokenizer, store, name, kind, budget)
        key = name if kind is None else f"{name}/{kind}"
        for metric, value in expected.items():
            assert report["recall"][key][metric] == pytest.approx(value), (key, metric)
    assert table_values(report, "mvc-table1")[0] == pytest.approx(report["recall"]["msrvtt"]["t2i_r1"])
    assert table_values(report, "mvc-table3")[:2] == [pytest.approx(report["recall"]["carebench/spatial"]["t2i_r1"]),
                                                      pytest.approx(report["recall"]["carebench/temporal"]["t2i_r1"])]


def test_a_store_that_does_not_record_its_frames_is_evaluated_with_a_warning(world, tmp_path, capsys):
    store = write_video_store(tmp_path / "store", world["emb"]["msrvtt16"], frames=None, sampler=None)
    bench = tmp_path / "bench.yaml"
    csv_path = world["root"] / "msrvtt_data" / "MSRVTT_JSFUSION_test.csv"
    bench.write_text(f"benchmarks:\n  - {{name: msrvtt, reader: msrvtt, path: {csv_path}, item_embeddings: {store}}}\n")
    report, _ = run_eval("eval", "--model", f"open_clip:local-dir:{world['clip']}", "--benchmarks", str(bench),
                         "--protocol", "multi-view-captions/zero-shot", "--out", str(tmp_path / "out"))
    for metric, value in open_clip_reference(world, "msrvtt16", "msrvtt").items():
        assert report["recall"]["msrvtt"][metric] == pytest.approx(value)
    err = capsys.readouterr().err
    assert f"warning: {bench}, benchmark 1, field 'item_embeddings'" in err
    assert "does not record its frames and sampler" in err and "16 frames, sampler middle" in err


def test_from_video_files_to_the_tables_through_the_command_line(world, tmp_path):
    """`vlr precompute --benchmarks` writes the store `vlr eval` reads: the same rows as the
    frame-pooled tower run in the test, hence the same recall as the reference."""
    store = tmp_path / "stores" / "msrvtt"
    bench = tmp_path / "bench.yaml"
    annotations = world["root"] / "msrvtt_data" / "MSRVTT_JSFUSION_test.csv"
    videos = world["root"] / "MSRVTT" / "videos" / "all"
    bench.write_text("benchmarks:\n"
                     f"  - {{name: msrvtt, reader: msrvtt, path: {annotations}, item_embeddings: {store},\n"
                     f"     args: {{media_root: {videos}}}}}\n")
    spec = f"open_clip:local-dir:{world['clip']}"
    assert main(["precompute", "--benchmarks", str(bench), "--encoder", spec, "--frames", "16",
                 "--sampler", "middle", "--out", str(store), "--workers", "0"]) == 0
    from vlr_plugins.data import EmbeddingStore

    written = EmbeddingStore(store)
    for item_id in world["sets"]["msrvtt"].item_ids:
        torch.testing.assert_close(written.get([item_id])[0], world["emb"]["msrvtt16"][item_id], atol=1e-5, rtol=0)
    report, markdown = run_eval("eval", "--model", spec, "--benchmarks", str(bench), "--protocol",
                                "multi-view-captions/zero-shot", "--tables", "mvc-table1", "--out", str(tmp_path / "out"))
    expected = open_clip_reference(world, "msrvtt16", "msrvtt")
    for key, value in expected.items():
        assert report["recall"]["msrvtt"][key] == pytest.approx(value), key
    # a store of videos: the directions are text-to-video and video-to-text
    assert report["media"] == {"msrvtt": "video"}
    assert "msrvtt T2V R@1" in markdown and "msrvtt V2T R@1" in markdown and "I2T" not in markdown


def test_capst_results_add_the_unified_score(world, tmp_path):
    capst = tmp_path / "capst.json"
    capst.write_text(json.dumps({"label": "tiny", "scores": {"overall": {"action": {"f1": 30.0},
                                                                         "object": {"f1": 20.0}}}}))
    argv = ["eval", "--model", f"open_clip:local-dir:{world['clip']}", "--benchmarks",
            str(world["root"] / "care.yaml"), "--label", "tiny-clip", "--protocol", "carebench/zero-shot"]
    report, markdown = run_eval(*argv, "--capst", str(capst), "--out", str(tmp_path / "out"))
    general = open_clip_reference(world, "care32", "carebench", "general")
    avg_r1 = (general["t2i_r1"] + general["i2t_r1"]) / 2
    assert report["unified"]["avg_r1"] == pytest.approx(avg_r1)
    assert report["unified"]["avg_f1"] == pytest.approx(25.0)
    assert report["unified"]["unified"] == pytest.approx((avg_r1 + 25.0) / 2)
    assert report["unified"]["benchmark"] == "carebench/general"
    assert f"| tiny-clip | {avg_r1:.1f} | 25.0 | {(avg_r1 + 25.0) / 2:.1f} |" in markdown
    # refused before anything is encoded: no file, no F1 in it
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"scores": {"overall": {"action": {"f1": 30.0}}}}))
    for given in (tmp_path / "nope.json", bad):
        out = tmp_path / f"refused-{given.stem}"
        assert main([*argv, "--capst", str(given), "--out", str(out)]) == 2
        assert not (out / "results.json").exists()
