"""omni_sfp.envs.isaaclab where Isaac Lab is not installed (the core suite's Python 3.11): lookups fail early with
one line, registration, device strings. The real Isaac Lab 3.0.0 is tested in tests/isaaclab_tier/."""

from __future__ import annotations

import gymnasium
import pytest
import torch
from gymnasium.envs.registration import EnvSpec

from omni_sfp.envs import isaaclab, registry
from omni_sfp.run.compose import ConfigError, load_config

pytestmark = pytest.mark.skipif(isaaclab.version() is not None, reason="Isaac Lab is installed here")


def test_an_isaac_id_without_isaac_lab_is_refused_at_config_time_with_how_to_install(scratch_registry):
    for name in ("Isaac-Cartpole-Direct", "IsaacContrib-Velocity-Flat-AnymalC"):
        with pytest.raises(registry.UnknownTaskError, match=r"Isaac Lab id and Isaac Lab is not installed here"):
            registry.get_task(name)
    with pytest.raises(ConfigError, match=r"pip install isaaclab==3.0.0 skrl==2.1.1"):
        load_config(["task=Isaac-Cartpole-Direct"])


def test_make_without_isaaclab_says_how_to_install():
    with pytest.raises(isaaclab.IsaacLabError, match=r"needs Isaac Lab \(Isaac Lab 3 needs Python 3.12: pip install"):
        isaaclab.make_isaaclab_env("Isaac-Ant", num_envs=4, device="cpu", seed=0)


def test_a_folder_named_isaaclab_is_not_isaac_lab(tmp_path, monkeypatch):
    (tmp_path / "isaaclab").mkdir()  # e.g. a tests/isaaclab folder on sys.path: a namespace package
    monkeypatch.syspath_prepend(str(tmp_path))
    assert isaaclab.version() is None


def test_registers_the_isaac_ids_gymnasium_knows(monkeypatch, scratch_registry):
    # isaaclab_tasks registers its ids with gym.register(id="Isaac-...", entry_point=..., kwargs=...)
    monkeypatch.setitem(gymnasium.registry, "Isaac-Fake-Cartpole", EnvSpec("Isaac-Fake-Cartpole", "x:y"))
    monkeypatch.setitem(gymnasium.registry, "IsaacContrib-Fake", EnvSpec("IsaacContrib-Fake", "x:y"))
    assert {"Isaac-Fake-Cartpole", "IsaacContrib-Fake"} <= set(isaaclab.registered_ids())
    names = isaaclab.register_isaaclab_tasks()
    assert {"Isaac-Fake-Cartpole", "IsaacContrib-Fake"} <= set(names)
    spec = registry.get_task("IsaacContrib-Fake")
    assert spec.kind == "isaaclab" and spec.entry_point == "omni_sfp.envs.isaaclab:make_isaaclab_env"


def test_explicit_ids_must_be_isaac_ids(scratch_registry):
    assert isaaclab.register_isaaclab_tasks(ids=["Isaac-Ant"]) == ["Isaac-Ant"]
    assert "Isaac-Ant" in registry.list_tasks("isaaclab")
    with pytest.raises(ValueError, match=r"'Ant-v5': Isaac Lab ids start with 'Isaac-' or 'IsaacContrib-'"):
        isaaclab.register_isaaclab_tasks(ids=["Ant-v5"])


def test_other_names_are_not_the_resolvers():
    assert isaaclab.resolve("Cartpole") is None and isaaclab.resolve("gym:Pendulum-v1") is None


@pytest.mark.parametrize(
    "device, expected",
    [
        (torch.device("cpu"), "cpu"),
        (torch.device("cuda", 1), "cuda:1"),
        ("cuda", "cuda:0"),
        ("cuda:2", "cuda:2"),
        ("cpu", "cpu"),
    ],
)
def test_isaac_lab_gets_a_string_device(device, expected):
    # SimulationContext does `"cuda" in cfg.device`: a torch.device raised TypeError at gym.make
    assert isaaclab.device_string(device) == expected and isinstance(isaaclab.device_string(device), str)
