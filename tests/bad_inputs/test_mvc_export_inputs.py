"""The bad-input catalogue of ``vlr export CHECKPOINT OUT`` for an MVC checkpoint, whose video tower
(``meta['vlr_video_encoder']`` + ``video_encoder.*`` weights) the export bundles.

Each row is a checkpoint written by the test: a good tiny MVC checkpoint (a dual-CLS text encoder
and a SpaceTimeViT, in the layout WeightsOnlyCheckpointHook writes) with one thing broken. Every
case must exit 2 without a traceback (``_refusal.assert_refused``), name the file and the key,
write no ``{tmp}/export`` (nor a temporary folder beside it), and leave the folder as it was.
"""

from __future__ import annotations

import json

import pytest
import torch
from _refusal import assert_refused, tree

pytest.importorskip("transformers")
pytest.importorskip("timm")
pytest.importorskip("torchvision")

from vlr_plugins.text import DualCLSTextEncoder, build_wordpiece_tokenizer  # noqa: E402
from vlr_plugins.vision import SpaceTimeViT  # noqa: E402

TOWER = dict(num_frames=2, image_size=16, patch_size=8, tubelet_size=1, width=16, depth=1, num_heads=2, embed_dim=8)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("mvc-export-catalogue")
    tok = build_wordpiece_tokenizer("a red dog runs on the beach".split())
    tok.save_pretrained(root / "tokenizer")
    bert = dict(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=32, max_position_embeddings=40, pad_token_id=tok.pad_token_id)
    encoder = DualCLSTextEncoder(config=bert, embed_dim=8, num_fusion_layers=1, video_width=16, max_tokens=32,
                                 tokenizer=str(root / "tokenizer"))
    tower = SpaceTimeViT(**TOWER)
    return {"text": encoder.to_config(), "text_state": {f"text_encoder.{k}": v for k, v in encoder.state_dict().items()},
            "video": json.loads(json.dumps(tower.to_config())), "video_state": dict(tower.state_dict())}


def _wide_weights(parts):
    return dict(SpaceTimeViT(**{**TOWER, "width": 24}).state_dict())


# name -> (how meta['vlr_video_encoder'] changes, how the tower's weights change, words the error names)
CASES = {
    "tower type unknown": (lambda v: {**v, "type": "MyVideoTower"}, None,
                           ["meta.vlr_video_encoder.type", "'MyVideoTower'", "SpaceTimeViT"]),
    "tower type not restated": (lambda v: {"type": "FramePooledVideoEncoder", "tower": {"kind": "timm"}}, None,
                                ["meta.vlr_video_encoder.type", "'FramePooledVideoEncoder'", "bundles only"]),
    "tower config not a mapping": (lambda v: ["SpaceTimeViT"], None, ["meta.vlr_video_encoder", "found list"]),
    "tower config does not build": (lambda v: {**v, "num_frames": 3, "tubelet_size": 2}, None,
                                    ["meta.vlr_video_encoder", "cannot build its SpaceTimeViT"]),
    "tower config with an unknown argument": (lambda v: {**v, "depht": 2}, None,
                                              ["meta.vlr_video_encoder", "cannot build", "depht"]),
    "weights of another width": (None, lambda parts: _wide_weights(parts),
                                 ["state_dict", "do not fit the recorded SpaceTimeViT", "patch_embed.weight"]),
    "weights of a block missing": (None, lambda parts: {k: v for k, v in parts["video_state"].items()
                                                        if not k.startswith("blocks.0.mlp")},
                                   ["state_dict", "do not fit", "missing ['blocks.0.mlp.fc1.bias'"]),
    "weights of a layer too many": (None, lambda parts: {**parts["video_state"], "head.weight": torch.zeros(2, 8)},
                                    ["state_dict", "do not fit", "unexpected ['head.weight']"]),
    "no video weights at all": (None, lambda parts: {}, ["state_dict", "holds no 'video_encoder.*' weights"]),
    "tower in another space": (lambda v: {**v, "embed_dim": 12}, "rebuild",
                               ["meta.vlr_video_encoder", "embeds in 12 dims but its text encoder in 8"]),
    "tower tokens too wide for the fusion layers": (lambda v: {**v, "width": 24, "embed_dim": 8}, "rebuild",
                                                    ["meta.vlr_video_encoder", "24 wide", "16-wide"]),
}


@pytest.mark.parametrize("meta_change, weights_change, where", list(CASES.values()), ids=list(CASES))
def test_mvc_export_refuses(meta_change, weights_change, where, parts, tmp_path):
    video = meta_change(parts["video"]) if meta_change else parts["video"]
    if weights_change == "rebuild":  # weights that fit the (consistent but mismatched) recorded tower
        weights = dict(SpaceTimeViT(**{k: v for k, v in video.items() if k != "type"}).state_dict())
    else:
        weights = weights_change(parts) if weights_change else parts["video_state"]
    ckpt = tmp_path / "epoch_1.pth"
    torch.save({"meta": {"vlr_text_encoder": parts["text"], "vlr_video_encoder": video},
                "state_dict": {**parts["text_state"], **{f"video_encoder.{k}": v for k, v in weights.items()}}}, ckpt)
    before = tree(tmp_path)
    assert_refused(["export", str(ckpt), str(tmp_path / "export")], str(ckpt), *where,
                   leaves=[tmp_path / "export"], cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"


def test_the_good_checkpoint_exports(parts, tmp_path):
    """The catalogue's base case is a good checkpoint: each row above breaks one thing."""
    from _refusal import run_vlr

    ckpt = tmp_path / "epoch_1.pth"
    torch.save({"meta": {"vlr_text_encoder": parts["text"], "vlr_video_encoder": parts["video"]},
                "state_dict": {**parts["text_state"],
                               **{f"video_encoder.{k}": v for k, v in parts["video_state"].items()}}}, ckpt)
    code, out, err = run_vlr(["export", str(ckpt), str(tmp_path / "export")], cwd=tmp_path)
    assert code == 0, err
    assert "with its video tower and video processor" in out
    assert (tmp_path / "export" / "video_preprocessor_config.json").is_file()
