"""extension.toml and config/omni.sfp.train.kit: complete, parseable, and one source of truth with cfg/.

The toggles' defaults live in three places that must agree: the manifest's [settings] (what Kit starts with),
omni_sfp.kit.panel_model.DEFAULTS (what the controller starts with outside Kit) and the resolved Hydra config
(what `python -m omni_sfp.train` runs with no overrides).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from omni_sfp.kit import panel_model
from omni_sfp.kit.panel_model import DEFAULTS, TOGGLE_BY_KEY, TOGGLES, PanelModel

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "extension.toml"
KIT_APP = ROOT / "config" / "omni.sfp.train.kit"
# toggle -> where its default lives in the resolved config when the top-level key is null ("the default")
RESOLVED_DEFAULT = {"num_envs": "task.env.num_envs", "max_iterations": "train.max_iterations", "task": "task.name"}


@pytest.fixture(scope="module")
def manifest() -> dict:
    return tomllib.loads(MANIFEST.read_text())


@pytest.fixture(scope="module")
def settings(manifest) -> dict:
    return manifest["settings"]["exts"]["omni.sfp"]


def compose(overrides: list[str] = ()):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "cfg"), version_base=None):
        return hydra_compose(config_name="config", overrides=list(overrides))


def resolved(cfg, toggle) -> object:
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, toggle.override, throw_on_missing=True)
    if value is None and toggle.key in RESOLVED_DEFAULT:
        value = OmegaConf.select(cfg, RESOLVED_DEFAULT[toggle.key], throw_on_missing=True)
    if toggle.key == "task":
        value = OmegaConf.select(cfg, "task.name")
    return OmegaConf.to_container(value) if hasattr(value, "_content") else value


def plain(value):
    return list(value) if isinstance(value, (list, tuple)) else value


def test_package_section_is_complete(manifest):
    package = manifest["package"]
    for key in ("title", "version", "description", "category", "keywords", "readme", "changelog"):
        assert package.get(key), f"[package] {key} is missing or empty"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert package["version"] == pyproject["project"]["version"] == "0.1.0"
    assert isinstance(package["keywords"], list) and package["keywords"]
    assert package["readme"] == "README.md" and package["changelog"] == "docs/CHANGELOG.md"
    assert "## [0.1.0]" in (ROOT / package["changelog"]).read_text()


def test_readme_named_by_the_manifest_exists(manifest):
    assert (ROOT / manifest["package"]["readme"]).is_file()


def test_every_dependency_is_optional(manifest):
    # a hard dependency a bare kernel cannot resolve (no registry) stops the extension from enabling
    dependencies = manifest["dependencies"]
    assert {"omni.ui", "omni.kit.menu.utils"} <= set(dependencies)
    assert all(spec.get("optional") is True for spec in dependencies.values()), dependencies


def test_python_module_is_the_kit_extension(manifest):
    modules = [m["name"] for m in manifest["python"]["module"]]
    assert modules == ["omni_sfp.kit.extension"]
    assert (ROOT / "omni_sfp" / "kit" / "extension.py").is_file()


def test_test_section_runs_headless(manifest):
    (test,) = manifest["test"]
    assert "--no-window" in test["args"] and "--/app/fastShutdown=false" in test["args"]


def test_settings_hold_every_toggle_with_the_controller_defaults(settings):
    assert set(settings) == set(TOGGLE_BY_KEY)
    for key, value in settings.items():
        assert panel_model.coerce(key, value) == DEFAULTS[key], key
        assert plain(value) == plain(DEFAULTS[key]), key  # same TOML type, not just coercible


def test_manifest_defaults_equal_the_resolved_hydra_config(settings):
    cfg = compose()
    for toggle in TOGGLES:
        if toggle.override is None:  # launcher-only (python_exe)
            continue
        assert plain(settings[toggle.key]) == resolved(cfg, toggle), f"{toggle.key} vs cfg {toggle.override}"


def test_default_overrides_change_nothing():
    with_overrides, without = compose(PanelModel().to_overrides()), compose()
    for toggle in TOGGLES:
        if toggle.override is not None:
            assert resolved(with_overrides, toggle) == resolved(without, toggle), toggle.key
    for key in ("num_envs", "max_iterations"):  # null ("the task's / train's default") became that default, explicitly
        with_overrides[key] = without[key] = None
    assert with_overrides == without


def test_every_override_reaches_its_config_key(tmp_path):
    values = {
        "task": "LQR60x8",
        "num_envs": 64,
        "sfp_enabled": False,
        "cache_check": "identity",
        "mixed_precision": True,
        "units": [32, 16],
        "compile": False,
        "max_iterations": 3,
        "checkpoint": str(tmp_path / "a run" / "it's.pt"),
        "headless": False,
        "seed": 7,
        "device": "cuda:1",
        "video": True,
        "export": True,
    }
    model = PanelModel(values)
    cfg = compose(model.to_overrides())
    for toggle in TOGGLES:
        if toggle.override is not None:
            assert resolved(cfg, toggle) == plain(values[toggle.key]), toggle.key


def test_kit_app_file_enables_the_extension_and_sets_only_valid_toggles(settings):
    app = tomllib.loads(KIT_APP.read_text())
    assert app["package"]["title"] and app["package"]["version"] == "0.1.0"
    assert "omni.sfp" in app["dependencies"]
    toggles = app["settings"]["exts"]["omni.sfp"]
    assert set(toggles) == set(TOGGLE_BY_KEY)
    for key, value in toggles.items():
        assert plain(value) == plain(settings[key]), f"{key}: the .kit file's value differs from the manifest's"
    assert "${app}/../.." in app["settings"]["app"]["exts"]["folders"]["++"]
