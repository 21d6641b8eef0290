"""omni_sfp.envs.oige_wrapper: the skrl 2 wrapper against OmniIsaacGymEnvs 4.0.0's double (tests/envs/oige_double,
no Isaac Sim here): its ``RLTask`` (tasks/base/rl_task.py: buffers written in place, old-``gym`` spaces, no
``extras["time_outs"]``) under its ``VecEnvRLGames`` (envs/vec_env_rlgames.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import gymnasium
import pytest
import torch
from skrl.envs.wrappers.torch import Wrapper

from omni_sfp.envs.oige_wrapper import OmniIsaacGymWrapper

NUM_ENVS = 6
OBS, ACT = 4, 1  # the double's RLTask: observations [x, v, progress, 1], one action


@pytest.fixture(autouse=True)
def _double(oige_double):
    """OmniIsaacGymEnvs' double (and the old ``gym`` package its spaces come from) for every test here."""


def make(num_states=0, max_episode_length=6, seed=0, last_step=-1):
    """The double's ``VecEnvRLGames`` with an ``RLTask`` that ends episodes as OIGE's locomotion tasks do
    (tasks/shared/locomotion.py: reset at ``progress_buf >= max_episode_length - 1``, or a failure, here
    ``|x| > 1``), as ``initialize_task`` builds it, wrapped for skrl. ``last_step=0``: as OIGE's Cartpole
    (tasks/cartpole.py: ``progress_buf >= max_episode_length``)."""
    from omniisaacgymenvs.envs.vec_env_rlgames import VecEnvRLGames
    from omniisaacgymenvs.tasks.base import RLTask

    class LocomotionLikeTask(RLTask):
        def __init__(self, name, sim_config, env):
            super().__init__(name, sim_config, env, num_states=num_states)
            self._max_episode_length = max_episode_length

        def is_done(self):
            failed = self.position.abs() > 1.0
            timed_out = self.progress_buf >= self._max_episode_length + last_step
            self.reset_buf[:] = (failed | timed_out).long()

    sim_config = SimpleNamespace(
        config={"rl_device": "cpu", "pipeline": "cpu", "seed": seed},
        task_config={
            "env": {"numEnvs": NUM_ENVS, "controlFrequencyInv": 2, "clipObservations": 5.0, "clipActions": 1.0}
        },
    )
    double = VecEnvRLGames(headless=True, sim_device=0)
    double.set_task(LocomotionLikeTask("PointMass", sim_config, double))
    return OmniIsaacGymWrapper(double), double


def test_wrapper_exposes_the_env_to_skrl():
    env, double = make()
    assert isinstance(env, Wrapper)
    env.close()
    env.close()  # idempotent: make_oige_env also registers it at exit
    assert double.closed
    assert env.num_envs == NUM_ENVS
    assert env.device == torch.device("cpu")  # the task's rl_device, not skrl's default
    assert env.observation_space.shape == (OBS,) and env.action_space.shape == (ACT,)
    assert env.state_space is None  # num_states == 0: no privileged state
    assert env.render() is None
    env.close()
    assert double.closed


def test_reset_once_returns_obs_then_the_env_resets_itself():
    env, double = make()
    obs, info = env.reset()
    assert obs.shape == (NUM_ENVS, OBS) and obs.dtype == torch.float32 and isinstance(info, dict)
    again, _ = env.reset()  # skrl's trainer may call reset again: no second env reset
    assert double.reset_calls == 1 and torch.equal(again, obs)


def test_step_shapes_dtypes_and_devices():
    env, _ = make()
    env.reset()
    obs, reward, terminated, truncated, info = env.step(torch.zeros(NUM_ENVS, ACT))
    assert obs.shape == (NUM_ENVS, OBS) and obs.dtype == torch.float32
    assert reward.shape == (NUM_ENVS, 1) and reward.dtype == torch.float32
    assert terminated.shape == truncated.shape == (NUM_ENVS, 1)
    assert terminated.dtype == truncated.dtype == torch.bool
    assert all(t.device == env.device for t in (obs, reward, terminated, truncated))
    # extras pass through as info (OIGE tasks leave them empty), plus the final observations for the time-limit
    # bootstrap: OIGE resets in the next step, so the returned observations are the episodes' last ones
    assert info.keys() == {"final_observations"} and info["final_observations"] is obs
    assert isinstance(env.observation_space, gymnasium.spaces.Box)  # converted from old gym's Box
    assert env.action_space.shape == (ACT,) and float(env.action_space.high[0]) == 1.0


def test_time_outs_are_truncations_and_failures_terminations():
    env, _ = make(max_episode_length=7)  # resets at progress_buf >= 6
    env.reset()  # the reset step counts: progress is 1
    push = torch.zeros(NUM_ENVS, ACT)
    push[:2] = 1.0  # envs 0 and 1 accelerate out of |x| <= 1 (at progress 5) before the time limit
    flags = [env.step(push)[2:4] for _ in range(5)]  # progress 2..6: the time limit is the 5th step
    terminated = torch.stack([f[0][:, 0] for f in flags])  # (steps, envs)
    truncated = torch.stack([f[1][:, 0] for f in flags])
    assert terminated[:, :2].any(dim=0).all() and not truncated[:, :2].any()  # failed: terminated only
    assert not terminated[:, 2:].any()
    assert truncated[-1, 2:].all() and not truncated[:-1, 2:].any()  # time-outs, exactly at the limit
    assert not (terminated & truncated).any()


def test_time_outs_come_from_progress_buf_when_extras_has_none():
    # the old wrapper read only extras["time_outs"], which no OIGE task sets: every reset was a termination
    env, _double = make(max_episode_length=3)
    env.reset()
    _, _, terminated, truncated, info = env.step(torch.zeros(NUM_ENVS, ACT))  # progress 2 = limit - 1
    assert "time_outs" not in info and truncated.all() and not terminated.any()


def test_a_task_that_times_out_at_its_limit_keeps_its_last_step_failures_terminations():
    """OIGE's Cartpole resets at ``progress_buf >= max_episode_length``, one step after the locomotion rule: the
    first time-out shows it, and then a failure at ``max_episode_length - 1`` is no time-out (it was one)."""
    env, double = make(max_episode_length=4, last_step=0)
    task, original = double._task, double._task.is_done

    def is_done():  # env 0 fails at progress 3 = max_episode_length - 1, its episode's last step, once armed
        original()
        task.reset_buf[0] |= int(armed and task.progress_buf[0] == 3)

    armed, task.is_done = False, is_done
    env.reset()  # progress 1
    flags = [env.step(torch.zeros(NUM_ENVS, ACT))[2:4] for _ in range(3)]  # progress 2, 3, 4: the time-outs
    assert not flags[1][1].any() and flags[2][1].all() and not any(f[0].any() for f in flags)
    armed = True
    for _ in range(3):  # progress 1 (the reset), 2, 3
        _, _, terminated, truncated, _ = env.step(torch.zeros(NUM_ENVS, ACT))
    assert task.progress_buf[0] == 3
    assert terminated[0] and not terminated[1:].any() and not truncated.any()  # main: truncated[0]
    _, _, terminated, truncated, _ = env.step(torch.zeros(NUM_ENVS, ACT))  # progress 4: the others time out
    assert truncated[1:].all() and not terminated.any()


def test_explicit_time_outs_win_over_progress_buf():
    env, double = make(max_episode_length=3)
    task = double._task
    original = task.is_done

    def is_done():  # a task that does set extras["time_outs"]: none of its resets are time-outs
        original()
        task.extras["time_outs"] = torch.zeros_like(task.reset_buf, dtype=torch.bool)

    task.is_done = is_done
    env.reset()
    _, _, terminated, truncated, _ = env.step(torch.zeros(NUM_ENVS, ACT))
    assert terminated.all() and not truncated.any()


def test_a_task_without_an_episode_limit_only_terminates():
    env, double = make(max_episode_length=3)
    del double._task._max_episode_length
    double._task.is_done = lambda: double._task.reset_buf.__setitem__(slice(None), 1)
    env.reset()
    _, _, terminated, truncated, _ = env.step(torch.zeros(NUM_ENVS, ACT))
    assert terminated.all() and not truncated.any()


def test_auto_reset_passes_through():
    env, double = make(max_episode_length=4)
    env.reset()
    zeros = torch.zeros(NUM_ENVS, ACT)
    env.step(zeros)
    last_obs, _, _, truncated, _ = env.step(zeros)  # progress 3: every env times out
    assert truncated.all()
    assert (last_obs[:, 2] == 3).all()  # the observation that comes with the reset is the episode's last
    first_obs = env.step(zeros)[0]
    assert (first_obs[:, 2] == 1).all()  # the env reset itself at the start of the next step
    assert double.reset_calls == 1  # ... without the wrapper calling reset()
    assert double._task.reset_calls == 2  # the initial reset, then the lazy one


def test_returned_tensors_do_not_change_under_the_caller():
    env, _ = make()
    env.reset()
    obs, reward, *_ = env.step(torch.ones(NUM_ENVS, ACT))
    kept_obs, kept_reward = obs.clone(), reward.clone()
    next_obs, *_ = env.step(torch.ones(NUM_ENVS, ACT))  # the task rewrites obs_buf and rew_buf in place
    assert torch.equal(obs, kept_obs) and torch.equal(reward, kept_reward)
    assert next_obs is not obs and not torch.equal(next_obs, obs)


def test_privileged_states_come_through_state():
    env, _ = make(num_states=3)
    assert env.state_space.shape == (3,)
    env.reset()
    states = env.state()
    assert states.shape == (NUM_ENVS, 3) and (states[:, 1:] == 3.0).all()
    env.step(torch.zeros(NUM_ENVS, ACT))
    assert env.state() is not states  # a copy per step


def test_skrl_ppo_trains_a_few_iterations_on_it():
    from skrl.agents.torch.ppo import PPO, PPO_CFG
    from skrl.memories.torch import RandomMemory
    from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
    from skrl.trainers.torch import SequentialTrainer

    class Policy(GaussianMixin, Model):
        def __init__(self, observation_space, action_space, device):
            Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
            GaussianMixin.__init__(self, clip_actions=False)
            self.net = torch.nn.Sequential(torch.nn.Linear(OBS, 16), torch.nn.Tanh(), torch.nn.Linear(16, ACT))
            self.log_std = torch.nn.Parameter(torch.zeros(ACT))

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {"log_std": self.log_std}

    class Value(DeterministicMixin, Model):
        def __init__(self, observation_space, action_space, device):
            Model.__init__(self, observation_space=observation_space, action_space=action_space, device=device)
            DeterministicMixin.__init__(self)
            self.net = torch.nn.Sequential(torch.nn.Linear(OBS, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

        def compute(self, inputs, role=""):
            return self.net(inputs["observations"]), {}

    torch.manual_seed(0)
    env, double = make(max_episode_length=5)
    cfg = PPO_CFG(rollouts=8, learning_epochs=2, mini_batches=2, learning_rate=1e-3, time_limit_bootstrap=True)
    cfg.experiment.write_interval = 0
    cfg.experiment.checkpoint_interval = 0
    spaces = {"observation_space": env.observation_space, "action_space": env.action_space, "device": env.device}
    models = {"policy": Policy(**spaces), "value": Value(**spaces)}
    memory = RandomMemory(memory_size=cfg.rollouts, num_envs=env.num_envs, device=env.device)
    agent = PPO(models=models, memory=memory, cfg=cfg, **spaces)
    before = [p.detach().clone() for p in models["policy"].parameters()]
    trainer_cfg = {
        "timesteps": 3 * cfg.rollouts,
        "headless": True,
        "disable_progressbar": True,
        "close_environment_at_exit": False,
    }
    SequentialTrainer(env=env, agents=agent, cfg=trainer_cfg).train()
    after = list(models["policy"].parameters())
    assert double.reset_calls == 1 and double.step_calls == 1 + 3 * cfg.rollouts
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))  # three PPO updates happened
    assert all(torch.isfinite(p).all() for p in after)


def test_time_limit_values_are_what_skrl_bootstraps_with():
    # The observation returned with a time-out is the episode's last: V(last obs) is the right bootstrap.
    env, _ = make(max_episode_length=3)
    env.reset()
    obs, _, _, truncated, _ = env.step(torch.zeros(NUM_ENVS, ACT))
    assert truncated.all() and (obs[:, 2] == 2).all() and math.isfinite(obs.sum().item())
