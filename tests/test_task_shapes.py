"""Tasks beyond flat Box in and out train with the network their spaces call for: Discrete and MultiDiscrete
actions, image observations, a critic on states (omni_sfp.sfp.network through the runner)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

from omni_sfp.run.compose import load_config
from omni_sfp.run.runner import Runner, observation_normalization

SHORT = ["num_envs=16", "train.ppo.rollouts=16", "train.ppo.mini_batches=2", "train.ppo.learning_epochs=2"]


class MatchTheTarget(gymnasium.Env):
    """A MultiDiscrete task that needs the observation: reward 1 for each sub-action equal to its part of the
    target shown (one-hot) in the observation; 8 steps an episode. Random play earns 0.5 a step, perfect 2."""

    metadata = {"render_modes": []}

    def __init__(self, image: bool = False) -> None:
        self.action_space = spaces.MultiDiscrete([3, 3])
        if image:  # the target as a 12 x 12 picture: HWC uint8, as Gymnasium's pixel wrappers give
            self.observation_space = spaces.Box(0, 255, (12, 12, 1), dtype=np.uint8)
        else:
            self.observation_space = spaces.Box(0.0, 1.0, (6,), dtype=np.float32)
        self.image = image

    def _observation(self):
        one_hot = np.zeros(6, dtype=np.float32)
        one_hot[self.target[0]], one_hot[3 + self.target[1]] = 1, 1
        if not self.image:
            return one_hot
        picture = np.zeros((12, 12, 1), dtype=np.uint8)
        picture[:2, :, 0] = np.repeat(one_hot, 2)[None, :] * 255
        return picture

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps, self.target = 0, self.np_random.integers(0, 3, size=2)
        return self._observation(), {}

    def step(self, action):
        reward = float(np.sum(np.asarray(action) == self.target))
        self.steps += 1
        self.target = self.np_random.integers(0, 3, size=2)
        return self._observation(), reward, False, self.steps >= 8, {}


gymnasium.register("OmniSfpTests/MatchTheTarget-v0", entry_point=MatchTheTarget)


def test_a_multidiscrete_task_trains(tmp_path):
    cfg = load_config(
        ["task=gym:OmniSfpTests/MatchTheTarget-v0", *SHORT, "max_iterations=40", "train.ppo.rewards_scale=1"]
        + ["train.models.units=[32]", f"runs_dir={tmp_path}", "train.ppo.learning_rate=3e-3"]
    )
    runner = Runner(cfg, disable_progressbar=True)
    summary = runner.train()
    assert summary.sfp_hit_rate == 1.0
    assert summary.final_return > 12.0, summary.final_return  # random play: 4 of 16 per episode, perfect 16


@pytest.mark.parametrize("task", ["gym:CartPole-v1", "gym:Acrobot-v1"])
def test_discrete_gymnasium_tasks_train_with_a_categorical_policy(tmp_path, task):
    """Crashed before (``AssertionError: np.int64(-1) ... invalid``: a Gaussian's action sent to Discrete)."""
    cfg = load_config([f"task={task}", *SHORT, "max_iterations=2", f"runs_dir={tmp_path}"])
    runner = Runner(cfg, disable_progressbar=True)
    assert type(runner.models["policy"]).__name__ == "CategoricalSpecActorCritic"
    summary = runner.train()
    assert summary.iterations == 2 and summary.sfp_hit_rate == 1.0 and summary.final_return is not None
    assert "std" not in runner.agent.last_losses  # no Gaussian: no standard deviation to report


def test_image_observations_train_through_a_cnn_without_the_observation_normaliser(tmp_path):
    cfg = load_config(
        ["task=gym:OmniSfpTests/MatchTheTarget-v0", *SHORT, "max_iterations=2"]
        + ["+task.env.image=true", f"runs_dir={tmp_path}"]
    )
    runner = Runner(cfg, disable_progressbar=True)
    assert not observation_normalization(cfg, runner.env)
    assert runner.agent._observation_preprocessor == runner.agent._empty_preprocessor
    trunk = runner.models["policy"].policy_trunk.trunk.net
    assert list(trunk.order) == ["features_extractor", "net"]
    summary = runner.train()
    assert summary.iterations == 2 and summary.sfp_hit_rate == 1.0


def test_a_network_given_in_the_config_is_built(tmp_path):
    """``train.models.network`` in skrl's YAML model format, from the command line."""
    net = "[{name:net,input:OBSERVATIONS,layers:[24,12],activations:tanh}]"
    cfg = load_config(
        ["task=Cartpole", *SHORT, "max_iterations=1", f"runs_dir={tmp_path}"]
        + [
            f"train.models.network={{policy:{{class:GaussianMixin,network:{net},output:ACTIONS}},"
            f"value:{{class:DeterministicMixin,network:{net},output:ONE}}}}"
        ]
    )
    runner = Runner(cfg, disable_progressbar=True)
    layers = runner.models["policy"].policy_trunk.trunk.net.blocks["net"]
    assert [m.out_features for m in layers if isinstance(m, torch.nn.Linear)] == [24, 12]
    assert runner.train().sfp_hit_rate == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_cartpole_v1_balances_with_the_default_network(tmp_path, seed):
    """The issue's bar: ``task=gym:CartPole-v1`` with its defaults (cfg/train/CartPole-v1PPO.yaml) ends at a
    deterministic return >= 475. It must hold with one thread and with two (CI's 2 cores) and on every CPU: with
    GenericPPO's settings, seed 3 ended at 500.0 or 384.3 (Zen 4, one or two threads), then at 112.0 (Intel, model
    207) even with the learning rate annealed; the settled config ends at 500.0 for seeds 0-9 either way."""
    cfg = load_config(["task=gym:CartPole-v1", f"seed={seed}", f"runs_dir={tmp_path}"])
    summary = Runner(cfg, disable_progressbar=True).train()
    assert summary.final_return >= 475, summary.final_return


@pytest.mark.slow
def test_acrobot_swings_up(tmp_path):
    """Random play never reaches the line in 500 steps (return -500); trained, it does in about 100. Before
    cfg/train/Acrobot-v1PPO.yaml's entropy bonus, seed 0 with two threads never found the line (-500)."""
    cfg = load_config(["task=gym:Acrobot-v1", "seed=0", f"runs_dir={tmp_path}"])
    summary = Runner(cfg, disable_progressbar=True).train()
    assert summary.final_return > -200, summary.final_return


@pytest.mark.parametrize(
    ("network", "named"),
    [
        (
            "{policy:{network:[{name:n,input:OBS,layers:[8]}]},value:{network:[{name:n,input:OBSERVATIONS,layers:[8]}]}}",
            "OBS",
        ),
        (
            "{policy:{class:CategoricalMixin,network:[{name:n,input:OBSERVATIONS,layers:[8]}]},value:{network:[{name:n,input:OBSERVATIONS,layers:[8]}]}}",
            "Discrete action space",
        ),
    ],
)
def test_a_network_that_does_not_build_is_one_line_and_exit_2(tmp_path, capsys, network, named):
    from omni_sfp.train import main

    assert main(["task=Cartpole", "num_envs=4", f"runs_dir={tmp_path}", f"train.models.network={network}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0], err


@pytest.mark.slow
def test_a_discrete_task_records_exports_plays_and_resumes_through_the_cli(tmp_path):
    import subprocess
    import sys

    def train(*args):
        result = subprocess.run(
            [sys.executable, "-m", "omni_sfp.train", "task=gym:CartPole-v1", "num_envs=8", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        return result.stdout

    out = train("max_iterations=2", f"runs_dir={tmp_path}", "export=true", "video=true", "video_length=20")
    assert "SFP cache hits: 100.0%" in out
    (run,) = tmp_path.glob("gym_CartPole-v1/*")
    assert (run / "exported" / "policy.onnx").is_file() and any((run / "videos" / "train").iterdir())
    assert "mean return (deterministic)" in train("test=true", f"checkpoint={run}")
    assert "SFP cache hits: 100.0%" in train("resume=true", f"checkpoint={run}", "max_iterations=3")
