"""Long-context open_clip models: '-ctx<N>' configs, and a loader that stretches a checkpoint."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("open_clip_train")
pytest.importorskip("vlr_plugins.text.length")
import open_clip  # noqa: E402

from vlr_plugins.integrations.open_clip import (  # noqa: E402
    add_long_context_config,
    create_long_context_model,
    parse_long_context_name,
    register_long_context_configs,
)
from vlr_plugins.text import stretch_positional_embedding  # noqa: E402


@pytest.fixture(scope="module")
def tiny_checkpoint(tiny_model, tmp_path_factory):
    torch.manual_seed(0)
    model = open_clip.create_model(tiny_model)
    path = tmp_path_factory.mktemp("ckpt") / "tiny.pt"
    torch.save({"state_dict": model.state_dict()}, path)
    return path, model.state_dict()


def test_shipped_configs_are_their_bases_at_248_tokens():
    names = register_long_context_configs()
    assert {"ViT-B-16-quickgelu-ctx248", "ViT-L-14-quickgelu-ctx248", "ViT-B-32-ctx248"} <= set(
        names
    )
    for name in names:
        base, length = parse_long_context_name(name)
        cfg, base_cfg = open_clip.get_model_config(name), open_clip.get_model_config(base)
        assert length == 248 and cfg["text_cfg"].pop("context_length") == 248
        base_cfg["text_cfg"].pop("context_length")
        assert cfg == base_cfg
    assert parse_long_context_name("ViT-L-14-336") is None, "an image size is not a text length"


def test_a_77_token_checkpoint_is_stretched_the_long_clip_way(
    tiny_model, tiny_checkpoint, tmp_path
):
    path, state = tiny_checkpoint
    name = add_long_context_config(tiny_model, 96, tmp_path)
    assert name == "vlr-tiny-ctx96" and open_clip.get_tokenizer(name).context_length == 96
    model = create_long_context_model(name, str(path), keep=20)
    pos = model.positional_embedding
    torch.testing.assert_close(
        pos.detach(), stretch_positional_embedding(state["positional_embedding"], 96, keep=20)
    )
    assert model.context_length == 96 and model.attn_mask.shape == (96, 96)
    assert pos.frozen_rows == 20, "Long-CLIP trains only the stretched positions"
    assert torch.equal(model.token_embedding.weight, state["token_embedding.weight"])
    same = create_long_context_model(tiny_model, str(path), context_length=96, train_new_only=False)
    assert torch.equal(same.positional_embedding, pos) and not getattr(
        same.positional_embedding, "frozen_rows", 0
    )


def test_an_already_long_checkpoint_loads_as_is(tiny_model, tiny_checkpoint, tmp_path):
    path, _ = tiny_checkpoint
    name = add_long_context_config(tiny_model, 96, tmp_path)
    long = create_long_context_model(name, str(path))
    with torch.no_grad():
        long.positional_embedding.add_(1)  # as if fine-tuned
    saved = tmp_path / "long.pt"
    torch.save({"state_dict": long.state_dict()}, saved)
    again = create_long_context_model(name, str(saved))
    assert torch.equal(again.positional_embedding, long.positional_embedding)
    assert torch.equal(
        open_clip.create_model(name, pretrained=str(saved)).positional_embedding,
        long.positional_embedding,
    ), "plain open_clip loads it back"


def test_contradictions_are_refused(tiny_model, tiny_checkpoint):
    path, _ = tiny_checkpoint
    with pytest.raises(ValueError, match="contradicts"):
        create_long_context_model("vlr-tiny-ctx96", str(path), context_length=128)
    with pytest.raises(ValueError, match="give context_length"):
        create_long_context_model(tiny_model, str(path))
