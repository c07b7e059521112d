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


# --- every registered name, through the registries alone -----------------------------------

_PACKAGE = "vlr_plugins.integrations.mmengine"
_REGISTRIES = ("MODELS", "DATASETS", "FUNCTIONS", "HOOKS", "METRICS", "MODEL_WRAPPERS", "DATA_SAMPLERS")


def _registrations() -> tuple[dict[str, dict[str, str]], set[str]]:
    """Read from the integration's source, not from what an import registered: registry ->
    {name: module} for every ``@R.register_module(...)`` and ``R.register_module(name=...)``,
    and the modules whose names are computed (not constants)."""
    import ast
    from pathlib import Path

    import vlr_plugins

    found: dict[str, dict[str, str]] = {r: {} for r in _REGISTRIES}
    computed: set[str] = set()
    for path in sorted((Path(vlr_plugins.__file__).parent / "integrations" / "mmengine").glob("*.py")):
        module = f"{_PACKAGE}.{path.stem}"
        tree = ast.parse(path.read_text("utf-8"))
        decorated = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                for d in node.decorator_list:
                    decorated[id(d)] = node.name
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "register_module" and isinstance(node.func.value, ast.Name)):
                continue
            registry = node.func.value.id
            assert registry in found, f"{module}: registers into {registry}, which this test does not know"
            name = next((k.value for k in node.keywords if k.arg == "name"), None)
            if name is None:
                name = decorated.get(id(node))
                if name is None:  # R.register_module(module=X) would name it X.__name__: not read here
                    computed.add(module)
                    continue
            elif isinstance(name, ast.Constant):
                name = name.value
            else:
                computed.add(module)
                continue
            found[registry][name] = module
    return found, computed


def test_the_source_scan_finds_the_registrations():
    found, computed = _registrations()
    assert found["MODELS"]["EOLContrastiveModel"] == f"{_PACKAGE}.mllm_model"
    assert found["MODELS"]["CaptionSFTModel"] == f"{_PACKAGE}.mllm_sft_model"
    assert found["HOOKS"]["ExportPretrainedHook"] == f"{_PACKAGE}.pretrained_export"
    assert found["FUNCTIONS"]["vlr_caption_sft_collate"] == f"{_PACKAGE}.caption_sft_dataset"
    assert found["DATASETS"]["EOLTripletsDataset"] == f"{_PACKAGE}.nli_dataset"
    assert found["METRICS"] == {"RetrievalRecallMetric": f"{_PACKAGE}.metric"}
    assert found["MODEL_WRAPPERS"] == {"CpuCapableDistributedDataParallel": f"{_PACKAGE}.cpu_distributed"}
    assert found["DATA_SAMPLERS"] == {"MinedHardNegativeBatchSampler": f"{_PACKAGE}.hard_negative_sampler",
                                      "GlobalBatchSampler": f"{_PACKAGE}.global_batch_sampler"}
    assert computed == {f"{_PACKAGE}.model"}, "only the core's losses and encoders are registered by a loop"


_FIND_THROUGH_LOCATIONS = """
import json, sys
import vlr_plugins.integrations.mmengine.registry as registries
loaded = sorted(m for m in sys.modules if m.startswith("vlr_plugins.integrations.mmengine."))
registry_name, names = sys.argv[1], json.loads(sys.argv[2])
if registry_name == "MODELS":  # the core's losses and encoders, copied in by the integration
    from vlr_plugins import registry as core
    names += [e.name for e in (*core.LOSSES.entries(), *core.MODELS.entries())]
registry = getattr(registries, registry_name)
found = {n: registry.get(n) is not None and n in registry.module_dict for n in names}
if registry_name == "MODELS":
    assert all(registry.get(e.name) is e.obj for e in (*core.LOSSES.entries(), *core.MODELS.entries()))
print(json.dumps({"loaded": loaded, "found": found}))
"""


def test_every_registered_name_is_found_through_its_registrys_locations():
    """A fresh interpreter per registry, holding only the registries: each name registered in
    the integration's source is found by ``REGISTRY.get(name)``, which imports the modules of
    that registry's ``locations=`` and no other (so no registry lives off another's imports)."""
    import json

    found, _ = _registrations()
    runs = {r: subprocess.Popen([sys.executable, "-c", _FIND_THROUGH_LOCATIONS, r, json.dumps(sorted(found[r]))],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for r in _REGISTRIES}
    for registry, run in runs.items():
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, f"{registry}: {err}"
        report = json.loads(out.strip().splitlines()[-1])
        assert report["loaded"] == [f"{_PACKAGE}.registry"], "importing the registries imports nothing else"
        missing = sorted(n for n, ok in report["found"].items() if not ok)
        assert not missing, f"{registry}: not found through its locations: {missing}"
        assert len(report["found"]) >= len(found[registry]) > 0


_RESOLVE_AS_CONFIGS_DO = """
import json, sys
import mmengine.registry as roots
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.utils import import_modules_from_strings
cfg = Config(dict(default_scope="vlr_plugins", custom_imports=dict(imports=["vlr_plugins.integrations.mmengine"])))
import_modules_from_strings(**cfg.custom_imports)
init_default_scope(cfg.default_scope)
import vlr_plugins.integrations.mmengine.registry as registries
bad = []
for registry_name, names in json.loads(sys.argv[1]).items():
    root, ours = getattr(roots, registry_name), getattr(registries, registry_name)
    for name in names:
        with root.switch_scope_and_registry(None) as scoped:  # what build_from_cfg does with type=name
            built = scoped.get(name)
        if built is None or built is not ours.module_dict.get(name) or root.get(f"vlr_plugins.{name}") is not built:
            bad.append(f"{registry_name}.{name}")
print(json.dumps(bad))
"""


def test_configs_with_custom_imports_and_the_default_scope_resolve_every_registered_name():
    import json

    found, _ = _registrations()
    out = subprocess.run([sys.executable, "-c", _RESOLVE_AS_CONFIGS_DO,
                          json.dumps({r: sorted(names) for r, names in found.items()})],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
