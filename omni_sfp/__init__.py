"""omni-sfp: a safe single-forward-pass shared actor-critic for skrl 2 PPO.

The package face is light: ``import omni_sfp`` loads neither torch, skrl nor anything from Omniverse;
``SharedActorCritic`` and ``SingleForwardPass`` are imported on first use.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["SFPStats", "SharedActorCritic", "SingleForwardPass", "__version__"]

_LAZY = {
    "SharedActorCritic": "omni_sfp.sfp.models",
    "SingleForwardPass": "omni_sfp.sfp.cache",
    "SFPStats": "omni_sfp.sfp.cache",
}


class _CheckoutTasks:
    """``omni_sfp.tasks`` is the repository root's ``tasks/`` (the design's layout, OmniIsaacGymEnvs'). The wheel
    and an editable install map that one name (pyproject's package-dir); a source checkout that is not installed
    (Kit's ``--ext-folder``, ``PYTHONPATH=<checkout>``) gets the same mapping from this finder, last on
    ``sys.meta_path`` so an installed mapping wins. It maps no other name: nothing imports twice."""

    folder = Path(__file__).resolve().parent.parent / "tasks"

    @classmethod
    def find_spec(cls, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "omni_sfp.tasks":
            return None
        return importlib.util.spec_from_file_location(
            fullname, cls.folder / "__init__.py", submodule_search_locations=[str(cls.folder)]
        )


if (
    not (Path(__file__).parent / "tasks").is_dir()  # not a wheel (which holds omni_sfp/tasks)
    and (_CheckoutTasks.folder / "__init__.py").is_file()
    and not any(getattr(f, "__name__", "") == "_CheckoutTasks" for f in sys.meta_path)  # once, also on reload
):
    sys.meta_path.append(_CheckoutTasks)

if TYPE_CHECKING:
    from omni_sfp.sfp.cache import SFPStats, SingleForwardPass
    from omni_sfp.sfp.models import SharedActorCritic


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'omni_sfp' has no attribute {name!r}")
