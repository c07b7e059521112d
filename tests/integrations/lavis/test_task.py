"""vlr_retrieval: the same recall as the package's engine and as LAVIS' own evaluation."""

from __future__ import annotations

import pytest

pytest.importorskip("lavis", reason="LAVIS lives in its own environment (docs/lavis.md)")

import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import yaml  # noqa: E402
from lavis.common.registry import registry  # noqa: E402
from lavis.tasks.retrieval import RetrievalTask  # noqa: E402

import vlr_plugins.integrations.lavis  # noqa: E402,F401
from vlr_plugins.eval.retrieval import retrieval_recall  # noqa: E402
from vlr_plugins.integrations.lavis import VlrRetrievalTask  # noqa: E402
from vlr_plugins.integrations.lavis.launcher import prepare_config  # noqa: E402
from vlr_plugins.recipe import RecipeError, list_recipes  # noqa: E402


@pytest.fixture
def output_dir(tmp_path):
    """LAVIS' _report_metrics appends to <output_dir>/evaluate.txt (a registry path)."""
    paths = registry.mapping["paths"]
    old = paths.get("output_dir")
    paths["output_dir"] = str(tmp_path)
    yield tmp_path
    if old is None:
        paths.pop("output_dir", None)
    else:
        paths["output_dir"] = old


def _lavis_report(items: torch.Tensor, texts: torch.Tensor, owner: torch.Tensor) -> dict:
    s = (items @ texts.T).numpy()
    txt2img = {t: int(o) for t, o in enumerate(owner.tolist())}
    img2txt = {i: [t for t, o in txt2img.items() if o == i] for i in range(items.shape[0])}
    return RetrievalTask._report_metrics(s, s.T, txt2img, img2txt)


def _task(**run):
    from omegaconf import OmegaConf

    return VlrRetrievalTask(OmegaConf.create({"k_test": 256, "batch_size_eval": 8, "progress": False, **run}))


def test_metrics_equal_the_engine_and_lavis_report_metrics(output_dir):
    g = torch.Generator().manual_seed(3)
    # normalised, as the model's embeddings are (the engine ranks by cosine similarity)
    items = torch.nn.functional.normalize(torch.randn(9, 8, generator=g), dim=-1)
    texts = torch.nn.functional.normalize(torch.randn(23, 8, generator=g), dim=-1)
    owner = torch.cat([torch.arange(9), torch.randint(0, 9, (14,), generator=g)])  # 1-5 texts per image
    engine = retrieval_recall(items, texts, owner)
    ours = _task().metrics(engine)
    lavis = _lavis_report(items, texts, owner)
    assert ours.keys() == lavis.keys()
    for k in lavis:
        assert ours[k] == pytest.approx(lavis[k], abs=1e-4), k
    assert ours["txt_r1"] == engine["i2t_r1"] and ours["img_r5"] == engine["t2i_r5"]


def _bench(ann: str, store: str | None, budget: int = 128, reader: str = "retrieval_jsonl", **extra) -> dict:
    return {"reader": reader, "max_tokens": budget, **extra,
            "build_info": {"annotations": {"test": {"storage": ann}},
                           "item_embeddings": {"storage": store}}}


def _build(write_run_config, tiny_world, tiny_model_options, datasets, **run):
    import lavis.tasks as tasks

    cfg = prepare_config(write_run_config(datasets, **run), tiny_model_options,
                         train=tiny_world["train"], image_embeddings=tiny_world["image_embeddings"])
    task = tasks.setup_task(cfg)
    return task, task.build_datasets(cfg), task.build_model(cfg)


def test_evaluation_equals_lavis_report_metrics_on_the_models_scores(write_run_config, tmp_path, tiny_world, tiny_model_options,
                                                                     output_dir):
    from torch.utils.data import DataLoader

    from vlr_plugins.data.embedding_store import EmbeddingStore
    from vlr_plugins.data.retrieval_set import read_retrieval_jsonl

    task, datasets, model = _build(write_run_config, tiny_world, tiny_model_options, {
        "vlr_retrieval": _bench(tiny_world["eval_long"], tiny_world["image_embeddings"])})
    suite = datasets["vlr_benchmarks"]["test"]
    result = task.evaluation(model, DataLoader(suite, batch_size=8, collate_fn=suite.collater))

    rs = read_retrieval_jsonl(tiny_world["eval_long"])
    model.eval()
    with torch.no_grad():
        texts = model.encode_text(list(rs.texts), 128)
    items = EmbeddingStore(tiny_world["image_embeddings"]).get(list(rs.item_ids))
    expected = _lavis_report(items, texts, rs.text_owner)
    for k in expected:
        assert result[k] == pytest.approx(expected[k], abs=1e-4), k
    assert json.loads((output_dir / "evaluate.txt").read_text().splitlines()[-1])["r_mean"] == result["r_mean"]


def _as_karpathy_flickr(jsonl: str, out) -> str:
    """The world's {id, texts} split in Karpathy's dataset_flickr30k.json format."""
    images = [{"filename": f"{r['id']}.jpg", "split": "test", "sentences": [{"raw": t} for t in r["texts"]]}
              for r in map(json.loads, open(jsonl).read().splitlines())]
    out.write_text(json.dumps({"dataset": "flickr30k", "images": images}))
    return str(out)


def test_several_benchmarks_share_a_split_as_one_suite(write_run_config, tmp_path, tiny_world, tiny_model_options, output_dir):
    flickr = _as_karpathy_flickr(tiny_world["eval_short"], tmp_path / "dataset_flickr30k.json")
    task, datasets, model = _build(write_run_config, tiny_world, tiny_model_options, {
        "vlr_retrieval": _bench(tiny_world["eval_long"], tiny_world["image_embeddings"], name="long"),
        "vlr_flickr30k": _bench(flickr, tiny_world["image_embeddings"], budget=77, reader="flickr30k"),
    })
    suite = datasets["vlr_benchmarks"]["test"]
    assert {b.name: b.max_tokens for b in suite.benchmarks} == {"long": 128, "flickr30k": 77}
    result = task.evaluate_suite(model, suite)
    for name in ("long", "flickr30k"):
        single = task.evaluate_suite(model, type(suite)([b for b in suite.benchmarks if b.name == name]))
        assert {k.split("/", 1)[1]: v for k, v in result.items() if k.startswith(name + "/")} == single
    assert result["agg_metrics"] == pytest.approx((result["long/agg_metrics"] + result["flickr30k/agg_metrics"]) / 2)


def _flickr_with_images(tmp_path, n: int) -> tuple[str, str]:
    from PIL import Image

    root = tmp_path / "images"
    root.mkdir()
    g = torch.Generator().manual_seed(0)
    words = ["red", "blue", "green", "dog", "car", "boat", "tree", "house"]
    images = []
    for i in range(n):
        pixels = (torch.rand(32, 32, 3, generator=g) * 255).to(torch.uint8).numpy()
        Image.fromarray(pixels).save(root / f"{i}.png")
        images.append({"filename": f"{i}.png", "split": "test",
                       "sentences": [{"raw": f"a {words[i % 8]} {words[(3 * i + 1) % 8]} near a {words[(i + 5) % 8]}"}]})
    ann = tmp_path / "dataset_flickr30k.json"
    ann.write_text(json.dumps({"dataset": "flickr30k", "images": images}))
    return str(ann), str(root)


def test_itm_reranking_equals_lavis_compute_sim_matrix(write_run_config, tmp_path, tiny_world, tiny_model_options, output_dir):
    """With images, the task encodes them with the model's ViT and re-scores the top k_test
    with ITM + similarity; LAVIS' own compute_sim_matrix + _report_metrics agree."""
    from lavis.models.albef_models import compute_sim_matrix
    from torch.utils.data import DataLoader

    n = 8
    ann, root = _flickr_with_images(tmp_path, n)
    bench = _bench(ann, None, budget=35, reader="flickr30k")
    bench["build_info"]["images"] = {"storage": root}
    bench["build_info"]["annotations"]["test"]["args"] = {"split": "test"}
    bench["vis_processor"] = {"eval": {"name": "blip_image_eval", "image_size": 32}}
    task, datasets, model = _build(write_run_config, tiny_world, tiny_model_options, {"vlr_flickr30k": bench},
                                   rerank=True, k_test=n)
    suite = datasets["vlr_benchmarks"]["test"]
    model.eval()
    scored = []
    hook = model.itm_head.register_forward_hook(lambda m, args, out: scored.append(out.shape[0]))
    try:
        ours = task.evaluation(model, DataLoader(suite, batch_size=4, collate_fn=suite.collater))
    finally:
        hook.remove()
    assert sum(scored) == 2 * n * n  # every query's top k_test (= all) in both directions

    flickr = suite.benchmarks[0]
    with torch.no_grad():
        s_i2t, s_t2i = compute_sim_matrix(model, DataLoader(flickr, batch_size=4, collate_fn=flickr.collater),
                                          k_test=n)
    lavis = RetrievalTask._report_metrics(s_i2t, s_t2i, flickr.txt2img, flickr.img2txt)
    for k in lavis:
        assert ours[k] == pytest.approx(lavis[k], abs=1e-4), k


def test_missing_files_and_loss_view_mismatch_are_named(write_run_config, tmp_path, tiny_world, tiny_model_options):
    import lavis.tasks as tasks

    stored_only = write_run_config({
        "vlr_retrieval": _bench(tiny_world["eval_long"], tiny_world["image_embeddings"])}, rerank=True)
    cfg = prepare_config(stored_only, tiny_model_options, train=tiny_world["train"],
                         image_embeddings=tiny_world["image_embeddings"])
    with pytest.raises(ValueError, match="run.rerank needs the images of retrieval_jsonl"):
        tasks.setup_task(cfg).build_datasets(cfg)  # at build time, not after training

    path = write_run_config()
    cfg = prepare_config(path, tiny_model_options, image_embeddings=tiny_world["image_embeddings"])
    with pytest.raises(RecipeError, match=r"datasets\.vlr_paragraph\.build_info\.annotations\.train\.storage"):
        tasks.setup_task(cfg).build_datasets(cfg)
    cfg = prepare_config(path, [*tiny_model_options, "model.loss.type=InfoNCELoss"], train=tiny_world["train"],
                         image_embeddings=tiny_world["image_embeddings"])
    with pytest.raises(RecipeError, match=r"datasets\.vlr_paragraph\.text_views\.positives: InfoNCELoss "
                                          r"expects exactly one positive"):
        tasks.setup_task(cfg).build_datasets(cfg)


def test_launcher_resolves_shipped_configs_and_refuses_cpu_clearly(tmp_path, tiny_world):
    cfg = prepare_config("lavis/c5", [], train="rel/train.jsonl", image_embeddings="rel/store")
    ann = cfg.datasets_cfg.vlr_paragraph.build_info
    assert ann.annotations.train.storage == str((tmp_path.cwd() / "rel/train.jsonl").resolve())
    assert cfg.run_cfg.output_dir.startswith("/") and cfg.run_cfg.output_dir.endswith("output/vlr/paragraph/c5")
    assert cfg.model_cfg.arch == "blip_retrieval_textonly" and cfg.model_cfg.loss.type == "MultiPositiveInfoNCELoss"
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for CPU-only machines")
    proc = subprocess.run([sys.executable, "-m", "vlr_plugins.cli", "lavis-train", "--cfg-path", "lavis/c5",
                           "--train", tiny_world["train"], "--image-embeddings", tiny_world["image_embeddings"]],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "needs CUDA" in proc.stderr and "torch.cuda.Stream" in proc.stderr


def test_eval_mode_drops_unset_training_data_and_needs_test_splits(write_run_config, tmp_path, tiny_world, tiny_model_options):
    import lavis.tasks as tasks

    from vlr_plugins.errors import UserError

    with pytest.raises(UserError, match="test_splits is empty"):
        prepare_config("lavis/c5", [], evaluate=True)
    path = write_run_config({
        "vlr_retrieval": _bench(tiny_world["eval_long"], tiny_world["image_embeddings"])})
    cfg = prepare_config(path, tiny_model_options, evaluate=True)  # no --train: nothing to train on
    assert "vlr_paragraph" not in cfg.datasets_cfg and cfg.run_cfg.evaluate is True
    task = tasks.setup_task(cfg)
    assert set(task.build_datasets(cfg)) == {"vlr_benchmarks"}


@pytest.mark.parametrize("edit, key", [
    (lambda c: c["model"].update(arch="blip_retrieval_txtonly"), "model.arch"),
    (lambda c: c["datasets"].update(vlr_paragrap=c["datasets"].pop("vlr_paragraph")), "datasets.vlr_paragrap"),
    (lambda c: c["run"].update(task="vlr_retrival"), "run.task"),
    (lambda c: c.pop("run"), "run"),
])
def test_misspelt_names_in_a_run_config_are_named(tmp_path, edit, key):
    from vlr_plugins.errors import UserError

    cfg = yaml.safe_load(list_recipes()["lavis/c5"].read_text())
    edit(cfg)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(UserError, match=rf"bad\.yaml: {key}: "):
        prepare_config(str(path))
