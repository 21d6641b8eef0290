"""omni-sfp: a safe single-forward-pass shared actor-critic for skrl 2 PPO.

The package face is light: ``import omni_sfp`` loads neither torch, skrl nor anything from Omniverse;
``SharedActorCritic`` and ``SingleForwardPass`` are imported on first use.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["SFPStats", "SharedActorCritic", "SingleForwardPass", "__version__"]

_LAZY = {
    "SharedActorCritic": "omni_sfp.models",
    "SingleForwardPass": "omni_sfp.cache",
    "SFPStats": "omni_sfp.cache",
}

# tasks/ lives at the repository root (the Kit extension root, OmniIsaacGymEnvs' layout) and a wheel
# installs it as omni_sfp/tasks. In a source checkout (Kit's --ext-folder, or running from the root
# without installing), let the subpackage omni_sfp.tasks resolve to that folder.
_CHECKOUT_ROOT = Path(__file__).resolve().parent.parent
if not (Path(__file__).parent / "tasks").is_dir() and (_CHECKOUT_ROOT / "extension.toml").is_file():
    __path__.append(str(_CHECKOUT_ROOT))

if TYPE_CHECKING:
    from omni_sfp.cache import SFPStats, SingleForwardPass
    from omni_sfp.models import SharedActorCritic


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'omni_sfp' has no attribute {name!r}")
