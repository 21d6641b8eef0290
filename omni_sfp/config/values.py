"""What a composed config's values mean where two settings decide one value, read the same way by everyone who
reads them (the runner, the run folder, the benchmark, the panel).

Standard library only: the panel reads it in Kit without torch or Hydra. A config here is anything with the
attributes of ``cfg/config.yaml`` (an OmegaConf ``DictConfig``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

LAST_CHECKPOINT = Path("checkpoints") / "last.pt"  # a run folder's newest checkpoint


def num_envs(cfg: Any) -> int:
    """The effective number of environments: the top-level ``num_envs``, else the task's ``task.env.num_envs``."""
    return int(cfg.num_envs if cfg.num_envs is not None else cfg.task.env.num_envs)


def max_iterations(cfg: Any) -> int:
    """The run's PPO iterations: the top-level ``max_iterations``, else the task's ``train.max_iterations``."""
    return int(cfg.max_iterations if cfg.max_iterations is not None else cfg.train.max_iterations)


def checkpoint_file(path: str | Path, which: str = "last") -> Path:
    """The file ``checkpoint=<path>`` names: the file itself, or a run folder's ``checkpoints/<which>.pt``
    (``last``: the newest; ``best``: the best training iteration's, which ``test_checkpoint=best`` plays).

    :raises FileNotFoundError: neither exists; the message names the path in one line.
    """
    path = Path(path)
    if path.is_dir():
        chosen = LAST_CHECKPOINT.with_name(f"{which}.pt")
        if not (path / chosen).is_file():
            raise FileNotFoundError(f"checkpoint {path}: run folder has no {chosen.as_posix()}")
        return path / chosen
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path}: no such file or run folder")
    return path


def isaaclab_overrides(cfg: Any) -> list[str]:
    """Isaac Lab's selector tokens as its ``parse_env_cfg(overrides=...)`` takes them (``["presets=dict_box"]``),
    from the top-level ``presets``, ``physics`` and ``renderer``; empty when none is set."""
    from omni_sfp.config.schema import PRESET_TOKENS

    return [f"{key}={getattr(cfg, key)}" for key in PRESET_TOKENS if getattr(cfg, key, None) is not None]


def quote_preset_lists(overrides: list[str]) -> list[str]:
    """``presets=a,b`` is one value (Isaac Lab's comma list), not Hydra's sweep of two: quoted for Hydra. A sweep
    function (``-m presets=choice(a,b)``) stays a sweep."""
    quoted = []
    for override in overrides:
        key, sep, value = override.partition("=")
        if sep and key == "presets" and "," in value and not value.startswith(("'", '"')) and "(" not in value:
            override = f"presets='{value}'"
        quoted.append(override)
    return quoted
