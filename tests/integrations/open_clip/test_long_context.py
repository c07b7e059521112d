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


# ---------------------------------------------------------------- Long-CLIP's own checkpoints


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory):
    """A tiny Long-CLIP checkpoint (two distinct 248-row tables), its state, and the model name."""
    from _long_clip import register_tiny_long_clip, save_long_clip_checkpoint

    root = tmp_path_factory.mktemp("longclip")
    base = register_tiny_long_clip(root / "configs")
    name = add_long_context_config(base, 248, root / "configs")
    path = root / "longclip-tiny.pt"
    return path, save_long_clip_checkpoint(path), name


def test_a_long_clip_checkpoint_embeds_texts_as_long_clip_does(long_clip):
    from _long_clip import long_clip_encode_text, token_rows

    path, state, name = long_clip
    model = create_long_context_model(name, str(path)).eval()
    tokens = token_rows([3, 19, 20, 21, 100, 247])  # end tokens on both sides of row 20
    with torch.no_grad():
        ours = model.encode_text(tokens).double()
    expected = long_clip_encode_text(state, tokens, heads=2)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
    # the reference tells the tables apart: either one alone is wrong on one side of row 20
    for table, wrong_rows in (("positional_embedding", slice(3, None)), ("positional_embedding_res", slice(0, 2))):
        one = {**state, "positional_embedding": state[table], "positional_embedding_res": state[table]}
        assert (long_clip_encode_text(one, tokens, heads=2) - expected)[wrong_rows].abs().amin(dim=1).gt(1e-3).all()
    pos = model.positional_embedding
    assert torch.equal(pos[:20], state["positional_embedding"][:20])
    assert torch.equal(pos[20:], state["positional_embedding_res"][20:])
    assert pos.frozen_rows == 20, "Long-CLIP trains only rows 20.. (its first table needs no grad)"
    assert not hasattr(model, "positional_embedding_res")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_folded_table_adds_bit_for_bit_what_long_clip_adds(long_clip, dtype):
    # Long-CLIP: x + (pos * mask1).type(dtype) + (res * mask2).type(dtype), the masks float32
    # as in its model; open_clip: x + table.to(dtype), with the table folded from the two
    from vlr_plugins.integrations.open_clip.long_clip_checkpoint import fold_long_clip_positions

    path, state, _ = long_clip
    pos, res = state["positional_embedding"], state["positional_embedding_res"]
    mask1, mask2 = torch.zeros(248, 1), torch.zeros(248, 1)
    mask1[:20], mask2[20:] = 1, 1
    x = (torch.randn(4, 248, 32) * 3).to(dtype)
    long_clip_sum = x + (pos * mask1).type(dtype) + (res * mask2).type(dtype)
    folded = fold_long_clip_positions(state, path)["positional_embedding"]
    assert torch.equal(x + folded.to(dtype), long_clip_sum)


def test_a_long_clip_checkpoint_saved_by_open_clip_loads_back_with_plain_open_clip(long_clip, tmp_path):
    path, _, name = long_clip
    model = create_long_context_model(name, str(path), train_new_only=False)
    saved = tmp_path / "folded.pt"
    torch.save({"state_dict": model.state_dict()}, saved)
    again = open_clip.create_model(name, pretrained=str(saved))
    assert torch.equal(again.positional_embedding, model.positional_embedding)


def _refusal(tmp_path, state, **changes):
    bad = {**state, **changes}
    path = tmp_path / "bad-longclip.pt"
    torch.save({k: v for k, v in bad.items() if v is not None}, path)
    return str(path)


def test_long_clip_tables_of_the_wrong_shape_are_refused_naming_file_and_key(long_clip, tmp_path):
    from vlr_plugins.errors import DataFormatError

    _, state, name = long_clip
    res, pos = state["positional_embedding_res"], state["positional_embedding"]
    cases = [
        ({"positional_embedding_res": res[:247]}, "field 'positional_embedding_res'",
         r"\(248, 32\); found \(247, 32\)"),
        ({"positional_embedding": pos[:77], "positional_embedding_res": res[:77]},
         "field 'positional_embedding'", r"masks 248 rows; found shape \(77, 32\)"),
        ({"positional_embedding": None}, "field 'positional_embedding_res'", "but no positional_embedding"),
        ({"positional_embedding_res": torch.where(torch.arange(248)[:, None] == 5, float("inf"), res)},
         "field 'positional_embedding_res'", "non-finite"),
    ]
    for changes, key, words in cases:
        bad = _refusal(tmp_path, state, **changes)
        with pytest.raises(DataFormatError, match=words) as e:
            create_long_context_model(name, bad)
        assert str(e.value).startswith(f"{bad}, {key}: ")


def test_a_long_clip_checkpoint_needs_248_positions_and_quick_gelu(long_clip, tmp_path):
    from _long_clip import TINY_LONG_CLIP, register_tiny_long_clip

    from vlr_plugins.errors import ConfigError

    path, _, name = long_clip
    base = name[: -len("-ctx248")]
    with pytest.raises(ConfigError, match=f"{path}: a Long-CLIP checkpoint .* has 248 text positions; "
                                          f"{base}-ctx96 has 96: load it as {name}$"):
        create_long_context_model(add_long_context_config(base, 96, tmp_path), str(path))
    gelu = register_tiny_long_clip(tmp_path, "vlr-test-longclip-gelu", {**TINY_LONG_CLIP, "quick_gelu": False})
    with pytest.raises(ConfigError, match="runs QuickGELU"):
        create_long_context_model(f"{gelu}-ctx248", str(path), context_length=None)
    forced = create_long_context_model(f"{gelu}-ctx248", str(path), force_quick_gelu=True)
    assert torch.equal(forced.positional_embedding, create_long_context_model(name, str(path)).positional_embedding)
