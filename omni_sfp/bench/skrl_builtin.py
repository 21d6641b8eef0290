"""The skrl built-in rows: skrl's own shared model with its unkeyed single forward pass, trained by plain skrl PPO
under skrl's SequentialTrainer. It is the peer that omni-sfp's safe, keyed cache must not be slower than."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from skrl.agents.torch.ppo import PPO
from skrl.memories.torch import RandomMemory
from skrl.models.torch import Model
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.trainers.torch import SequentialTrainer, SequentialTrainerCfg
from skrl.utils.model_instantiators.torch import shared_model

from omni_sfp.bench.configs import Row, Work, kernels_info
from omni_sfp.bench.omni import omni_config
from omni_sfp.compute.device import resolve_device
from omni_sfp.run.runner import ppo_cfg


def skrl_shared_model(
    env, device, *, units, activation: str, initial_log_std: float = 0.0, single_forward_pass: bool = True
) -> Model:
    """skrl's own ``shared_model`` with our structure: the same trunk (units, activation), a Gaussian policy head
    with a state-independent log std, and a value head. The benchmark's skrl rows and the quality mode's plain
    skrl row both build it here."""
    network = [{"name": "net", "input": "OBSERVATIONS", "layers": list(units), "activations": activation}]
    model = shared_model(
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=device,
        structure=["GaussianMixin", "DeterministicMixin"],
        roles=["policy", "value"],
        parameters=[
            {
                "network": network,
                "output": "ACTIONS",
                "clip_log_std": True,
                "min_log_std": -20.0,
                "max_log_std": 2.0,
                "initial_log_std": float(initial_log_std),
            },
            {"network": network, "output": "ONE"},
        ],
        single_forward_pass=single_forward_pass,
    )
    for role in ("policy", "value"):  # materialise the lazy layers, as skrl's Runner does
        model.init_state_dict(role=role)
    return model


def builtin_shared_model(env, work: Work, device) -> Model:
    """skrl's ``shared_model(single_forward_pass=True)`` on the benchmark's network."""
    return skrl_shared_model(env, device, units=work.units, activation=work.activation)


class TimedPPO(PPO):
    """skrl's PPO, unchanged, plus a callback after each update (the benchmark's clock)."""

    def __init__(self, *args, on_update: Callable[[], None], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.on_update = on_update

    def post_interaction(self, *, timestep: int, timesteps: int) -> None:
        super().post_interaction(timestep=timestep, timesteps=timesteps)
        if self.training and not self._rollout % self.cfg.rollouts:
            self.on_update()


def run_skrl_builtin(
    env, work: Work, row: Row, *, device: str, seed: int, on_update: Callable[[], None]
) -> dict[str, Any]:
    """Train ``work.total_updates`` updates of plain skrl PPO with skrl's shared model on ``env``."""
    cfg = omni_config(work, row, device=device, seed=seed)
    torch_device = resolve_device(cfg.device)
    model = builtin_shared_model(env, work, torch_device)
    models = {"policy": model, "value": model}
    # the product's own config -> PPO_CFG mapping, so this row's hyperparameters equal the omni-sfp rows'
    agent_cfg = ppo_cfg(cfg, env, torch_device, run_dir=None, scaler=RunningStandardScaler)
    agent = TimedPPO(
        models=models,
        memory=RandomMemory(memory_size=work.horizon, num_envs=env.num_envs, device=torch_device),
        observation_space=env.observation_space,
        action_space=env.action_space,
        device=torch_device,
        cfg=agent_cfg,
        on_update=on_update,
    )
    trainer_cfg = SequentialTrainerCfg(
        timesteps=work.total_updates * work.horizon,
        headless=True,
        disable_progressbar=True,
        close_environment_at_exit=False,
    )
    SequentialTrainer(env=env, agents=agent, cfg=trainer_cfg).train()
    fused = bool(agent.optimizer.defaults.get("fused"))
    kernels = {"elu_no_grad": "torch", "elu_autograd": "torch", "allocator": "glibc", "fused_adam": fused}
    kernels["threads"] = torch.get_num_threads()  # skrl's nn.ELU, glibc's malloc defaults
    return {"fused_adam": fused, "kernels": kernels_info(kernels)}
