"""skrl 2 wrapper of the embedded tasks."""

from __future__ import annotations

from typing import Any

import torch
from skrl.envs.wrappers.torch.base import Wrapper


class EmbeddedEnvWrapper(Wrapper):
    """Expose an embedded task (a :class:`~omni_sfp.tasks.base.VecTask`) to skrl 2 unchanged.

    Built as ``EmbeddedEnvWrapper(task)``. The tasks already speak skrl's vectorised protocol (device tensors,
    ``(N, 1)`` rewards and flags, auto-reset), so every call forwards; ``num_envs``, ``device`` and the spaces
    come from skrl's base class, which reads them from the task.
    """

    def reset(self) -> tuple[torch.Tensor, dict[str, Any]]:
        return self._env.reset()

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        return self._env.step(actions)

    def state(self) -> None:
        """The embedded tasks have no privileged state beyond the observation."""
        return

    def render(self, *args, **kwargs) -> None:
        """The embedded tasks are headless: nothing to draw."""
        return

    def close(self) -> None:
        self._env.close()
