"""The global batch split over the processes of every MMEngine launcher: the config is built
before MMEngine starts its process group, so the count comes from what each launcher sets —
torchrun's ``WORLD_SIZE``, srun's ``SLURM_NTASKS``, Open MPI's ``OMPI_COMM_WORLD_SIZE`` (under
``--launcher slurm`` only ``SLURM_*`` is set before MMEngine's ``init_dist``, which once gave
every process the whole global batch)."""

from __future__ import annotations

import pytest

pytest.importorskip("mmengine")

from vlr_plugins.errors import ConfigError  # noqa: E402
from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config  # noqa: E402
from vlr_plugins.integrations.mmengine.config_parts import launcher_world_size  # noqa: E402
from vlr_plugins.recipe import load_recipe  # noqa: E402

_VARS = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE")


@pytest.fixture
def clean_env(monkeypatch):
    for name in _VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("launcher, env, expected", [
    ("pytorch", {"WORLD_SIZE": "2"}, 2),
    ("slurm", {"SLURM_NTASKS": "4"}, 4),
    ("slurm", {"SLURM_NTASKS": "4", "WORLD_SIZE": "4"}, 4),
    ("mpi", {"OMPI_COMM_WORLD_SIZE": "3"}, 3),
    ("none", {"SLURM_NTASKS": "8"}, 1),  # one process inside an 8-task allocation
    ("pytorch", {}, 1),
])
def test_each_launcher_counts_its_processes(clean_env, launcher, env, expected):
    for name, value in env.items():
        clean_env.setenv(name, value)
    assert launcher_world_size(launcher) == expected


@pytest.mark.parametrize("value", ["two", "0", "-1"])
def test_a_count_that_is_not_one_is_named(clean_env, value):
    clean_env.setenv("SLURM_NTASKS", value)
    with pytest.raises(ConfigError, match=rf"\$SLURM_NTASKS='{value}': expected the number of processes"):
        launcher_world_size("slurm")


@pytest.mark.parametrize("launcher, env", [("slurm", {"SLURM_NTASKS": "2"}), ("pytorch", {"WORLD_SIZE": "2"}),
                                           ("mpi", {"OMPI_COMM_WORLD_SIZE": "2"}), ("none", {})])
def test_the_recipe_batch_is_the_global_batch_under_every_launcher(clean_env, tmp_path, tiny_world,
                                                                   tiny_encoder_cfg, launcher, env):
    for name, value in env.items():
        clean_env.setenv(name, value)
    recipe = load_recipe("paragraph/c1", {
        "model": tiny_encoder_cfg,
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "num_workers": 0}})
    cfg = recipe_to_mmengine_config(recipe, str(tmp_path), launcher=launcher)
    processes = 2 if env else 1
    assert cfg["train_dataloader"]["batch_size"] * processes == 16
    assert cfg["launcher"] == launcher
