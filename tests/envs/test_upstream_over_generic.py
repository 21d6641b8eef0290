"""OmniIsaacGymEnvs and Isaac Lab tasks route to cfg/train/GenericPPO.yaml, then take their upstream settings over
it (omni_sfp/envs/upstream.py): every key the generic file sets must come from the task's own library, never from
GenericPPO's measurement on Gymnasium tasks (issue 38)."""

from __future__ import annotations

import pytest
import yaml

from omni_sfp.config.schema import config_dir
from omni_sfp.envs import registry, upstream
from omni_sfp.run.compose import load_config


def generic_keys() -> dict[str, object]:
    """``train.<key>`` -> value for each key GenericPPO.yaml sets."""
    own = yaml.safe_load((config_dir() / "train" / "GenericPPO.yaml").read_text())
    own.pop("defaults")

    def leaves(node, prefix):
        for key, value in node.items():
            if isinstance(value, dict):
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    return dict(leaves(own, "train."))


def value(cfg, key: str):
    node = cfg
    for part in key.split("."):
        node = node[part]
    return node


def test_oige_tasks_take_every_generic_key_from_their_rlgames_file(oige_double):
    cfg = load_config(["task=Ant"])  # OmniIsaacGymEnvs' AntPPO.yaml (the double holds OIGE 4.0.0's file)
    for key, generic in generic_keys().items():
        assert key in cfg.task.upstream, f"{key}={generic} comes from GenericPPO.yaml, not from AntPPO.yaml"
    assert cfg.train.ppo.rollouts == 16 and cfg.train.ppo.learning_epochs == 4  # horizon_length, mini_epochs
    assert cfg.train.ppo.learning_rate_schedule == "kl_adaptive"  # lr_schedule: adaptive


# Isaac Lab 3.0.0's isaaclab_tasks/core/cartpole/agents/skrl_direct_ppo_cfg.yaml, the keys that matter here; the
# Isaac Lab tier (tests/isaaclab_tier) reads the real file
ISAACLAB_CARTPOLE = {
    "models": {
        "separate": False,
        "policy": {
            "class": "GaussianMixin",
            "network": [{"name": "net", "input": "OBSERVATIONS", "layers": [32, 32], "activations": "elu"}],
        },
        "value": {
            "class": "DeterministicMixin",
            "network": [{"name": "net", "input": "OBSERVATIONS", "layers": [32, 32], "activations": "elu"}],
        },
    },
    "agent": {
        "class": "PPO",
        "rollouts": 32,
        "learning_epochs": 8,
        "mini_batches": 8,
        "learning_rate": 5e-4,
        "learning_rate_scheduler": "KLAdaptiveLR",
        "learning_rate_scheduler_kwargs": {"kl_threshold": 0.008},
        "value_clip": 0.2,
    },
    "trainer": {"timesteps": 4800},
}


@pytest.mark.parametrize(
    "agent",
    [
        ISAACLAB_CARTPOLE["agent"],
        {"class": "PPO", "learning_rate": 1e-3},  # a config that leaves the generic keys out: skrl's defaults
    ],
    ids=["cartpole", "sparse"],
)
def test_isaaclab_tasks_take_every_generic_key_from_their_skrl_config(monkeypatch, scratch_registry, agent):
    runner_cfg = {**ISAACLAB_CARTPOLE, "agent": agent}
    registry.register_task(registry.TaskSpec("Isaac-Stand-In-Direct", "isaaclab", "x:y", "an Isaac Lab id"))
    monkeypatch.setattr(
        upstream, "settings_for", lambda task, num_envs=None, overrides=None: upstream.skrl_settings(runner_cfg, "c")
    )
    cfg = load_config(["task=Isaac-Stand-In-Direct"])
    for key, generic in generic_keys().items():
        assert key in cfg.task.upstream, f"{key}={generic} comes from GenericPPO.yaml, not from the skrl config"
    from skrl.agents.torch.ppo import PPO_CFG

    skrl = PPO_CFG()
    ppo = cfg.train.ppo
    expected = (agent.get("rollouts", skrl.rollouts), agent.get("learning_epochs", skrl.learning_epochs))
    assert (ppo.rollouts, ppo.learning_epochs) == expected
    scheduled = "learning_rate_scheduler" in agent
    assert ppo.learning_rate_schedule == ("kl_adaptive" if scheduled else "fixed")
    if scheduled:
        assert (
            ppo.max_learning_rate == 1e-2
        )  # KLAdaptiveLR's default bound: the exposure docs/generic-defaults.md measures
    assert cfg.train.max_iterations == 4800 // expected[0]
