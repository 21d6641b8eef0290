"""tests/kit run in a real Kit kernel (PyPI omniverse-kit, Python 3.12 only): tests/kit/run_kit_tests.sh.

Tests marked ``kit_kernel`` need that kernel: in any other interpreter (the main Python 3.11 run) they are
collected but skipped, with the command to run them. The others (the settings bridge over the
``carb.settings`` stand-in) run in both. Nothing here imports ``omni.kit_app``: importing it boots the kernel
(and asks for the EULA).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def kit_available() -> bool:
    try:
        return importlib.util.find_spec("omni.kit_app") is not None
    except ImportError:  # no `omni` package at all
        return False


def pytest_collection_modifyitems(config, items):
    if kit_available():
        return
    skip = pytest.mark.skip(reason="needs a Kit kernel (omniverse-kit on Python 3.12): tests/kit/run_kit_tests.sh")
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents and item.get_closest_marker("kit_kernel"):
            item.add_marker(skip)
