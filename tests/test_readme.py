"""The README stays true: its example model runs in skrl PPO with the cache hitting, and its config table
lists every key the configuration defines."""

import re
import runpy
from pathlib import Path

import torch
from omegaconf import OmegaConf
from ppo_driver import BOX_ACT, BOX_OBS, make_agent, run

from omni_sfp.run.compose import config_dir, load_config

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_readme_example_model_is_served_by_the_cache(tmp_path):
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", README, re.DOTALL) if "class MyActorCritic" in b]
    example = tmp_path / "readme_example.py"
    example.write_text(block)
    model_class = runpy.run_path(str(example))["MyActorCritic"]
    torch.manual_seed(0)
    model = model_class(BOX_OBS, BOX_ACT, "cpu")
    run(make_agent({"policy": model, "value": model}), steps=8)
    assert model.trunk.stats.hits >= 8


def _leaf_keys(node, prefix=""):
    for key, value in node.items():
        if OmegaConf.is_dict(value):
            yield from _leaf_keys(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def test_every_config_key_is_in_the_readme_table():
    cfg = load_config([])
    documented = set(re.findall(r"^\| `([^`]+)` \|", README, re.MULTILINE))
    keys = {k for k in _leaf_keys(cfg) if not k.startswith("task.") and k != "task_name"}
    assert keys - documented == set()
    assert "task" in documented and (config_dir() / "task").is_dir()
