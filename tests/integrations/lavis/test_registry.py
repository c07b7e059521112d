"""The plugin's entries in LAVIS' registry, and the guard against double registration."""

from __future__ import annotations

import pytest

pytest.importorskip("lavis", reason="LAVIS lives in its own environment (docs/lavis.md)")

import subprocess  # noqa: E402
import sys  # noqa: E402

from lavis.common.registry import registry  # noqa: E402
from lavis.models.base_model import BaseModel  # noqa: E402

import vlr_plugins.integrations.lavis as plugin  # noqa: E402
from vlr_plugins.integrations.lavis._registry import register  # noqa: E402

EXPECTED = {
    ("model", "blip_retrieval_textonly"): "BlipRetrievalTextOnly",
    ("task", "vlr_retrieval"): "VlrRetrievalTask",
    ("processor", "vlr_text"): "VlrTextProcessor",
    ("builder", "vlr_paragraph"): "VlrParagraphBuilder",
    ("builder", "vlr_retrieval"): "VlrRetrievalBuilder",
    **{("builder", f"vlr_{r}"): f"Vlr_{r}_Builder" for r in ("flickr30k", "coco_karpathy", "sharegpt4v", "docci")},
}
GETTERS = {"model": registry.get_model_class, "task": registry.get_task_class,
           "processor": registry.get_processor_class, "builder": registry.get_builder_class}


def test_every_piece_is_registered_with_its_shipped_default_config():
    import os

    for (kind, name), cls_name in EXPECTED.items():
        cls = GETTERS[kind](name)
        assert cls is not None and cls.__name__ == cls_name and cls.__module__.startswith("vlr_plugins."), name
        if kind == "builder":
            assert os.path.isfile(cls.default_config_path()), name
    for path in plugin.BlipRetrievalTextOnly.PRETRAINED_MODEL_CONFIG_DICT.values():
        assert os.path.isfile(path)


def test_importing_again_is_harmless_and_keeps_the_newest_definitions():
    code = """
import importlib
from lavis.common.registry import registry
import vlr_plugins.integrations.lavis as plugin
for mod in (plugin.model, plugin.processors, plugin.datasets, plugin.task):
    importlib.reload(mod)
assert registry.get_model_class("blip_retrieval_textonly") is plugin.model.BlipRetrievalTextOnly
assert registry.get_task_class("vlr_retrieval") is plugin.task.VlrRetrievalTask
importlib.reload(plugin)
print("ok")
"""
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_a_name_held_by_another_class_is_refused_naming_both():
    class Impostor(BaseModel):
        pass

    with pytest.raises(KeyError, match=r"blip_retrieval_textonly.*vlr_plugins\.integrations\.lavis\.model.*Impostor"):
        register("model", "blip_retrieval_textonly")(Impostor)
    # LAVIS' own decorator refuses any second registration, which is why the guard exists
    with pytest.raises(KeyError, match="already registered"):
        registry.register_model("blip_retrieval_textonly")(plugin.model.BlipRetrievalTextOnly)


def test_vlr_text_keeps_paragraphs_whole_where_blip_caption_cuts_them():
    text = " ".join(f"word{i}." for i in range(80))
    vlr_text = registry.get_processor_class("vlr_text").from_config(None)
    assert vlr_text(text) == text
    blip = registry.get_processor_class("blip_caption").from_config(None)
    assert len(blip(text).split()) == 50
    from omegaconf import OmegaConf

    clean = registry.get_processor_class("vlr_text").from_config(OmegaConf.create({"blip_clean": True,
                                                                                    "max_words": 60}))
    assert clean("A  Dog.\nRuns!") == "a dog runs" and len(clean(text).split()) == 60
