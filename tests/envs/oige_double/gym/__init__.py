"""Test double of the old ``gym`` package (0.23-0.26) that OmniIsaacGymEnvs' ``rl_task.py`` builds its spaces
with (``from gym import spaces``): only ``spaces.Box``, with gym's attributes (``low``, ``high``, ``shape``,
``dtype``). It is not a ``gymnasium.Space``, which is the point."""

from . import spaces  # noqa: F401
