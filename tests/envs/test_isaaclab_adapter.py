"""omni_sfp.envs.isaaclab without Isaac Lab: registration from Gymnasium's registry and the launch's errors."""

from __future__ import annotations

import importlib.util

import gymnasium
import pytest
from gymnasium.envs.registration import EnvSpec

from omni_sfp import registry
from omni_sfp.envs import isaaclab


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_TASKS", dict(registry._TASKS))


def test_registers_the_isaac_ids_gymnasium_knows(monkeypatch, scratch_registry):
    # isaaclab_tasks registers its ids with gym.register(id="Isaac-...", entry_point=..., kwargs=...)
    monkeypatch.setitem(gymnasium.registry, "Isaac-Fake-Cartpole-v0", EnvSpec("Isaac-Fake-Cartpole-v0", "x:y"))
    assert "Isaac-Fake-Cartpole-v0" in isaaclab.registered_ids()
    assert not any(not i.startswith("Isaac-") for i in isaaclab.registered_ids())
    names = isaaclab.register_isaaclab_tasks()
    assert "Isaac-Fake-Cartpole-v0" in names
    spec = registry.get_task("Isaac-Fake-Cartpole-v0")
    assert spec.kind == "isaaclab" and spec.entry_point == "omni_sfp.envs.isaaclab:make_isaaclab_env"


def test_explicit_ids_must_be_isaac_ids(scratch_registry):
    assert isaaclab.register_isaaclab_tasks(ids=["Isaac-Ant-v0"]) == ["Isaac-Ant-v0"]
    assert "Isaac-Ant-v0" in registry.list_tasks("isaaclab")
    with pytest.raises(ValueError, match=r"'Ant-v5': Isaac Lab ids start with 'Isaac-'"):
        isaaclab.register_isaaclab_tasks(ids=["Ant-v5"])


def test_make_without_isaaclab_says_how_to_install():
    if importlib.util.find_spec("isaaclab") is not None:
        pytest.skip("Isaac Lab is installed here")
    with pytest.raises(isaaclab.IsaacLabError, match=r"needs Isaac Lab \(pip install isaaclab\[isaacsim\]\)"):
        isaaclab.make_isaaclab_env("Isaac-Ant-v0", num_envs=4, device="cpu", seed=0)
