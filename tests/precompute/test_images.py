"""Precomputing image embeddings: BLIP's ITC image side, or any callable, into an EmbeddingStore."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from vlr_plugins.errors import DataFormatError, ImageEncoderError, MissingFileError, ModelLoadError, UserError
from vlr_plugins.precompute import BlipImageEncoder, list_images, precompute_image_embeddings
from vlr_plugins.specs import load_image_encoder as load_encoder

# relative path -> PIL mode; sizes differ so that the processor has to resize
IMAGES = {
    "a.png": ("RGB", (40, 30)),
    "b.jpg": ("RGB", (32, 32)),
    "nested/c.PNG": ("L", (20, 50)),
    "nested/deeper/d.webp": ("RGBA", (64, 48)),
    "e.bmp": ("RGB", (17, 23)),
}


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory) -> Path:
    from PIL import Image

    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for rel, (mode, (w, h)) in IMAGES.items():
        channels = {"RGB": 3, "L": 1, "RGBA": 4}[mode]
        pixels = rng.integers(0, 256, size=(h, w, channels), dtype=np.uint8)
        if channels == 1:
            pixels = pixels[..., 0]
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels, mode=mode).save(root / rel)
    (root / "notes.txt").write_text("not an image")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x.png").write_bytes(b"")  # would fail to decode; must be skipped
    return root


@pytest.fixture(scope="module")
def tiny_blip(tmp_path_factory) -> Path:
    from _tiny_blip import save_tiny_blip

    return save_tiny_blip(tmp_path_factory.mktemp("tiny-blip"))


def _rgb(path: Path):
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")


def test_list_images_walks_a_folder(image_dir):
    images = list_images(image_dir)
    expected_ids = sorted(Path(rel).with_suffix("").as_posix() for rel in IMAGES)
    assert [i for i, _ in images] == expected_ids
    assert {p for _, p in images} == {image_dir / rel for rel in IMAGES}


def test_list_images_reads_txt_and_jsonl_lists(image_dir, tmp_path):
    rels = list(IMAGES)[::-1]  # list files keep their own order
    txt = image_dir / "list.txt"
    txt.write_text("\n".join(rels) + "\n\n")
    expected = [(Path(r).with_suffix("").as_posix(), image_dir / r) for r in rels]
    assert list_images(txt) == expected

    jsonl = tmp_path / "list.jsonl"
    jsonl.write_text(
        "\n".join(json.dumps({"id": k, "path": str(image_dir / r)}) for k, r in enumerate(rels))
    )
    assert list_images(jsonl) == [(str(k), image_dir / r) for k, r in enumerate(rels)]


def test_list_images_reports_every_missing_file(image_dir, tmp_path):
    listed = ["a.png", "gone1.png", "b.jpg", "sub/gone2.jpg"]
    (tmp_path / "list.txt").write_text("\n".join(listed))
    for rel in ("a.png", "b.jpg"):
        (tmp_path / rel).write_bytes((image_dir / rel).read_bytes())
    with pytest.raises(FileNotFoundError) as info:
        list_images(tmp_path / "list.txt")
    message = str(info.value)
    assert message.startswith(f"2 of the 4 images listed in {tmp_path / 'list.txt'} do not exist")
    assert str(tmp_path / "gone1.png") in message and str(tmp_path / "sub/gone2.jpg") in message


def test_list_images_rejects_ids_given_twice(tmp_path):
    (tmp_path / "x.png").write_bytes(b"")
    (tmp_path / "x.jpg").write_bytes(b"")
    with pytest.raises(DataFormatError, match="both give image id 'x'"):
        list_images(tmp_path)
    (tmp_path / "list.jsonl").write_text(
        json.dumps({"id": "x", "path": "x.png"}) + "\n" + json.dumps({"id": "x", "path": "x.jpg"})
    )
    duplicate = "line 2, field 'id': duplicate image id 'x', first seen on line 1"
    with pytest.raises(DataFormatError, match=duplicate):
        list_images(tmp_path / "list.jsonl")


def test_blip_store_equals_the_itc_image_features(tiny_blip, image_dir, tmp_path):
    from transformers import BlipForImageTextRetrieval, BlipImageProcessor

    encoder = load_encoder(f"blip:{tiny_blip}")
    assert isinstance(encoder, BlipImageEncoder) and encoder.dim == 16
    images = list_images(image_dir)
    store = precompute_image_embeddings(
        encoder, images, tmp_path / "store", batch_size=2, shard_size=3, progress=False
    )

    assert store.ids == tuple(i for i, _ in images)
    assert store.meta["encoder"] == str(tiny_blip) and store.dim == 16

    # independently: processor -> vision tower -> CLS -> vision_proj -> L2 normalise
    model = BlipForImageTextRetrieval.from_pretrained(tiny_blip).eval()
    processor = BlipImageProcessor.from_pretrained(tiny_blip)
    pixels = processor(images=[_rgb(p) for _, p in images], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        cls = model.vision_model(pixel_values=pixels).last_hidden_state[:, 0, :]
        expected = torch.nn.functional.normalize(model.vision_proj(cls), dim=-1)
    stored = store.get([i for i, _ in images])
    torch.testing.assert_close(stored, expected, rtol=1e-5, atol=1e-6)
    assert torch.pdist(stored).min() > 1e-3  # the images are told apart at all

    # and the model's own ITC similarity is the stored rows times its text features
    input_ids = torch.randint(4, 99, (3, 7))
    with torch.no_grad():
        out = model(input_ids=input_ids, pixel_values=pixels, use_itm_head=False)
        text_feat = torch.nn.functional.normalize(
            model.text_proj(out.question_embeds[:, 0, :]), dim=-1
        )
    torch.testing.assert_close(stored @ text_feat.t(), out.itm_score, rtol=1e-5, atol=1e-5)


def test_float16_store_from_blip(tiny_blip, image_dir, tmp_path):
    encoder = load_encoder(f"blip:{tiny_blip}")
    images = list_images(image_dir)
    store = precompute_image_embeddings(
        encoder, images, tmp_path / "half", dtype=torch.float16, progress=False, num_workers=0
    )
    full = encoder([_rgb(p) for _, p in images])
    assert store.dtype == torch.float16
    torch.testing.assert_close(store.get(list(store.ids)), full.half().float(), rtol=0, atol=0)


ENCODER_MODULE = textwrap.dedent(
    """
    import numpy as np
    import torch

    NOT_CALLABLE = 3

    def mean_color(images):
        means = [np.asarray(im, dtype=np.float32).mean((0, 1)) / 255 for im in images]
        return torch.tensor(np.stack(means))

    class MeanColor:
        dim = 3
        name = "mean-color"

        def __init__(self, scale=1.0):
            self.scale = scale

        def __call__(self, images):
            return mean_color(images) * self.scale
    """
)


@pytest.fixture
def encoder_module(tmp_path, monkeypatch) -> str:
    name = "vlr_test_tiny_encoder"
    (tmp_path / f"{name}.py").write_text(ENCODER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


def test_python_callable_encoder(encoder_module, image_dir, tmp_path):
    images = list_images(image_dir)
    expected = torch.tensor(
        np.stack([np.asarray(_rgb(p), dtype=np.float32).mean((0, 1)) / 255 for _, p in images])
    )

    store = precompute_image_embeddings(
        load_encoder(f"{encoder_module}:mean_color"), images, tmp_path / "fn", progress=False
    )
    assert store.ids == tuple(i for i, _ in images) and store.dim == 3
    assert store.meta["encoder"] == f"{encoder_module}:mean_color"
    torch.testing.assert_close(store.get(list(store.ids)), expected)

    # a class is instantiated with the keyword arguments
    encoder = load_encoder(f"{encoder_module}:MeanColor", scale=2.0)
    store = precompute_image_embeddings(
        encoder, images, tmp_path / "cls", batch_size=3, meta={"note": "x"}, progress=False
    )
    assert store.meta == {"encoder": "mean-color", "note": "x"}
    torch.testing.assert_close(store.get(list(store.ids)), expected * 2)


def test_bad_encoder_specs(encoder_module):
    with pytest.raises(ValueError, match="'blip:<name_or_path>' or 'module.sub:attr'"):
        load_encoder("no-colon-here")
    with pytest.raises(AttributeError, match="has no 'nope'"):
        load_encoder(f"{encoder_module}:nope")
    with pytest.raises(ImportError, match="cannot import 'no_such_module_xyz'"):
        load_encoder("no_such_module_xyz:f")
    with pytest.raises(TypeError, match="takes no keyword arguments"):
        load_encoder(f"{encoder_module}:mean_color", device="cpu")


def test_a_bad_image_names_the_file_and_leaves_no_store(encoder_module, image_dir, tmp_path):
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"this is not a png")
    images = list_images(image_dir) + [("broken", broken)]
    out = tmp_path / "store"
    message = re.escape(f"{broken}: cannot read the image")
    with pytest.raises(DataFormatError, match=message) as info:
        precompute_image_embeddings(
            load_encoder(f"{encoder_module}:MeanColor"), images, out, batch_size=2, progress=False
        )
    assert info.value.path == broken
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".store")]  # no temp store left


def test_wrong_output_shape_is_reported(encoder_module, image_dir, tmp_path):
    with pytest.raises(ValueError, match=r"returned shape \(1, 3\) for 2 images"):
        precompute_image_embeddings(
            lambda images: torch.zeros(1, 3), list_images(image_dir), tmp_path / "s",
            batch_size=2, progress=False,
        )
    assert not (tmp_path / "s").exists()


def test_a_module_in_the_current_folder_is_importable_as_python_m_would(image_dir, tmp_path, monkeypatch):
    name = "vlr_test_encoder_here"
    (tmp_path / f"{name}.py").write_text(ENCODER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, name, raising=False)
    encoder = load_encoder(f"{name}:MeanColor")
    assert encoder.dim == 3 and sys.modules[name].__file__ == str(tmp_path / f"{name}.py")
    assert str(tmp_path) not in sys.path  # only for the import


@pytest.mark.parametrize("spec, like, problem", [
    ("blip:", ValueError, "--encoder 'blip:': needs a model name or path"),
    ("module-without-colon", ValueError, "expected 'blip:<name_or_path>' or 'module.sub:attr'"),
    ("no_such_module_xyz:f", ImportError, "--encoder 'no_such_module_xyz:f': cannot import 'no_such_module_xyz'"),
    ("{module}:nope", AttributeError, "has no 'nope'"),
    ("{module}:NOT_CALLABLE", TypeError, "int 3 is not callable"),
])
def test_an_unusable_encoder_spec_names_the_setting(encoder_module, spec, like, problem):
    with pytest.raises(ImageEncoderError, match=re.escape(problem)) as info:
        load_encoder(spec.format(module=encoder_module), setting="--encoder")
    assert isinstance(info.value, like) and isinstance(info.value, UserError)


def test_a_blip_model_that_cannot_be_loaded_names_the_setting_and_the_offline_doc(tmp_path):
    with pytest.raises(ModelLoadError, match=re.escape(f"--encoder: cannot load '{tmp_path / 'no-blip'}'")) as info:
        load_encoder(f"blip:{tmp_path / 'no-blip'}", setting="--encoder")
    assert "docs/quickstart.md" in str(info.value)


def test_a_folder_or_list_without_images_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "text-only").mkdir()
    (tmp_path / "text-only" / "readme.txt").write_text("no images here")
    (tmp_path / "blank.txt").write_text("\n\n")
    for source in ("empty", "text-only", "blank.txt"):
        with pytest.raises(DataFormatError, match=re.escape(str(tmp_path / source))):
            list_images(tmp_path / source)
    with pytest.raises(MissingFileError, match="no image folder or list file"):
        list_images(tmp_path / "absent")


def test_embeddings_that_are_not_finite_name_the_image(encoder_module, image_dir, tmp_path):
    def half_nan(images):
        out = torch.ones(len(images), 3)
        out[-1, 0] = float("nan")
        return out

    images = list_images(image_dir)
    with pytest.raises(ImageEncoderError, match=re.escape(f"gave image {images[1][0]!r} an embedding that is not "
                                                          "finite")):
        precompute_image_embeddings(half_nan, images, tmp_path / "s", batch_size=2, progress=False)
    with pytest.raises(ImageEncoderError, match="not finite .* as float16"):  # finite as float32, not as float16
        precompute_image_embeddings(lambda ims: torch.full((len(ims), 3), 1e6), images, tmp_path / "s",
                                    dtype=torch.float16, progress=False)
    assert not (tmp_path / "s").exists()


def test_importing_the_package_stays_light():
    heavy = ("transformers", "safetensors", "pyarrow", "PIL")
    code = f"import sys, vlr_plugins.data; print(sorted(m for m in {heavy} if m in sys.modules))"
    src = Path(__file__).resolve().parents[2] / "src"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(src)},
    )
    assert out.stdout.strip() == "[]"



def test_the_next_batch_is_opened_while_this_one_is_encoded_and_a_bad_image_fails_in_order(tmp_path, monkeypatch):
    import time
    from concurrent.futures import ThreadPoolExecutor

    from PIL import Image

    import vlr_plugins.precompute.images as images
    from vlr_plugins.errors import DataFormatError
    from vlr_plugins.precompute.images import decoded_batches

    paths = []
    for i in range(7):
        paths.append(tmp_path / f"{i}.png")
        Image.new("RGB", (4 + i, 3), (i, 0, 0)).save(paths[-1])
    batches = [[(str(i), paths[i]) for i in range(s, min(s + 3, 7))] for s in range(0, 7, 3)]
    opened: set[str] = set()
    real = images._open_rgb
    monkeypatch.setattr(images, "_open_rgb", lambda path: (opened.add(path.name), real(path))[1])  # records, opens
    for pool in (None, ThreadPoolExecutor(3)):
        opened.clear()
        got = []
        for k, (batch, pil) in enumerate(decoded_batches(iter(batches), pool)):
            got.append(([i for i, _ in batch], [im.size for im in pil]))
            following = {path.name for _, path in batches[k + 1]} if k + 1 < len(batches) else set()
            if pool is None:  # one batch at a time
                assert not following & opened
            else:  # the next batch is opened by the pool while this one is in the caller's hands
                deadline = time.monotonic() + 10
                while not following <= opened and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert following <= opened, (k, following - opened)
        assert got == [([i for i, _ in b], [(4 + int(i), 3) for i, _ in b]) for b in batches]
    paths[4].write_bytes(b"not an image")
    seen = []
    with pytest.raises(DataFormatError, match="4.png"):
        for batch, _ in decoded_batches(iter(batches), ThreadPoolExecutor(2)):
            seen.append(batch[0][0])
    assert seen == ["0"]  # the batch before the bad image's reached the caller; the bad one raised
