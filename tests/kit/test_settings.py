"""omni_sfp.kit.settings (the carb settings <-> panel model bridge) over the ``carb.settings`` stand-in, and the
stand-in itself checked against the real ``carb.settings`` of a Kit 110.4 kernel (``kit_kernel``: the Kit tier).

The bridge tests run in every tier (standard library and the stand-in only); the end-to-end behaviour in a
real kernel (manifest, command line, runtime edits, shutdown) is tests/kit/test_kit_extension.py.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import carb_settings_double
import pytest

from omni_sfp.config.toggles import TOGGLE_BY_KEY, coerce
from omni_sfp.kit.panel_model import DEFAULTS, PanelModel

ROOT = Path(__file__).resolve().parents[2]
BASE = "/exts/omni.sfp"


@pytest.fixture
def kit(monkeypatch):
    """``(settings, carb, module)``: the stand-in in ``sys.modules`` and omni_sfp/kit/settings.py loaded over it
    (alone, over the stand-in)."""
    modules = carb_settings_double.modules()
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("settings_under_test", ROOT / "omni_sfp" / "kit" / "settings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    carb = modules["carb"]
    return carb.settings.get_settings(), carb, module


def manifest(settings, **values):
    """What Kit does with the manifest's ``[settings]`` (and a .kit file): typed values under /exts/omni.sfp."""
    for key, value in values.items():
        settings.set(f"{BASE}/{key}", value)


def test_settings_present_reach_the_model_and_missing_ones_are_seeded_with_their_type(kit):
    settings, _, module = kit
    manifest(settings, num_envs=64, units=[32, 32], mixed_precision=True)
    model = PanelModel()
    bridge = module.SettingsBridge(model)
    assert model.get("num_envs") == 64 and model.get("units") == (32, 32) and model.get("mixed_precision") is True
    kinds = {"bool": bool, "bool_auto": str, "int": int, "str": str, "ints": list}  # bool_auto: "auto" by default
    for key, toggle in TOGGLE_BY_KEY.items():  # every toggle has a setting now, of its kind
        value = settings.get(f"{BASE}/{key}")
        assert type(value) is kinds[toggle.kind] and coerce(key, value) == model.get(key), key
    assert settings.get(module.OVERRIDES) == model.to_overrides()
    assert "num_envs=64" in model.to_overrides() and bridge.errors == []


def test_runtime_changes_reach_the_model_and_the_published_overrides(kit):
    settings, _, module = kit
    model = PanelModel()
    module.SettingsBridge(model)
    settings.set(f"{BASE}/num_envs", 128)  # an existing node: CHANGED
    settings.set(f"{BASE}/units", [64])  # an array rewritten with set(): DESTROYED, then CREATED
    settings.set_string(f"{BASE}/mixed_precision", "true")  # text, as from a command line
    assert (model.get("num_envs"), model.get("units"), model.get("mixed_precision")) == (128, (64,), True)
    published = settings.get(module.OVERRIDES)
    assert "num_envs=128" in published and "train.models.units=[64]" in published
    assert "train.mixed_precision=true" in published
    assert settings.get(f"{BASE}/mixed_precision") == "true"  # it agrees with the model: not rewritten


def test_a_refused_setting_is_one_error_line_and_the_model_keeps_its_value(kit):
    settings, carb, module = kit
    model = PanelModel()
    bridge = module.SettingsBridge(model)
    settings.set(f"{BASE}/num_envs", -3)
    settings.set_int_array(f"{BASE}/units", [])  # carb keeps an empty array as an empty dictionary
    assert model.get("num_envs") == DEFAULTS["num_envs"] and model.get("units") == DEFAULTS["units"]
    assert len(bridge.errors) == 2 and all(
        line.startswith("[omni.sfp] setting /exts/omni.sfp/") for line in bridge.errors
    )
    assert "num_envs" in bridge.errors[0] and "units" in bridge.errors[1]
    assert carb.logged == [("error", line) for line in bridge.errors]
    assert f"num_envs={DEFAULTS['num_envs']}" in settings.get(module.OVERRIDES)


def test_a_panel_edit_writes_its_setting_once_with_its_type(kit):
    settings, _, module = kit
    model = PanelModel()
    module.SettingsBridge(model)
    events = []
    for key in ("seed", "units", "headless", "device"):
        settings.subscribe_to_node_change_events(
            f"{BASE}/{key}", lambda _item, event, key=key: events.append((key, event.name))
        )
    model.set("seed", 7)
    model.set("units", [8, 8])
    model.set("headless", not DEFAULTS["headless"])
    model.set("device", "cpu")
    assert settings.get(f"{BASE}/seed") == 7 and settings.get(f"{BASE}/units") == [8, 8]
    assert settings.get(f"{BASE}/headless") is (not DEFAULTS["headless"]) and settings.get(f"{BASE}/device") == "cpu"
    # one write each, and the write's own event does not come back as a second change
    assert events == [("seed", "CHANGED"), ("units", "CHANGED"), ("headless", "CHANGED"), ("device", "CHANGED")]
    assert "seed=7" in settings.get(module.OVERRIDES)


def test_the_compile_setting_is_a_bool_or_the_string_auto_in_both_directions(kit):
    settings, _, module = kit
    model = PanelModel()
    bridge = module.SettingsBridge(model)
    assert settings.get(f"{BASE}/compile") == "auto" and "train.models.compile=auto" in settings.get(module.OVERRIDES)
    settings.set_bool(f"{BASE}/compile", True)  # `--/exts/omni.sfp/compile=true`
    assert model.get("compile") is True and "train.models.compile=true" in settings.get(module.OVERRIDES)
    model.set("compile", False)  # the panel's combo box
    assert settings.get(f"{BASE}/compile") is False
    model.set("compile", "auto")
    assert settings.get(f"{BASE}/compile") == "auto" and "train.models.compile=auto" in settings.get(module.OVERRIDES)
    settings.set_string(f"{BASE}/compile", "sometimes")
    assert model.get("compile") == "auto" and bridge.errors == [
        "[omni.sfp] setting /exts/omni.sfp/compile ignored: compile='sometimes' is not allowed: expected true, false "
        "or auto"
    ]


def test_destroy_ends_both_directions_and_removes_the_published_overrides(kit):
    settings, _, module = kit
    model = PanelModel()
    bridge = module.SettingsBridge(model)
    assert bridge.subscription_count == len(TOGGLE_BY_KEY) + 1 and model.listener_count == 1
    bridge.destroy()
    assert bridge.subscription_count == 0 and model.listener_count == 0
    assert settings.get(module.OVERRIDES) is None
    settings.set(f"{BASE}/num_envs", 256)
    model.set("seed", 11)
    assert model.get("num_envs") == DEFAULTS["num_envs"] and settings.get(f"{BASE}/seed") == DEFAULTS["seed"]


# ---- the stand-in against the real carb.settings ---------------------------------------------------------------
# Run with `settings` (carb.settings.get_settings(), or the stand-in's) and `trace` (a list) in scope. The calls
# are the ones omni_sfp.kit.settings makes, on fresh and existing nodes, plus the type rules around them.
SCENARIO = """
def _watch(path):
    def on_change(_item, event_type):
        trace.append(["event", path, event_type.name, settings.get(path)])
    return settings.subscribe_to_node_change_events(path, on_change)


def _step(label, call):
    try:
        trace.append(["step", label, call()])
    except TypeError:
        trace.append(["TypeError", label])


subscriptions = [_watch(path) for path in ("/t", "/t/a", "/t/b", "/t/c", "/t/d", "/t/e")]
_step("missing", lambda: [settings.get("/t/a"), settings.get("/t")])
_step("set_default_int on a missing node", lambda: settings.set_default_int("/t/a", 5))
_step("set_default_int on an existing node", lambda: settings.set_default_int("/t/a", 7))
_step("set_int, same value", lambda: settings.set_int("/t/a", 5))
_step("set int", lambda: settings.set("/t/a", 8))
_step("set_string on an int node", lambda: settings.set_string("/t/a", "x"))
_step("read back", lambda: [settings.get("/t/a"), type(settings.get("/t/a")).__name__])
_step("set_int_array", lambda: settings.set_int_array("/t/a", [1, 2]))
_step("set_int_array, same", lambda: settings.set_int_array("/t/a", [1, 2]))
_step("set_int_array, longer", lambda: settings.set_int_array("/t/a", [1, 2, 3]))
_step("set list on an array", lambda: settings.set("/t/a", [4]))
_step("set list on a missing node", lambda: settings.set("/t/b", [1, 2]))
_step("set list, same", lambda: settings.set("/t/b", [1, 2]))
_step("set int on an array", lambda: settings.set("/t/b", 3))
_step("set_int_array empty", lambda: settings.set_int_array("/t/b", []))
_step("read empty array", lambda: settings.get("/t/b"))
_step("set_bool", lambda: settings.set_bool("/t/c", True))
_step("set_int on a bool node", lambda: settings.set_int("/t/c", 1))
_step("read back", lambda: [settings.get("/t/c"), type(settings.get("/t/c")).__name__])
_step("set_int with a bool", lambda: settings.set_int("/t/c", True))
_step("set_bool with an int", lambda: settings.set_bool("/t/c", 0))
_step("set_int with a str", lambda: settings.set_int("/t/c", "1"))
_step("set_string with an int", lambda: settings.set_string("/t/c", 5))
_step("set str on a missing node", lambda: settings.set("/t/d", "s"))
_step("set_string_array on a str node", lambda: settings.set_string_array("/t/d", ["u", "v"]))
_step("set_default_string on an array", lambda: settings.set_default_string("/t/d", "w"))
_step("set_default_bool on a missing node", lambda: settings.set_default_bool("/t/e", False))
_step("the parent", lambda: settings.get("/t"))
_step("paths", lambda: [settings.get("t/e"), settings.get("/t/e/")])
_step("destroy_item", lambda: settings.destroy_item("/t/a"))
_step("destroy_item, missing", lambda: settings.destroy_item("/t/a"))
_step("unsubscribe", lambda: settings.unsubscribe_to_change_events(subscriptions[1]))
_step("unsubscribe again", lambda: settings.unsubscribe_to_change_events(subscriptions[1]))
_step("set after unsubscribe", lambda: settings.set_int("/t/a", 4))
_step("destroy the parent", lambda: settings.destroy_item("/t"))
_step("after", lambda: [settings.get("/t"), settings.get("/t/c")])
_step("a child creates its parent", lambda: settings.set_int("/t/c", 2))
for subscription in subscriptions:
    settings.unsubscribe_to_change_events(subscription)
_step("no subscribers", lambda: settings.set_int("/t/c", 3))
"""


def stand_in_trace() -> list:
    trace: list = []
    exec(SCENARIO, {"settings": carb_settings_double.Settings(), "trace": trace})
    return json.loads(json.dumps(trace))  # as the Kit run's trace comes back: JSON


def siblings_in_path_order(trace: list) -> list:
    """Each run of DESTROYED events (a ``destroy_item``) sorted deepest first, then by path: carb sends children
    before their parent, siblings in its dictionary's hash order, which nothing may rely on."""
    rows, start = list(trace), 0
    while start < len(rows):
        end = start
        while end < len(rows) and rows[end][0] == "event" and rows[end][2] == "DESTROYED":
            end += 1
        rows[start:end] = sorted(rows[start:end], key=lambda row: (-row[1].count("/"), row[1]))
        start = max(end, start + 1)
    return rows


@pytest.mark.kit_kernel
def test_the_stand_in_behaves_as_kit_110_4_carb_settings(tmp_path):
    from kit_harness import run_kit

    body = "trace = []\n" + SCENARIO + "\nresults['trace'] = trace\n"
    real = siblings_in_path_order(run_kit(tmp_path, body, enable=False).results["trace"])
    ours = stand_in_trace()
    for index, (theirs, mine) in enumerate(zip(real, ours, strict=False)):
        assert mine == theirs, f"row {index}: carb.settings gave {theirs}, the stand-in {mine}"
    assert len(ours) == len(real)
