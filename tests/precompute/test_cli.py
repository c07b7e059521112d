"""`vlr precompute` with an encoder module of the current folder, as a user writes one beside their images."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from vlr_plugins.data import EmbeddingStore

ENCODER = textwrap.dedent(
    """
    import torch

    class Corner:
        dim = 3
        name = "corner-pixel"

        def __call__(self, images):
            return torch.stack([torch.tensor(im.getpixel((0, 0)), dtype=torch.float32) for im in images]) / 255
    """
)

COLORS = {"beach/sunset": (250, 120, 30), "cat": (10, 20, 30), "city/night/lights": (200, 200, 40)}


def test_the_vlr_script_imports_an_encoder_from_the_current_folder(tmp_path):
    from PIL import Image

    work = tmp_path / "project"
    for image_id, color in COLORS.items():
        path = work / "photos" / f"{image_id}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4), color).save(path)
    (work / "my_encoders.py").write_text(ENCODER)
    # the console script's own folder, not the current one, heads sys.path: run a script that lives elsewhere
    script = tmp_path / "bin" / "vlr.py"
    script.parent.mkdir()
    script.write_text("import sys\nfrom vlr_plugins.cli import main\nsys.exit(main())\n")
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run([sys.executable, str(script), "precompute", "--images", "photos", "--encoder",
                          "my_encoders:Corner", "--out", "store"], check=False, cwd=work, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    store = EmbeddingStore(work / "store")
    # ids are the paths below --images, without the extension
    assert store.ids == tuple(sorted(COLORS)) and store.meta["encoder"] == "my_encoders:Corner"
    expected = torch.tensor([COLORS[i] for i in store.ids], dtype=torch.float32) / 255
    torch.testing.assert_close(store.get(list(store.ids)), expected)


def test_help_documents_the_image_ids_and_the_encoder_contract(capsys):
    from vlr_plugins.cli import main

    try:
        main(["precompute", "--help"])
    except SystemExit as e:
        assert e.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "images/2021/cat.jpg -> 2021/cat" in text
    assert "--encoder module:callable" in text and "(n, D) tensor" in text and "current folder first" in text
