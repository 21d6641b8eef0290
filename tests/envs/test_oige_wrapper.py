"""omni_sfp.envs.oige_wrapper: the skrl 2 wrapper against OmniIsaacGymEnvs 4.0.0's doubles (no Isaac Sim here).
The doubles reproduce upstream's omniisaacgymenvs/tasks/base/rl_task.py (an RLTask that writes its buffers in
place, builds old-``gym`` spaces and never sets ``extras["time_outs"]``) and envs/vec_env_rlgames.py."""

from __future__ import annotations

import math

import gymnasium
import numpy as np
import pytest
import torch
from skrl.envs.wrappers.torch import Wrapper

from omni_sfp.envs.oige_wrapper import OmniIsaacGymWrapper

NUM_ENVS = 6
OBS, ACT = 4, 1


class PointMassTask:
    """Stand-in for an OmniIsaacGymEnvs ``RLTask`` (omniisaacgymenvs/tasks/base/rl_task.py, OIGE 4.0.0) with the
    behaviour the wrapper depends on, written the way OIGE's tasks are (e.g. tasks/cartpole.py):

    - buffers made once in ``cleanup()`` and written in place every step: ``obs_buf`` (N, num_observations)
      float, ``states_buf`` (N, num_states) float, ``rew_buf`` (N,) float, ``reset_buf`` (N,) long,
      ``progress_buf`` (N,) long, ``extras`` dict;
    - ``reset()`` flags every env (``reset_buf`` = 1); ``pre_physics_step(actions)`` first resets the envs
      flagged by the previous step (``reset_idx``: new state, ``reset_buf``/``progress_buf`` = 0), then applies
      the actions; ``post_physics_step()`` increments ``progress_buf`` and runs ``get_observations``,
      ``get_states``, ``calculate_metrics``, ``is_done`` (``reset_buf`` includes the time-outs, at
      ``progress_buf >= _max_episode_length - 1`` as tasks/shared/locomotion.py), returning ``(obs_buf, rew_buf,
      reset_buf, extras)`` with ``extras`` left ``{}``: no OIGE task sets ``extras["time_outs"]``;
    - ``clip_obs``, ``clip_actions``, ``rl_device``, ``num_actions``, ``num_states`` and per-env Boxes from the
      old ``gym`` package (``from gym import spaces`` in rl_task.py; the double in oige_double/gym).

    Dynamics (the "world"): a point mass, x' = x + 0.1 v, v' = v + 0.1 * 10 a; it fails past |x| > 2.
    """

    def __init__(self, num_envs, *, num_states=0, max_episode_length=5, device="cpu", seed=0):
        from gym import spaces

        self._num_envs = num_envs
        self.num_observations, self.num_actions, self.num_states = OBS, ACT, num_states
        self._max_episode_length = max_episode_length
        self.clip_obs, self.clip_actions = 5.0, 1.0
        self.rl_device = self._device = device
        self.generator = torch.Generator().manual_seed(seed)
        self.observation_space = spaces.Box(np.ones(OBS) * -np.inf, np.ones(OBS) * np.inf)
        self.action_space = spaces.Box(np.ones(ACT) * -1.0, np.ones(ACT) * 1.0)
        self.state_space = spaces.Box(np.ones(num_states) * -np.inf, np.ones(num_states) * np.inf)
        self.reset_calls = 0  # reset_idx calls, i.e. envs actually reset
        self.cleanup()
        self.position = torch.zeros(num_envs)
        self.velocity = torch.zeros(num_envs)

    @property
    def num_envs(self):
        return self._num_envs

    def cleanup(self):
        n = self._num_envs
        self.obs_buf = torch.zeros((n, self.num_observations), dtype=torch.float)
        self.states_buf = torch.zeros((n, self.num_states), dtype=torch.float)
        self.rew_buf = torch.zeros(n, dtype=torch.float)
        self.reset_buf = torch.ones(n, dtype=torch.long)
        self.progress_buf = torch.zeros(n, dtype=torch.long)
        self.extras = {}

    def reset(self):
        self.reset_buf = torch.ones_like(self.reset_buf)

    def reset_idx(self, env_ids):
        self.reset_calls += 1
        self.position[env_ids] = 0.2 * (torch.rand(len(env_ids), generator=self.generator) - 0.5)
        self.velocity[env_ids] = 0.0
        self.reset_buf[env_ids] = 0
        self.progress_buf[env_ids] = 0

    def pre_physics_step(self, actions):
        env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1)
        if len(env_ids) > 0:
            self.reset_idx(env_ids)
        self.actions = actions.clone()

    def physics_step(self):
        self.position += 0.1 * self.velocity
        self.velocity += 0.1 * 10.0 * self.actions[:, 0]

    def post_physics_step(self):
        self.progress_buf[:] += 1
        self.get_observations()
        self.get_states()
        self.calculate_metrics()
        self.is_done()
        return self.obs_buf, self.rew_buf, self.reset_buf, self.extras

    def get_observations(self):
        self.obs_buf[:, 0] = self.position
        self.obs_buf[:, 1] = self.velocity
        self.obs_buf[:, 2] = self.progress_buf.float()
        self.obs_buf[:, 3] = 1.0

    def get_states(self):
        if self.num_states:
            self.states_buf[:, 0] = self.position
            self.states_buf[:, 1:] = 3.0
        return self.states_buf

    def calculate_metrics(self):
        self.rew_buf[:] = 1.0 - self.position**2

    def is_done(self):
        failed = self.position.abs() > 2.0
        timed_out = self.progress_buf >= self._max_episode_length - 1
        self.reset_buf[:] = (failed | timed_out).long()


class VecEnvRLGamesDouble(gymnasium.Env):
    """Test double of OmniIsaacGymEnvs 4.0.0's ``VecEnvRLGames`` (omniisaacgymenvs/envs/vec_env_rlgames.py),
    an Isaac Sim ``omni.isaac.gym.vec_env.VecEnvBase`` (a ``gymnasium.Env``), minus Isaac Sim:

    - ``set_task(task)`` stores the task and copies ``observation_space`` / ``action_space`` (VecEnvBase),
      ``num_states`` / ``state_space`` (VecEnvRLGames); ``num_envs`` is a property;
    - ``step(actions)``: clamp to ``clip_actions``, ``task.pre_physics_step``, the world steps
      (``control_frequency_inv`` times), ``task.post_physics_step()``, ``task.get_states()``; then
      ``_process_data``: obs and states clamped to ``clip_obs`` (new tensors, as ``torch.clamp`` makes),
      rewards and resets passed as the task's own buffers; returns ``({"obs", "states"}, rew, resets, extras)``;
    - ``reset()``: ``task.reset()`` then ``step(zeros)``, returning the obs dict;
    - ``close()`` closes the app (here: records it).

    ``clamp=False`` returns the task's observation buffer itself, the harsher case for aliasing.
    """

    def __init__(self, task, *, clamp=True, control_frequency_inv=2):
        self._task = None
        self.clamp = clamp
        self.control_frequency_inv = control_frequency_inv
        self.reset_calls = self.step_calls = 0
        self.closed = False
        self.set_task(task)

    def set_task(self, task):
        self._task = task
        self._num_envs = task.num_envs
        self.observation_space = task.observation_space
        self.action_space = task.action_space
        self.num_states = task.num_states
        self.state_space = task.state_space

    @property
    def num_envs(self):
        return self._num_envs

    def step(self, actions):
        self.step_calls += 1
        task = self._task
        actions = torch.clamp(actions, -task.clip_actions, task.clip_actions).to(task._device)
        task.pre_physics_step(actions)
        for _ in range(self.control_frequency_inv):
            task.physics_step()
        obs, rew, resets, extras = task.post_physics_step()
        states = task.get_states()
        if self.clamp:
            obs = torch.clamp(obs, -task.clip_obs, task.clip_obs).to(task.rl_device)
            states = torch.clamp(states, -task.clip_obs, task.clip_obs).to(task.rl_device)
        return {"obs": obs, "states": states}, rew.to(task.rl_device), resets.to(task.rl_device), extras

    def reset(self, seed=None, options=None):
        self.reset_calls += 1
        self._task.reset()
        actions = torch.zeros((self.num_envs, self._task.num_actions), device=self._task.rl_device)
        obs_dict, _, _, _ = self.step(actions)
        return obs_dict

    def render(self, mode="human"):
        raise AssertionError("the wrapper must not render: Isaac Sim renders inside step")

    def close(self):
        self.closed = True


@pytest.fixture(autouse=True)
def _gym(oige_double):
    """The old ``gym`` package (OIGE's spaces) comes from OIGE's double folder."""


def make(num_states=0, max_episode_length=6, clamp=True, seed=0):
    double = VecEnvRLGamesDouble(
        PointMassTask(NUM_ENVS, num_states=num_states, max_episode_length=max_episode_length, seed=seed), clamp=clamp
    )
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
    push[:2] = 1.0  # envs 0 and 1 accelerate out of |x| <= 2 (at progress 5) before the time limit
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


@pytest.mark.parametrize("clamp", [True, False], ids=["VecEnvRLGames", "raw-task-buffers"])
def test_returned_tensors_do_not_change_under_the_caller(clamp):
    env, _ = make(clamp=clamp)
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
    trainer_cfg = {"timesteps": 3 * cfg.rollouts, "headless": True, "disable_progressbar": True,
                   "close_environment_at_exit": False}
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
