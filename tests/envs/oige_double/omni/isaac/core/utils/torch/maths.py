"""Test double of Isaac Sim 4.0's ``omni.isaac.core.utils.torch.maths.set_seed``: seeds random, numpy and torch,
and with ``torch_deterministic`` turns on torch's deterministic algorithms; returns the seed. Calls are recorded
in ``CALLS``."""

import random

import numpy as np
import torch

CALLS = []


def set_seed(seed, torch_deterministic=False):
    if seed == -1:
        seed = 42 if torch_deterministic else np.random.randint(0, 10000)
    CALLS.append({"seed": seed, "torch_deterministic": torch_deterministic})
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch_deterministic:
        torch.use_deterministic_algorithms(True)
    return seed
