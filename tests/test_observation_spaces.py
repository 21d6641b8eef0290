"""Dict, Tuple, Discrete and MultiDiscrete observations with skrl's semantics: flattened in memory
(``flatten_tensorized_space``), rebuilt for the network (``unflatten_tensorized_space``), one-hot codes for discrete
parts; our default network by space for a Gymnasium id; the normaliser on the flat parts only; the cache keyed on the
flat tensor; export, evaluation and video through the CLI."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces
from skrl.utils.spaces.torch import flatten_tensorized_space, tensorize_space

from omni_sfp.ppo.scaler import StandardScaler, flat_parts_of
from omni_sfp.run.compose import load_config
from omni_sfp.run.runner import Runner, observation_normalization
from omni_sfp.sfp import models as sfp_models
from omni_sfp.sfp import network

TASK = "gym:OmniSfpTests/ShowTheTarget-v0"
SHORT = ["num_envs=16", "train.ppo.rollouts=16", "train.ppo.mini_batches=2", "train.ppo.learning_epochs=2"]
TINY = ["num_envs=4", "train.ppo.rollouts=8", "train.ppo.mini_batches=2", "train.ppo.learning_epochs=1"]


class ShowTheTarget(gymnasium.Env):
    """Reward 1 for each sub-action of a ``MultiDiscrete([3, 3])`` action equal to its target, which the observation
    shows in the form ``observation`` names; 8 steps an episode. Random play earns 0.5 a step, perfect play 2."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, observation: str = "dict", render_mode: str | None = None) -> None:
        self.form, self.render_mode = observation, render_mode
        self.action_space = spaces.MultiDiscrete([3, 3])
        code = spaces.Box(0.0, 1.0, (3,), dtype=np.float32)
        self.observation_space = {
            "dict": spaces.Dict({"second": code, "first": code}),  # keys out of order: skrl sorts them
            "tuple": spaces.Tuple((code, code)),
            "discrete": spaces.Discrete(9),
            "multidiscrete": spaces.MultiDiscrete([3, 3]),
            "dict_image": spaces.Dict(
                {
                    "first": spaces.Box(-10.0, 10.0, (3,), dtype=np.float32),
                    "picture": spaces.Box(0, 255, (12, 12, 1), np.uint8),
                }
            ),
            "dict_discrete": spaces.Dict({"first": spaces.Discrete(3), "second": code}),
        }[observation]

    def _observation(self):
        first, second = self.target
        one_hot = np.eye(3, dtype=np.float32)
        if self.form == "dict":
            return {"first": one_hot[first], "second": one_hot[second]}
        if self.form == "tuple":
            return (one_hot[first], one_hot[second])
        if self.form == "discrete":
            return int(first * 3 + second)
        if self.form == "multidiscrete":
            return np.array([first, second])
        if self.form == "dict_discrete":
            return {"first": int(first), "second": one_hot[second]}
        picture = np.zeros((12, 12, 1), dtype=np.uint8)
        picture[:4, 4 * second : 4 * second + 4, 0] = 255
        return {"first": one_hot[first] * 8 - 4, "picture": picture}  # far from unit scale: the normaliser's part

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps, self.target = 0, self.np_random.integers(0, 3, size=2)
        return self._observation(), {}

    def step(self, action):
        reward = float(np.sum(np.asarray(action) == self.target))
        self.steps += 1
        self.target = self.np_random.integers(0, 3, size=2)
        return self._observation(), reward, False, self.steps >= 8, {}

    def render(self):
        frame = np.zeros((24, 24, 3), dtype=np.uint8)
        frame[:8, 8 * self.target[0] : 8 * self.target[0] + 8] = 255
        return frame


gymnasium.register("OmniSfpTests/ShowTheTarget-v0", entry_point=ShowTheTarget)

# the trunk's containers our default network builds for each form (skrl's YAML inputs)
INPUTS = {
    "dict": ["concatenate([OBSERVATIONS['first'], OBSERVATIONS['second']])"],
    "tuple": ["concatenate([OBSERVATIONS[0], OBSERVATIONS[1]])"],
    "discrete": ["one_hot_encoding(OBSERVATION_SPACE, OBSERVATIONS)"],
    "multidiscrete": ["one_hot_encoding(OBSERVATION_SPACE, OBSERVATIONS)"],
    "dict_image": [
        "permute(OBSERVATIONS['picture'], (0, 3, 1, 2)) / 255",
        "concatenate([OBSERVATIONS['first'], features_extractor])",
    ],
    "dict_discrete": [
        "concatenate([one_hot_encoding(OBSERVATION_SPACE['first'], OBSERVATIONS['first']), OBSERVATIONS['second']])"
    ],
}


def runner_for(form: str, tmp_path, *overrides: str) -> Runner:
    cfg = load_config([f"task={TASK}", f"+task.env.observation={form}", *TINY, f"runs_dir={tmp_path}", *overrides])
    return Runner(cfg, disable_progressbar=True)


@pytest.mark.parametrize("form", list(INPUTS))
def test_each_form_gets_its_default_network_and_trains_with_every_value_call_served(form, tmp_path):
    runner = runner_for(form, tmp_path, "max_iterations=2")
    trunk = runner.models["policy"].policy_trunk.trunk.net
    assert [trunk.inputs[name].text for name in trunk.order[:-1]] == INPUTS[form][:-1]
    assert trunk.inputs["net"].text == INPUTS[form][-1] and trunk.order[-1] == "net"
    summary = runner.train()
    assert summary.iterations == 2 and summary.sfp_hit_rate == 1.0 and summary.final_return is not None


@pytest.mark.slow
def test_a_dict_of_flat_boxes_learns_through_their_concatenation(tmp_path):
    cfg = load_config(
        [f"task={TASK}", "+task.env.observation=dict", *SHORT, "max_iterations=40", "train.ppo.rewards_scale=1"]
        + ["train.models.units=[32]", f"runs_dir={tmp_path}", "train.ppo.learning_rate=3e-3"]
    )
    summary = Runner(cfg, disable_progressbar=True).train()
    assert summary.sfp_hit_rate == 1.0
    assert summary.final_return > 12.0, summary.final_return  # random play: 4 of 16 per episode, perfect 16


def test_the_normaliser_scales_the_flat_parts_only(tmp_path):
    runner = runner_for("dict_image", tmp_path, "max_iterations=1")
    space = runner.env.observation_space
    flat = flat_parts_of(space)
    assert flat.tolist() == [True] * 3 + [False] * 144  # sorted keys: "first" (3), then the 12x12x1 picture
    assert observation_normalization(runner.cfg, runner.env)
    scaler = runner.agent._observation_preprocessor
    assert torch.equal(scaler.flat_parts, flat)
    runner.train()
    env = ShowTheTarget("dict_image")
    sample, _ = env.reset(seed=3)
    x = flatten_tensorized_space(tensorize_space(space, {k: v[None] for k, v in sample.items()}))
    y = scaler(x)
    assert torch.equal(y[:, 3:], x[:, 3:])  # the picture's 0/255 values pass to the CNN as they are
    expected = StandardScaler(size=space, device="cpu")
    expected.load_state_dict(scaler.state_dict())
    assert torch.equal(y[:, :3], expected(x)[:, :3]) and not torch.equal(y[:, :3], x[:, :3])
    for form in ("discrete", "multidiscrete"):  # one-hot codes only: nothing to normalise
        assert not flat_parts_of(ShowTheTarget(form).observation_space).any()


def test_the_cache_keys_the_flat_tensor_of_a_dict(tmp_path):
    """The policy's and the value's calls on the same observations hit; the same call with one entry changed
    misses (it is another tensor, and its content differs)."""
    space = ShowTheTarget("dict_image").observation_space
    spec = network.parse(
        network.default_spec(
            space,
            spaces.MultiDiscrete([3, 3]),
            units=[16],
            activation="elu",
            separate=False,
            initial_log_std=0.0,
            task="t",
        )
    )
    model = sfp_models.build_models(spec, space, spaces.MultiDiscrete([3, 3]), torch.device("cpu"))["policy"]
    x = torch.rand(4, 147)
    with torch.no_grad():
        model.act({"observations": x}, role="policy")
        value, _ = model.act({"observations": x}, role="value")
        assert (model.sfp_stats.hits, model.sfp_stats.misses) == (1, 1)
        changed = x.clone()
        changed[:, 3 + 5] += 1.0  # one pixel of the picture entry
        policy_changed, _ = model.act({"observations": changed}, role="value")
        assert model.sfp_stats.hits == 1 and model.sfp_stats.misses == 2
    assert not torch.equal(value, policy_changed)


@pytest.mark.slow
def test_a_dict_task_exports_records_and_plays_through_the_cli(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    task = "gym:test_observation_spaces:OmniSfpTests/ShowTheTarget-v0"  # this module registers the id

    def train(*args):
        result = subprocess.run(
            [sys.executable, "-m", "omni_sfp.train", f"task={task}", "+task.env.observation=dict_image", "num_envs=8"]
            + ["train.ppo.rollouts=16", "train.ppo.mini_batches=2", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout

    out = train("max_iterations=2", f"runs_dir={tmp_path}", "export=true", "video=true", "video_length=20")
    assert "SFP cache hits: 100.0%" in out
    (run,) = [path.parent for path in tmp_path.rglob("config.yaml") if (path.parent / "checkpoints").is_dir()]
    assert (run / "exported" / "policy.onnx").is_file() and any((run / "videos" / "train").iterdir())
    assert "mean return (deterministic)" in train("test=true", f"checkpoint={run}")


def test_the_exported_policy_of_a_dict_task_acts_as_the_trained_one(tmp_path):
    from omni_sfp.run.outputs.export import deployed_policy

    runner = runner_for("dict_image", tmp_path, "max_iterations=1")
    runner.train()
    agent = runner.agent
    deployed = deployed_policy(agent.policy, agent._observation_preprocessor, runner.env.action_space)
    x = torch.rand(6, 147) * 20 - 10
    with torch.no_grad():
        _, outputs = agent.policy.act({"observations": agent._observation_preprocessor(x)}, role="policy")
        assert torch.equal(deployed(x), outputs["mean_actions"])
