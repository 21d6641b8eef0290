"""The embedded tasks through EmbeddedEnvWrapper: skrl 2's environment contract, for every task."""

import pytest
import torch
from skrl.envs.wrappers.torch import Wrapper

from omni_sfp.envs.embedded import EmbeddedEnvWrapper
from omni_sfp.tasks.cartpole import Cartpole
from omni_sfp.tasks.constant_cost import ConstantCost
from omni_sfp.tasks.lqr import LQR60x8

TASKS = [Cartpole, LQR60x8, ConstantCost]
NUM_ENVS = 6


def wrapped(task_class, seed=0, **kwargs):
    return EmbeddedEnvWrapper(task_class(NUM_ENVS, "cpu", seed, **kwargs))


def random_actions(env, generator):
    return 2.0 * torch.rand((env.num_envs, *env.action_space.shape), generator=generator) - 1.0


@pytest.mark.parametrize("task_class", TASKS)
def test_wrapper_exposes_the_task_to_skrl(task_class):
    env = wrapped(task_class)
    assert isinstance(env, Wrapper)
    assert env.num_envs == NUM_ENVS
    assert env.device == torch.device("cpu")
    assert env.observation_space is env.unwrapped.observation_space
    assert env.action_space is env.unwrapped.action_space
    assert env.state_space is None and env.state() is None
    assert env.render() is None
    assert env.max_episode_length == env.unwrapped.max_episode_length  # forwarded by skrl's base class
    env.close()


@pytest.mark.parametrize("task_class", TASKS)
def test_reset_and_step_return_skrl_shapes_dtypes_and_device(task_class):
    env = wrapped(task_class)
    obs, info = env.reset()
    obs_size, act_size = env.observation_space.shape[0], env.action_space.shape[0]
    assert obs.shape == (NUM_ENVS, obs_size) and obs.dtype == torch.float32 and isinstance(info, dict)
    next_obs, reward, terminated, truncated, info = env.step(torch.zeros(NUM_ENVS, act_size))
    assert next_obs.shape == (NUM_ENVS, obs_size) and next_obs.dtype == torch.float32
    assert reward.shape == (NUM_ENVS, 1) and reward.dtype == torch.float32
    assert terminated.shape == truncated.shape == (NUM_ENVS, 1)
    assert terminated.dtype == truncated.dtype == torch.bool
    assert all(t.device == env.device for t in (next_obs, reward, terminated, truncated))


@pytest.mark.parametrize("task_class", TASKS)
def test_same_seed_same_episodes_other_seed_other_episodes(task_class):
    def trajectory(seed):
        env = wrapped(task_class, seed=seed, max_episode_length=4)
        generator = torch.Generator().manual_seed(0)
        steps = [env.reset()[0]]
        for _ in range(10):  # crosses two auto-resets
            steps.extend(env.step(random_actions(env, generator))[:2])
        return steps

    first, again, other = trajectory(1), trajectory(1), trajectory(2)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], other[0])


@pytest.mark.parametrize("task_class", TASKS)
def test_auto_reset_truncates_every_env_at_max_episode_length(task_class):
    env = wrapped(task_class, max_episode_length=3)
    env.reset()
    zero = torch.zeros(NUM_ENVS, env.action_space.shape[0])
    finished = torch.zeros(NUM_ENVS, 1, dtype=torch.bool)
    for step in range(1, 7):
        _, _, terminated, truncated, _ = env.step(zero)
        assert not (terminated & truncated).any()  # a terminal step is not also a time-out
        finished |= terminated | truncated
        if step % 3 == 0:
            assert finished.all()
            finished[:] = False
    assert (env.unwrapped.episode_length == 0).all()


@pytest.mark.parametrize("task_class", TASKS)
def test_returned_observations_are_not_overwritten_by_later_steps(task_class):
    env = wrapped(task_class)
    obs, _ = env.reset()
    snapshot = obs.clone()
    env.step(torch.ones(NUM_ENVS, env.action_space.shape[0]))
    assert torch.equal(obs, snapshot)


@pytest.mark.parametrize("task_class", TASKS)
def test_invalid_actions_raise_value_errors_naming_the_problem(task_class):
    env = wrapped(task_class)
    env.reset()
    act_size = env.action_space.shape[0]
    with pytest.raises(ValueError, match=r"shape \(6, \d+\), got \(5, \d+\)"):
        env.step(torch.zeros(NUM_ENVS - 1, act_size))
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(NUM_ENVS))
    with pytest.raises(ValueError, match="NaN or infinite"):
        env.step(torch.full((NUM_ENVS, act_size), float("nan")))
    with pytest.raises(ValueError, match="NaN or infinite"):
        env.step(torch.full((NUM_ENVS, act_size), float("inf")))
    with pytest.raises(ValueError, match="device"):
        env.step(torch.zeros(NUM_ENVS, act_size, device="meta"))
    with pytest.raises(ValueError, match="torch.Tensor"):
        env.step([[0.0] * act_size] * NUM_ENVS)


def test_finite_check_can_be_turned_off_for_benchmarks():
    env = wrapped(ConstantCost, validate_actions=False)
    env.reset()
    env.step(torch.full((NUM_ENVS, 8), float("nan")))


def test_num_envs_and_max_episode_length_must_be_positive():
    with pytest.raises(ValueError, match="num_envs"):
        Cartpole(0)
    with pytest.raises(ValueError, match="max_episode_length"):
        Cartpole(2, max_episode_length=0)


@pytest.mark.parametrize("sim_dt, fps", [(1 / 60, 30.0), (1 / 120, 60.0)])
def test_cartpole_sim_dt_sets_the_physics_step_and_the_frame_rate(sim_dt, fps):
    """An upright pole on a cart coasting at 1 m/s with no force has no acceleration: one control step of two
    substeps moves the cart by exactly 2 * sim_dt metres."""
    task = Cartpole(1, sim_dt=sim_dt)
    task.reset()
    task.state = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
    observations = task.step(torch.zeros(1, 1))[0]
    assert observations[0, 0].item() == pytest.approx(2 * sim_dt)
    assert task.metadata["render_fps"] == pytest.approx(fps)


def test_cartpole_refuses_a_physics_step_that_is_not_positive():
    with pytest.raises(ValueError, match="sim_dt=0: must be > 0"):
        Cartpole(1, sim_dt=0)
