"""Fixtures for the adapter tests: OmniIsaacGymEnvs' double (tests/envs/oige_double) on sys.path, and a registry
whose registrations vanish with the test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from omni_sfp.envs import registry

DOUBLE = Path(__file__).resolve().parent / "oige_double"
DOUBLE_MODULES = ("gym", "omni", "omniisaacgymenvs")


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations (tasks, resolvers, loaded task sources) made by a test vanish with it."""
    monkeypatch.setattr(registry, "_TASKS", dict(registry._TASKS))
    monkeypatch.setattr(registry, "_RESOLVERS", list(registry._RESOLVERS))
    monkeypatch.setattr(registry, "_SOURCES", {"loaded": False, "errors": []})


def _forget_double_modules() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in DOUBLE_MODULES:
            del sys.modules[name]


@pytest.fixture
def oige_double(monkeypatch, scratch_registry):
    """OmniIsaacGymEnvs 4.0.0's double installed for one test: its package folder, with Hydra cleared after."""
    from hydra.core.global_hydra import GlobalHydra

    _forget_double_modules()
    monkeypatch.syspath_prepend(str(DOUBLE))
    from omniisaacgymenvs.envs import vec_env_rlgames

    vec_env_rlgames.LAUNCHES.clear()
    yield DOUBLE / "omniisaacgymenvs"
    GlobalHydra.instance().clear()
    _forget_double_modules()
