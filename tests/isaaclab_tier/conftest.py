"""The Isaac Lab tier runs only in its own venv (.ci/isaaclab_tier.sh sets OMNI_SFP_ISAACLAB_TIER=1); elsewhere
(the core suite's Python 3.11) it is not collected. Stand-in assets are made once per session from the wheel's
files, and ISAACSIM_ASSET_ROOT points at them before anything imports ``isaaclab.utils.assets``."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TIER = os.environ.get("OMNI_SFP_ISAACLAB_TIER") == "1"

if not TIER:
    collect_ignore_glob = ["test_*.py"]
elif importlib.util.find_spec("isaaclab_tasks") is None:
    raise pytest.UsageError("OMNI_SFP_ISAACLAB_TIER=1 but isaaclab is not installed in this Python")
else:
    sys.path.insert(0, str(HERE))
    import standin_assets

    ASSETS = Path(os.environ.get("OMNI_SFP_ISAACLAB_ASSETS") or tempfile.mkdtemp(prefix="omni-sfp-isaaclab-assets-"))
    os.environ["ISAACSIM_ASSET_ROOT"] = str(standin_assets.make(ASSETS))
