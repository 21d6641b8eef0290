"""Small Gymnasium tasks for the quality suite, in shapes the public suites lack: image observations and
MultiDiscrete actions. Importing this module registers them, so a user's command reaches them as
``task=gym:omni_sfp.bench.toy_tasks:<Id>``, the way a user's own env is reached. Each is solvable, and its
random and optimal returns are known (:data:`RETURNS`).

- ``OmniSfpBench/SidePick-v0``: uint8 HxWxC images, ``Discrete(2)``: pick the side that holds a bright blob
  (issue 38's task: with the old generic settings it reached 49 of 50, then collapsed to random play).
- ``OmniSfpBench/PixelTarget-v0``: uint8 images, ``MultiDiscrete([3, 3])``: name the row and column of the blob
  on a 3 x 3 grid.
- ``OmniSfpBench/MatchTheTarget-v0``: a flat one-hot observation, ``MultiDiscrete([3, 3])``: repeat the target
  shown.
"""

from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces


class SidePick(gymnasium.Env):
    """A bright 3 x 3 blob on a dark ``size`` x ``size`` RGB image (pixels below ``noise`` elsewhere), on the left
    or the right half; action 0 says left, 1 right; reward 1 when right. A new image every step, ``steps`` steps
    an episode: random play earns ``steps / 2``, a perfect policy ``steps``."""

    metadata = {"render_modes": []}

    def __init__(self, size: int = 16, steps: int = 50, noise: int = 0) -> None:
        self.size, self.steps_per_episode, self.noise = size, steps, noise
        self.observation_space = spaces.Box(0, 255, (size, size, 3), dtype=np.uint8)
        self.action_space = spaces.Discrete(2)

    def _draw(self) -> np.ndarray:
        rng, size = self.np_random, self.size
        self.side = int(rng.integers(2))
        image = rng.integers(0, self.noise + 1, (size, size, 3), dtype=np.uint8)
        half = size // 2
        row = int(rng.integers(0, size - 2))
        column = int(rng.integers(0, half - 2)) + half * self.side
        image[row : row + 3, column : column + 3] = 255
        return image

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        reward = float(int(action) == self.side)
        self.t += 1
        return self._draw(), reward, False, self.t >= self.steps_per_episode, {}


class PixelTarget(gymnasium.Env):
    """A bright blob in one cell of a 3 x 3 grid on a ``size`` x ``size`` grey image; the action names its row and
    column (``MultiDiscrete([3, 3])``), 1 for each right; ``steps`` steps an episode: random play earns
    ``2 * steps / 3``, perfect ``2 * steps``."""

    metadata = {"render_modes": []}

    def __init__(self, size: int = 12, steps: int = 20) -> None:
        self.size, self.steps_per_episode = size, steps
        self.observation_space = spaces.Box(0, 255, (size, size, 1), dtype=np.uint8)
        self.action_space = spaces.MultiDiscrete([3, 3])

    def _draw(self) -> np.ndarray:
        rng, cell = self.np_random, self.size // 3
        self.target = rng.integers(0, 3, size=2)
        image = rng.integers(0, 40, (self.size, self.size, 1), dtype=np.uint8)
        top, left = self.target * cell
        image[top : top + cell, left : left + cell] = 255
        return image

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        reward = float(np.sum(np.asarray(action) == self.target))
        self.t += 1
        return self._draw(), reward, False, self.t >= self.steps_per_episode, {}


class MatchTheTarget(gymnasium.Env):
    """The target (two numbers in 0-2) shown one-hot in a flat observation; the action repeats it
    (``MultiDiscrete([3, 3])``), 1 for each part right; ``steps`` steps an episode: random play earns
    ``2 * steps / 3``, perfect ``2 * steps``."""

    metadata = {"render_modes": []}

    def __init__(self, steps: int = 20) -> None:
        self.steps_per_episode = steps
        self.observation_space = spaces.Box(0.0, 1.0, (6,), dtype=np.float32)
        self.action_space = spaces.MultiDiscrete([3, 3])

    def _draw(self) -> np.ndarray:
        self.target = self.np_random.integers(0, 3, size=2)
        one_hot = np.zeros(6, dtype=np.float32)
        one_hot[self.target[0]], one_hot[3 + self.target[1]] = 1, 1
        return one_hot

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        reward = float(np.sum(np.asarray(action) == self.target))
        self.t += 1
        return self._draw(), reward, False, self.t >= self.steps_per_episode, {}


MODULE = __name__
TASKS = {  # id -> (entry point, random play's return, a perfect policy's return)
    "OmniSfpBench/SidePick-v0": (SidePick, 25.0, 50.0),
    "OmniSfpBench/PixelTarget-v0": (PixelTarget, 40.0 / 3, 40.0),
    "OmniSfpBench/MatchTheTarget-v0": (MatchTheTarget, 40.0 / 3, 40.0),
}
RETURNS = {f"gym:{MODULE}:{task_id}": (random, best) for task_id, (_, random, best) in TASKS.items()}

for _task_id, (_entry, _, _) in TASKS.items():
    if _task_id not in gymnasium.registry:
        gymnasium.register(_task_id, entry_point=_entry)
