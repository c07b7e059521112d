"""specs: every scheme a command takes is read here, per role, into one ModelSpec; the model
dtype rule (mllm: only) is one rule for every command."""

from __future__ import annotations

import pytest

from vlr_plugins.errors import UsageError
from vlr_plugins.specs import (
    ModelSpec,
    check_model_dtype_option,
    parse_model_spec,
    split_mllm_spec,
    takes_model_dtype,
    text_encoder_meta,
    text_model_source,
)


@pytest.mark.parametrize("spec, role, scheme, target", [
    ("blip:Salesforce/blip-itm-base-coco", "text", "blip", "Salesforce/blip-itm-base-coco"),
    ("blip:Salesforce/blip-itm-base-coco", "image", "blip", "Salesforce/blip-itm-base-coco"),
    ("open_clip:ViT-B-16:openai", "text", "open_clip", "ViT-B-16:openai"),
    ("open_clip:ViT-B-16:openai", "video", "open_clip", "ViT-B-16:openai"),
    ("vlr:work_dirs/MVC-B/epoch_20.pth", "video", "vlr", "work_dirs/MVC-B/epoch_20.pth"),
    ("towers/umt_b.yaml", "video", "tower_config", "towers/umt_b.yaml"),
    ("towers/umt_b.JSON", "video", "tower_config", "towers/umt_b.JSON"),
    ("my_encoders:clip_l14", "image", "python", "my_encoders:clip_l14"),
    ("my_models.text:Bag", "text", "python", "my_models.text:Bag"),
    ("work_dirs/C5/epoch_10.pth", "text", "checkpoint", "work_dirs/C5/epoch_10.pth"),
])
def test_each_role_reads_its_schemes(spec, role, scheme, target):
    parsed = parse_model_spec(spec, role)
    assert (parsed.text, parsed.scheme, parsed.target) == (spec, scheme, target)


@pytest.mark.parametrize("spec, role", [
    ("blip:x", "video"),        # a video tower is never BLIP: module 'blip', attribute 'x'
    ("vlr:x", "image"),         # vlr: is the trained video tower's scheme only
    ("open_clip:x", "image"),   # images come from blip:, mllm: or a callable
])
def test_a_scheme_another_role_does_not_take_is_a_python_object(spec, role):
    assert parse_model_spec(spec, role).scheme == "python"


def test_text_specs_that_are_no_python_name_are_checkpoints(tmp_path):
    existing = tmp_path / "mod:attr"  # a path that exists is a checkpoint, whatever it looks like
    existing.write_text("")
    assert parse_model_spec(str(existing)).scheme == "checkpoint"
    assert parse_model_spec("epoch_3.pth").scheme == "checkpoint"
    assert parse_model_spec("not a:python name").scheme == "checkpoint"
    assert [text_model_source(s) for s in ("blip:x", "open_clip:a:b", "mllm:m", "pkg:obj", "a.pth")] == \
        ["checkpoint", "open_clip", "mllm", "python", "checkpoint"]


def test_mllm_prompt_after_the_last_colon_unless_the_folder_exists(tmp_path):
    assert parse_model_spec("mllm:Qwen/Qwen2-VL-7B-Instruct:care", "video") == \
        ModelSpec("mllm:Qwen/Qwen2-VL-7B-Instruct:care", "mllm", "Qwen/Qwen2-VL-7B-Instruct", "care")
    assert split_mllm_spec("mllm:exports/care-7b") == ("exports/care-7b", None)
    folder = tmp_path / "run:2"
    folder.mkdir()
    assert split_mllm_spec(f"mllm:{folder}") == (str(folder), None)
    assert split_mllm_spec(f"mllm:{folder}:e5v") == (str(folder), "e5v")
    with pytest.raises(UsageError, match="names no model folder"):
        split_mllm_spec("mllm::care")
    with pytest.raises(UsageError, match="is not an mllm: spec"):
        split_mllm_spec("blip:x", "--encoder")


def test_open_clip_parts_keep_open_clips_own_schemes_whole(tmp_path):
    assert parse_model_spec("open_clip:ViT-B-32:openai").open_clip_parts == ("ViT-B-32", "openai", False)
    assert parse_model_spec("open_clip:ViT-B-32").open_clip_parts == ("ViT-B-32", None, False)
    assert parse_model_spec("open_clip:ViT-B-32:").open_clip_parts == ("ViT-B-32", None, False)
    assert parse_model_spec("open_clip:hf-hub:org/model", "video").open_clip_parts == ("hf-hub:org/model", None, True)
    assert parse_model_spec("open_clip:hf-hub:org/model:ck.pt").open_clip_parts == ("hf-hub:org/model", "ck.pt", True)
    assert parse_model_spec("open_clip:local-dir:m").open_clip_parts == ("local-dir:m", None, True)
    # a folder that exists is taken whole, colons and all; else the text after the last colon is the checkpoint
    folder = tmp_path / "run:2"
    folder.mkdir()
    assert parse_model_spec(f"open_clip:local-dir:{folder}").open_clip_parts == (f"local-dir:{folder}", None, True)
    assert parse_model_spec(f"open_clip:local-dir:{folder}:logs/e.pt", "video").open_clip_parts == \
        (f"local-dir:{folder}", "logs/e.pt", True)
    assert parse_model_spec("open_clip:local-dir:/m:x").open_clip_parts == ("local-dir:/m", "x", True)


def test_only_mllm_specs_take_a_model_dtype():
    assert takes_model_dtype("mllm:exports/care-7b:care")
    assert not any(takes_model_dtype(s) for s in ("blip:x", "open_clip:a:b", "vlr:c.pth", "pkg:obj", "c.pth"))
    check_model_dtype_option("auto", "blip:x", "--model")  # auto is every model's own
    check_model_dtype_option("bfloat16", "mllm:m", "--model")
    with pytest.raises(UsageError) as e:
        check_model_dtype_option("bfloat16", "open_clip:ViT-B-32:openai", "--encoder")
    assert str(e.value) == ("--model-dtype: bfloat16 is for mllm:FOLDER[:PROMPT] models (CaRe, E5-V); --encoder "
                            "'open_clip:ViT-B-32:openai' is loaded as its own code loads it")


def test_the_library_loaders_refuse_a_dtype_for_other_specs_before_loading():
    from vlr_plugins.errors import VideoEncoderError
    from vlr_plugins.specs import load_text_model, load_video_encoder

    with pytest.raises(UsageError, match="a model dtype .float16. is chosen for mllm: specs only"):
        load_text_model("no_such_module_here:model", dtype="float16")
    with pytest.raises(VideoEncoderError, match="this tower is loaded as it is stored"):
        load_video_encoder("vlr:absent.pth", dtype="float16")


def test_a_blip_spec_has_no_checkpoint_meta_and_a_checkpoint_is_checked(tmp_path):
    import torch

    from vlr_plugins.errors import DataFormatError

    assert text_encoder_meta("blip:Salesforce/blip-itm-base-coco") == {}  # nothing read, nothing downloaded
    arch = {"type": "BlipTextEncoder", "embed_dim": 8}
    good = tmp_path / "good.pth"
    torch.save({"meta": {"vlr_text_encoder": arch}, "state_dict": {"text_encoder.text_proj.weight": torch.ones(2)}},
               good)
    assert text_encoder_meta(good) == {"vlr_text_encoder": arch}
    torch.save({"meta": {}, "state_dict": {}}, tmp_path / "bare.pth")
    with pytest.raises(DataFormatError, match="meta.vlr_text_encoder"):
        text_encoder_meta(tmp_path / "bare.pth")


def test_caption_and_lens_models_are_folders_or_mllm_specs(tmp_path):
    from vlr_plugins.specs import mllm_model_folder

    assert mllm_model_folder("exports/care-7b") == ("exports/care-7b", None)
    assert mllm_model_folder("Qwen/Qwen2-VL-7B-Instruct") == ("Qwen/Qwen2-VL-7B-Instruct", None)
    assert mllm_model_folder("mllm:exports/care-7b:e5v") == ("exports/care-7b", "e5v")
    with pytest.raises(UsageError, match="names no model folder"):
        mllm_model_folder("mllm:")
