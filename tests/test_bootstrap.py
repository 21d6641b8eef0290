"""The time-limit bootstrap continues a truncated episode from its final state, for every kind of env.

Every env here auto-resets: the observations returned with a truncation are the *next* episode's first
(embedded tasks, Gymnasium's same-step autoreset, Isaac Lab) unless the env resets one step later
(OmniIsaacGymEnvs). The tests use a ramp task whose value differs sharply between the final state and the
initial one, and a value function known in closed form, so the bootstrapped reward is checked exactly.
"""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from skrl.agents.torch.ppo import PPO_CFG
from skrl.memories.torch import RandomMemory
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model

from omni_sfp import SharedActorCritic
from omni_sfp.ppo.agent import SFPPPO, final_observations
from omni_sfp.tasks.base import FINAL_OBSERVATIONS, VecTask
from omni_sfp.tasks.cartpole import Cartpole
from omni_sfp.tasks.constant_cost import ConstantCost
from omni_sfp.tasks.lqr import LQR60x8

GAMMA = 0.9
VALUE_SLOPE = 10.0  # V(x) = VALUE_SLOPE * x[0] for the test value function


class Ramp(VecTask):
    """x counts the steps of the episode (x_0 = 0, x_t = t); reward 1 per step; truncated at the horizon.

    The final observation of an episode is ``horizon``, the next episode's first is 0: any value that grows
    with x tells the two apart.
    """

    def __init__(self, num_envs: int, seed: int = 0, *, max_episode_length: int = 4, stagger: bool = False):
        self.stagger = stagger
        super().__init__(
            num_envs,
            "cpu",
            seed,
            max_episode_length=max_episode_length,
            observation_size=2,
            action_size=1,
            action_bound=1.0,
            validate_actions=False,
        )

    def reset(self):
        observations, info = super().reset()
        if self.stagger:  # env i starts i steps into its episode, so envs truncate on different steps
            self.episode_length = torch.arange(self.num_envs) % self.max_episode_length
            self.state = torch.stack([self.episode_length.float(), torch.ones(self.num_envs)], dim=-1)
            observations = self._observations()
        return observations, info

    def _sample_initial_state(self) -> torch.Tensor:
        return torch.stack([torch.zeros(self.num_envs), torch.ones(self.num_envs)], dim=-1)

    def _advance(self, actions):
        self.state = self.state + torch.tensor([1.0, 0.0])
        return torch.ones(self.num_envs), torch.zeros(self.num_envs, dtype=torch.bool)

    def _observations(self):
        return self.state


class Policy(GaussianMixin, Model):
    def __init__(self, observation_space, action_space):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device="cpu")
        GaussianMixin.__init__(self, role="policy")
        self.mean = torch.nn.Linear(self.num_observations, self.num_actions)
        self.log_std = torch.nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role=""):
        return self.mean(inputs["observations"]), {"log_std": self.log_std}


class LinearValue(DeterministicMixin, Model):
    """V(x) = VALUE_SLOPE * x[0], exactly: the bootstrap's expected reward is known in closed form."""

    def __init__(self, observation_space, action_space):
        Model.__init__(self, observation_space=observation_space, action_space=action_space, device="cpu")
        DeterministicMixin.__init__(self, role="value")
        self.scale = torch.nn.Parameter(torch.tensor(VALUE_SLOPE))

    def compute(self, inputs, role=""):
        return self.scale * inputs["observations"][:, :1], {}


def agent_for(env, models=None, **cfg) -> SFPPPO:
    space_obs, space_act = env.observation_space, env.action_space
    models = models or {"policy": Policy(space_obs, space_act), "value": LinearValue(space_obs, space_act)}
    ppo_cfg = PPO_CFG(
        rollouts=64, learning_epochs=1, mini_batches=1, discount_factor=GAMMA, time_limit_bootstrap=True, **cfg
    )
    ppo_cfg.experiment.write_interval = 0
    ppo_cfg.experiment.checkpoint_interval = 0
    agent = SFPPPO(
        models=models,
        memory=RandomMemory(memory_size=64, num_envs=env.num_envs, device="cpu"),
        observation_space=space_obs,
        action_space=space_act,
        device="cpu",
        cfg=ppo_cfg,
    )
    agent.init()
    agent.enable_training_mode(True)
    return agent


def rollout(agent, env, steps: int):
    """Step like the runner's trainer; return (observations, stored rewards, env rewards, truncated) per step."""
    observations, _ = env.reset()
    records = []
    for t in range(steps):
        with torch.no_grad():
            actions, _ = agent.act(observations, None, timestep=t, timesteps=steps)
            next_observations, rewards, terminated, truncated, infos = env.step(actions)
            agent.record_transition(
                observations=observations,
                states=None,
                actions=actions,
                rewards=rewards,
                next_observations=next_observations,
                next_states=None,
                terminated=terminated,
                truncated=truncated,
                infos=infos,
                timestep=t,
                timesteps=steps,
            )
        stored = agent.memory.get_tensor_by_name("rewards")[t].clone()
        records.append((observations, next_observations, infos, stored, rewards, truncated))
        observations = next_observations
    return records


@pytest.mark.parametrize("stagger", [False, True])
def test_embedded_bootstrap_uses_the_final_observation(stagger):
    env = Ramp(6, max_episode_length=4, stagger=stagger)
    records = rollout(agent_for(env), env, steps=12)
    truncations = 0
    for _, next_obs, infos, stored, rewards, truncated in records:
        final_x = infos[FINAL_OBSERVATIONS][:, :1]
        expected = rewards + GAMMA * VALUE_SLOPE * final_x * truncated
        torch.testing.assert_close(stored, expected)
        truncations += int(truncated.sum())
        # the final state's value (x = 4) is far from the next episode's first (x = 0)
        assert (final_x[truncated] == 4).all() and (next_obs[:, :1][truncated] == 0).all()
    assert truncations == 6 * 12 // 4


def test_fallback_is_the_current_steps_value():
    """No final observation reported (Isaac Lab returns reset observations): V(s_t), as rl_games and rsl_rl."""
    env = Ramp(3, max_episode_length=4)

    class NoFinal:  # the same env without the info, as Isaac Lab's wrapper returns it
        def __getattr__(self, name):
            return getattr(env, name)

        def step(self, actions):
            *out, _ = env.step(actions)
            return (*out, {})

    records = rollout(agent_for(env), NoFinal(), steps=8)
    for observations, _, _, stored, rewards, truncated in records:
        expected = rewards + GAMMA * VALUE_SLOPE * observations[:, :1] * truncated  # x_t = 3 at the truncation
        torch.testing.assert_close(stored, expected)
    assert any(r[-1].any() for r in records)


class RampGym(gymnasium.Env):
    """The ramp as a single Gymnasium env: x counts the episode's steps, reward 1, truncated at 4."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, 1.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t, 1.0], np.float32), 1.0, False, self.t >= 4, {}


def test_gymnasium_bootstrap_uses_final_obs():
    from omni_sfp.envs.registry import make_env

    gymnasium.register("OmniSfpTestRamp-v0", entry_point=RampGym)
    try:
        env = make_env("gym:OmniSfpTestRamp-v0", num_envs=3, device="cpu", seed=0)
        records = rollout(agent_for(env), env, steps=9)
    finally:
        gymnasium.registry.pop("OmniSfpTestRamp-v0")
    truncations = 0
    for _, _, _, stored, rewards, truncated in records:
        expected = rewards + GAMMA * VALUE_SLOPE * 4.0 * truncated
        torch.testing.assert_close(stored, expected)
        truncations += int(truncated.sum())
    assert truncations == 3 * 2


def test_final_observations_of_gymnasium_info():
    space = gymnasium.spaces.Box(-1, 1, (2,), np.float32)
    next_obs = torch.zeros(3, 2)
    info = {
        "final_obs": np.array([None, np.array([5.0, 6.0], np.float32), None], dtype=object),
        "_final_obs": np.array([False, True, False]),
    }
    final = final_observations(info, next_obs, space)
    torch.testing.assert_close(final, torch.tensor([[0.0, 0.0], [5.0, 6.0], [0.0, 0.0]]))
    assert next_obs.abs().sum() == 0  # not modified in place
    none_ended = {"final_obs": np.array([None] * 3, dtype=object), "_final_obs": np.zeros(3, bool)}
    assert final_observations(none_ended, next_obs, space) is next_obs
    assert final_observations({}, next_obs, space) is None and final_observations(None, next_obs, space) is None


@pytest.mark.parametrize("task_class", [Cartpole, LQR60x8, ConstantCost])
def test_embedded_tasks_report_the_pre_reset_observation(task_class):
    """A task with a 3-step horizon reports, at its truncation, what a long-horizon twin observes then."""
    short, twin = task_class(5, seed=3, max_episode_length=3), task_class(5, seed=3, max_episode_length=1000)
    short.reset(), twin.reset()
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        actions = 0.1 * torch.randn(5, short.action_size, generator=generator)
        next_obs, _, terminated, truncated, info = short.step(actions)
        twin_obs, *_ = twin.step(actions)
        done = (terminated | truncated).view(-1)
        torch.testing.assert_close(info[FINAL_OBSERVATIONS][~done], next_obs[~done], rtol=0, atol=0)
        torch.testing.assert_close(
            info[FINAL_OBSERVATIONS][~terminated.view(-1)], twin_obs[~terminated.view(-1)], rtol=0, atol=0
        )
    assert truncated.any() and not torch.equal(info[FINAL_OBSERVATIONS][done], next_obs[done])


def test_shared_model_cache_and_counts_stay_honest():
    """With a cached shared model, a bootstrap on final observations is computed, not served, and not counted
    as shareable; every shareable call is still served (hit rate 1.0)."""
    env = Ramp(4, max_episode_length=4)
    torch.manual_seed(0)
    model = SharedActorCritic(env.observation_space, env.action_space, "cpu", units=(16,))
    agent = agent_for(env, {"policy": model, "value": model})
    records = rollout(agent, env, steps=12)
    assert agent.shareable_calls == 12  # one value call per step, none for the bootstraps
    assert model.sfp_stats.hits == 12
    for _, _, infos, stored, rewards, truncated in records[3:4]:  # the truncating step
        with torch.no_grad():
            final_value, _ = model.act({"observations": infos[FINAL_OBSERVATIONS]}, role="value")
        torch.testing.assert_close(stored, rewards + GAMMA * final_value * truncated)


def test_the_settings_doc_line_says_what_these_tests_check():
    """The line README's table and cfg/train/PPO.yaml carry for ``train.ppo.time_limit_bootstrap`` names the two
    values checked above (the final observation's, else the current step's), not skrl's next observation."""
    from omni_sfp.config.schema import setting

    doc = setting("train.ppo.time_limit_bootstrap").doc
    assert "final observation" in doc and "current step's value" in doc and "next observation" not in doc
