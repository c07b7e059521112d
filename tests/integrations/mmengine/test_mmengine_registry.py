"""Names resolve the MMEngine way: default_scope + custom_imports, nothing imported by hand."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mmengine")


def test_config_names_resolve_without_importing_the_plugin():
    # a fresh interpreter: only mmengine's own machinery may import vlr_plugins
    code = textwrap.dedent("""
        import sys
        from mmengine.config import Config
        from mmengine.registry import DefaultScope, MODELS, METRICS, DATASETS, FUNCTIONS, HOOKS, init_default_scope
        from mmengine.utils import import_modules_from_strings
        cfg = Config(dict(default_scope='vlr_plugins',
                          custom_imports=dict(imports=['vlr_plugins.integrations.mmengine'])))
        import_modules_from_strings(**cfg.custom_imports)
        init_default_scope(cfg.default_scope)
        model = MODELS.build(dict(type='TextOnlyRetrievalModel',
            text_encoder=dict(type='BlipTextEncoder', config=dict(vocab_size=30, hidden_size=16,
                num_hidden_layers=1, num_attention_heads=2, intermediate_size=32), embed_dim=8),
            loss=dict(type='MultiPositiveInfoNCELoss', temperature=0.05)))
        metric = METRICS.build(dict(type='RetrievalRecallMetric', ks=(1, 2)))
        hook = HOOKS.build(dict(type='WeightsOnlyCheckpointHook'))
        collate = FUNCTIONS.get('vlr_plugins.vlr_text_views_collate')
        print(type(model).__name__, type(model.loss_fn).__name__, float(model.loss_fn.temperature),
              type(metric).__name__, metric.ks, type(hook).__name__, collate.__name__)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["TextOnlyRetrievalModel", "MultiPositiveInfoNCELoss", "0.05",
                                  "RetrievalRecallMetric", "(1,", "2)", "WeightsOnlyCheckpointHook",
                                  "vlr_text_views_collate"]


def test_core_import_stays_free_of_ecosystems():
    code = ("import sys, vlr_plugins, vlr_plugins.losses, vlr_plugins.recipe, vlr_plugins.data, "
            "vlr_plugins.eval, vlr_plugins.text, vlr_plugins.cli;"
            "bad = sorted({m.split('.')[0] for m in sys.modules} & "
            "{'mmengine', 'transformers', 'open_clip', 'lavis', 'safetensors', 'pyarrow', 'matplotlib'});"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_core_losses_and_encoders_are_registered_as_the_same_objects():
    from vlr_plugins.integrations.mmengine.registry import MODELS
    from vlr_plugins.registry import LOSSES
    from vlr_plugins.registry import MODELS as CORE_MODELS

    for name in LOSSES.names():
        assert MODELS.get(name) is LOSSES.get(name)
    assert MODELS.get("BlipTextEncoder") is CORE_MODELS.get("BlipTextEncoder")
    from vlr_plugins.integrations.mmengine import TextOnlyRetrievalModel

    model = TextOnlyRetrievalModel(
        text_encoder=dict(type="BlipTextEncoder", config=dict(vocab_size=30, hidden_size=16, num_hidden_layers=1,
                                                              num_attention_heads=2, intermediate_size=32),
                          embed_dim=8),
        loss=dict(type="InfoNCELoss"))
    import torch

    ids = torch.randint(5, 30, (2, 6))
    with pytest.raises(ValueError, match="image embeddings are 4-d but the text encoder outputs 8-d"):
        model(torch.randn(2, 4), ids, torch.ones_like(ids), torch.arange(2), mode="loss")
