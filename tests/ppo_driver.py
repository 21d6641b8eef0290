"""Drive skrl's PPO by hand, the way skrl's SequentialTrainer does, on a small seeded synthetic env:
the tests need exact control over steps and updates without a task or a trainer in between."""

from __future__ import annotations

import gymnasium
import torch
from skrl.agents.torch.ppo import PPO, PPO_CFG
from skrl.memories.torch import RandomMemory

OBS, ACT = 6, 2
BOX_OBS = gymnasium.spaces.Box(-10, 10, (OBS,))
BOX_ACT = gymnasium.spaces.Box(-1, 1, (ACT,))


class LinearEnv:
    """x' = 0.9 x + 0.1 [a, a, a]; reward -|x|^2; truncates every ``horizon`` steps (bootstrap paths)."""

    def __init__(self, num_envs: int, seed: int, horizon: int = 5):
        self.generator = torch.Generator().manual_seed(seed)
        self.num_envs, self.horizon, self.t = num_envs, horizon, 0
        self.x = torch.randn(num_envs, OBS, generator=self.generator)

    def step(self, actions: torch.Tensor):
        self.t += 1
        self.x = 0.9 * self.x + 0.1 * actions.repeat(1, OBS // ACT)
        rewards = -(self.x**2).sum(-1, keepdim=True)
        truncated = torch.full((self.num_envs, 1), self.t % self.horizon == 0)
        terminated = torch.zeros_like(truncated)
        next_obs = self.x.clone()
        if truncated.any():
            self.x = torch.randn(self.num_envs, OBS, generator=self.generator)
        return next_obs, rewards, terminated, truncated


def make_agent(models: dict, *, num_envs: int = 8, agent_class=PPO, **cfg) -> PPO:
    defaults = dict(rollouts=8, learning_epochs=2, mini_batches=2, learning_rate=1e-3)
    defaults.update(cfg)
    ppo_cfg = PPO_CFG(**defaults)
    ppo_cfg.experiment.write_interval = 0
    ppo_cfg.experiment.checkpoint_interval = 0
    memory = RandomMemory(memory_size=ppo_cfg.rollouts, num_envs=num_envs, device="cpu")
    agent = agent_class(
        models=models, memory=memory, observation_space=BOX_OBS, action_space=BOX_ACT, device="cpu", cfg=ppo_cfg
    )
    agent.init()
    agent.enable_training_mode(True)
    return agent


def run(agent: PPO, steps: int, *, seed: int = 0, num_envs: int = 8, horizon: int = 5) -> list[float]:
    """Run ``steps`` environment steps; returns the mean policy loss of each update."""
    env = LinearEnv(num_envs, seed, horizon)
    obs = env.x.clone()
    losses = []
    for t in range(steps):
        with torch.no_grad():
            actions, _ = agent.act(obs, None, timestep=t, timesteps=steps)
            next_obs, rewards, terminated, truncated = env.step(actions)
            agent.record_transition(
                observations=obs,
                states=None,
                actions=actions,
                rewards=rewards,
                next_observations=next_obs,
                next_states=None,
                terminated=terminated,
                truncated=truncated,
                timestep=t,
                timesteps=steps,
                # LinearEnv returns the episode's last observation and resets after it (as OmniIsaacGymEnvs):
                # it is the final one, what SFPPPO's time-limit bootstrap uses (skrl's uses next_obs: the same)
                infos={"final_observations": next_obs},
            )
        agent.post_interaction(timestep=t, timesteps=steps)
        if "Loss / Policy loss" in agent.tracking_data:
            losses.extend(agent.tracking_data.pop("Loss / Policy loss"))
        obs = next_obs
    return losses
