"""The bad-input catalogue of ``vlr export`` bundling a BLIP image side (``--image-encoder``,
``--text-only``, the store a checkpoint's recipe trained against).

Each row writes its files into an empty folder (the command's working directory) and runs
``vlr export``; every case must exit 2 without a traceback, write no ``{tmp}/export`` (nor a
temporary folder beside it) and leave the folder as it was.

Placeholders: ``{tmp}`` the case's folder; ``{blip}`` a tiny BLIP folder (``save_pretrained`` +
its image processor) embedding into 16 dimensions, ``{narrow}`` one embedding into 8, ``{half}``
one without its image processor; ``{ckpt}`` a checkpoint of a 16-d text encoder whose recipe
names no store. A ``store.pth`` row is a checkpoint whose recipe trained against ``{tmp}/store``.
"""

from __future__ import annotations


import pytest
from _blip_world import paragraph_checkpoint, save_tiny_blip
from _refusal import assert_refused, fill, tree, write_files

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    from vlr_plugins.text import BlipTextEncoder, build_wordpiece_tokenizer

    root = tmp_path_factory.mktemp("export-image-side-catalogue")
    tok = build_wordpiece_tokenizer("a red car on the road".split())
    tok.save_pretrained(root / "tok")
    encoder = BlipTextEncoder(config=dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                          num_attention_heads=2, intermediate_size=37,
                                          max_position_embeddings=64, pad_token_id=tok.pad_token_id),
                              embed_dim=16, tokenizer=str(root / "tok"))
    paragraph_checkpoint(root / "epoch_1.pth", encoder, None)
    return {"blip": str(save_tiny_blip(root / "blip")), "narrow": str(save_tiny_blip(root / "narrow", proj=8)),
            "half": str(save_tiny_blip(root / "half", processor=False)), "ckpt": str(root / "epoch_1.pth"),
            "encoder": encoder}


_ENCODER: list = []  # the world's text encoder, for the rows that write a checkpoint


def _store_ckpt(path, places):
    paragraph_checkpoint(path, _ENCODER[0], f"{places['tmp']}/store")


def _store(dim: int, encoder: str = "blip:x"):
    """A real store (``vlr precompute``'s format) of one ``dim``-d row whose encoder is ``encoder``."""
    def write(path, places):
        import torch

        from vlr_plugins.data import EmbeddingStoreWriter

        with EmbeddingStoreWriter(path, dim, meta={"encoder": fill(encoder, places)}) as writer:
            writer.add(["a"], torch.nn.functional.normalize(torch.ones(1, dim), dim=-1))
    return write


CASES = [
    ("--image-encoder: no such BLIP folder", {}, ["{ckpt}", "--image-encoder", "blip:{tmp}/nothing"],
     ["--image-encoder", "{tmp}/nothing"]),
    ("--image-encoder: a python encoder cannot be bundled", {}, ["{ckpt}", "--image-encoder", "my_encoders:clip"],
     ["--image-encoder", "'my_encoders:clip'", "--text-only"]),
    ("--image-encoder: another embedding space", {}, ["{ckpt}", "--image-encoder", "blip:{narrow}"],
     ["--image-encoder", "{narrow}", "8 dimensions"]),
    ("--image-encoder: half a BLIP folder (no image processor)", {}, ["{ckpt}", "--image-encoder", "blip:{half}"],
     ["--image-encoder", "{half}", "preprocessor_config.json"]),
    ("--image-encoder with --text-only", {}, ["{ckpt}", "--image-encoder", "blip:{blip}", "--text-only"],
     ["--image-encoder", "--text-only"]),
    ("store: embeddings of another size than the text encoder's",
     {"store.pth": _store_ckpt, "store": _store(8)}, ["{tmp}/store.pth"],
     ["{tmp}/store/index.json", "8-d", "16 dimensions"]),
    ("store: index.json that is not JSON", {"store.pth": _store_ckpt, "store/index.json": "{"},
     ["{tmp}/store.pth"], ["{tmp}/store/index.json"]),
    ("store: records a BLIP model that is not here", {"store.pth": _store_ckpt,
                                                      "store": _store(16, "blip:{tmp}/gone")},
     ["{tmp}/store.pth"], ["{tmp}/gone"]),
    ("--text-only: an open_clip checkpoint carries its own image side", {},
     ["open_clip:ViT-B-32:{tmp}/x.pt", "--text-only"], ["--text-only"]),
]


@pytest.mark.parametrize("files, argv, where", [pytest.param(*row[1:], id=row[0]) for row in CASES])
def test_export_image_side_refuses(files, argv, where, tmp_path, world):
    places = {k: v for k, v in world.items() if isinstance(v, str)}
    places["tmp"] = str(tmp_path)
    _ENCODER[:] = [world["encoder"]]
    write_files(tmp_path, files, places)
    before = tree(tmp_path)
    command = ["export", fill(argv[0], places), str(tmp_path / "export"), *[fill(a, places) for a in argv[1:]]]
    assert_refused(command, *[fill(w, places) for w in where], leaves=[tmp_path / "export"], cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"
