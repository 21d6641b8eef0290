"""The rl_games rows, driven the way OmniIsaacGymEnvs drives rl_games (``scripts/rlgames_train.py``).

The env is registered with ``vecenv.register`` + ``env_configurations.register`` and the run goes through
``Runner(observer).load(cfg)`` / ``.run({"train": True, ...})``; the config is OmniIsaacGymEnvs' Ant PPO
config with the benchmark's :class:`~omni_sfp.bench.configs.Work` filled in. rl_games 1.6.5 is an optional
dependency (``pip install 'omni-sfp[bench]'``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from rl_games.common import env_configurations, vecenv
from rl_games.common.algo_observer import AlgoObserver
from rl_games.common.ivecenv import IVecEnv
from rl_games.torch_runner import Runner

from omni_sfp.bench.configs import Row, Work, kernels_info

ENV_NAME = "omni_sfp_bench"


class SkrlToRLGames(IVecEnv):
    """rl_games' vec-env protocol over a skrl-wrapped env (the role of OmniIsaacGymEnvs' ``RLGPUEnv``):
    ``reset() -> {"obs"}``, ``step(a) -> ({"obs"}, rewards (N,), dones (N,), {"time_outs": (N,)})``."""

    def __init__(self, config_name: str, num_actors: int, **kwargs) -> None:
        self.env = env_configurations.configurations[config_name]["env_creator"](**kwargs)

    def reset(self) -> dict[str, torch.Tensor]:
        observations, _ = self.env.reset()
        return {"obs": observations}

    def step(self, actions: torch.Tensor):
        observations, rewards, terminated, truncated, _ = self.env.step(actions)
        dones = (terminated | truncated).view(-1).to(torch.uint8)
        return {"obs": observations}, rewards.view(-1), dones, {"time_outs": truncated.view(-1)}

    def get_number_of_agents(self) -> int:
        return 1

    def get_env_info(self) -> dict[str, Any]:
        return {
            "observation_space": self.env.observation_space,
            "action_space": self.env.action_space,
            "agents": 1,
            "value_size": 1,
        }


class UpdateObserver(AlgoObserver):
    """Calls ``on_update`` once per rl_games epoch (= one PPO update), after its statistics are written."""

    def __init__(self, on_update: Callable[[], None]) -> None:
        super().__init__()
        self.on_update = on_update

    def after_print_stats(self, frame, epoch_num, total_time) -> None:
        self.on_update()


def rlgames_config(
    work: Work,
    row: Row,
    *,
    device: str,
    seed: int,
    threads: int,
    train_dir: str,
    compile_model: bool,
    bounded_actions: bool,
) -> dict[str, Any]:
    """OmniIsaacGymEnvs' AntPPO.yaml with the benchmark's work: fixed learning rate, no checkpoint before the end
    (``save_best_after`` past the last epoch, ``save_frequency`` 0), ``max_epochs`` set and ``max_steps``
    unset (rl_games 1.6.5 mishandles it), checkpoints and summaries under ``train_dir``."""
    return {
        "params": {
            "seed": seed,
            "torch_threads": threads,
            "algo": {"name": "a2c_continuous"},
            "model": {"name": "continuous_a2c_logstd"},
            "network": {
                "name": "actor_critic",
                "separate": False,
                "space": {
                    "continuous": {
                        "mu_activation": "None",
                        "sigma_activation": "None",
                        "mu_init": {"name": "default"},
                        "sigma_init": {"name": "const_initializer", "val": 0},
                        "fixed_sigma": True,
                    }
                },
                "mlp": {
                    "units": list(work.units),
                    "activation": work.activation,
                    "d2rl": False,
                    "initializer": {"name": "default"},
                    "regularizer": {"name": "None"},
                },
            },
            "config": {
                "name": "bench",
                "full_experiment_name": "bench",
                "env_name": ENV_NAME,
                "device": device,
                "device_name": device,
                "multi_gpu": False,
                "ppo": True,
                "mixed_precision": row.mixed_precision,
                "normalize_input": True,
                "normalize_value": True,
                "value_bootstrap": True,
                "num_actors": work.num_envs,
                "reward_shaper": {"scale_value": work.rewards_scale},
                "normalize_advantage": True,
                "gamma": work.discount_factor,
                "tau": work.gae_lambda,
                "learning_rate": work.learning_rate,
                "lr_schedule": None,  # the identity scheduler: a fixed learning rate
                "schedule_type": "legacy",
                "kl_threshold": 0.008,
                "score_to_win": math.inf,
                "max_epochs": work.total_updates,
                "save_best_after": work.total_updates + 1,
                "save_frequency": 0,
                "grad_norm": work.grad_norm_clip,
                "entropy_coef": 0.0,
                "truncate_grads": True,
                "e_clip": work.ratio_clip,
                "clip_value": True,
                "horizon_length": work.horizon,
                "minibatch_size": work.minibatch_size,
                "mini_epochs": work.epochs,
                "critic_coef": 2,  # rl_games' loss takes 0.5 * critic_coef: the value loss weighs 1, as in the skrl rows
                "seq_length": 4,
                "bounds_loss_coef": 0.0,
                "clip_actions": bounded_actions,  # rescaling to an unbounded space would give NaN
                "train_dir": train_dir,
                "torch_compile": compile_model,
            },
        }
    }


def float32_precision() -> tuple:
    """What decides whether a float32 matrix product may run in TF32: the matmul precision and cuDNN's flags."""
    backends = torch.backends
    return (
        torch.get_float32_matmul_precision(),
        backends.cuda.matmul.allow_tf32,
        backends.cudnn.allow_tf32,
        backends.cudnn.benchmark,
    )


def restore_float32_precision(state: tuple) -> None:
    """Undo rl_games 1.6.5's ``Runner.__init__`` (torch_runner.py), which sets ``allow_tf32``,
    ``set_float32_matmul_precision('high')`` and ``cudnn.benchmark`` for the whole process: on a GPU its
    'fp32' row would do TF32 arithmetic while every other row does fp32 (measured on an H200: 116% of the
    fp32 GEMM ceiling)."""
    precision, matmul_tf32, cudnn_tf32, benchmark = state
    torch.set_float32_matmul_precision(precision)
    torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = cudnn_tf32, benchmark


def run_rlgames(
    env,
    work: Work,
    row: Row,
    *,
    seed: int,
    threads: int,
    train_dir: str,
    compile_model: bool,
    on_update: Callable[[], None],
) -> dict[str, Any]:
    """Train ``work.total_updates`` updates of rl_games on ``env`` (a skrl wrapper); ``on_update`` after each."""
    device = str(env.device)
    device = "cuda:0" if device == "cuda" else device
    vecenv.register(
        "OMNI_SFP_BENCH", lambda config_name, num_actors, **kwargs: SkrlToRLGames(config_name, num_actors, **kwargs)
    )
    env_configurations.register(ENV_NAME, {"vecenv_type": "OMNI_SFP_BENCH", "env_creator": lambda **kwargs: env})
    space = env.action_space
    bounded = bool((abs(space.low) < math.inf).all() and (abs(space.high) < math.inf).all())
    precision = float32_precision()
    runner = Runner(UpdateObserver(on_update))
    restore_float32_precision(precision)  # its constructor turns TF32 on for the process: fp32 stays fp32 here
    runner.load(
        rlgames_config(
            work,
            row,
            device=device,
            seed=seed,
            threads=threads,
            train_dir=train_dir,
            compile_model=compile_model,
            bounded_actions=bounded,
        )
    )
    runner.reset()
    runner.run({"train": True, "play": False, "checkpoint": "", "sigma": None})
    # rl_games 1.6.5 always builds Adam(fused=True) and torch's nn.ELU; its process keeps glibc's malloc defaults
    kernels = {"elu_no_grad": "torch", "elu_autograd": "torch", "allocator": "glibc", "fused_adam": True}
    kernels["threads"] = torch.get_num_threads()
    return {
        "torch_compile": compile_model,
        "fused_adam": True,
        "kernels": kernels_info(kernels),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),  # "highest" unless asked: see above
    }
