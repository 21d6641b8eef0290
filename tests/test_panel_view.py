"""omni_sfp.kit.panel (the omni.ui view) bound to a real PanelModel, over a recording stand-in for omni.ui.

omni.ui is not installable here, so ``FakeUI`` implements the part of its API the panel uses (Window with a
build_fn frame, VStack/HStack/Frame containers, Label, Button, ComboBox, IntField, CheckBox, StringField and
the Simple*Model value models with value-changed / end-edit callbacks). This checks the binding logic (edits
reach the model, model changes reach the widgets without echo, errors are shown, buttons follow the run
state); that the real omni.ui accepts these calls is checked by hand in Isaac Sim (docs/isaac-sim.md).
"""

from __future__ import annotations

import importlib.util
import sys
import time
import types
from pathlib import Path

import pytest

from omni_sfp.envs import registry
from omni_sfp.kit.panel_model import CACHE_CHECKS, PanelModel

ROOT = Path(__file__).resolve().parents[1]


class FakeUI(types.ModuleType):
    """Stands in for ``omni.ui`` (Kit's omni.ui extension, not on PyPI, so it cannot run here). It reproduces the
    upstream behaviour the panel depends on: widgets built inside ``with Frame/VStack/HStack`` containers, value
    models with ``get_value_as_*``/``set_value`` and ``add_value_changed_fn``/``add_end_edit_fn`` callbacks,
    ``Button(clicked_fn=...)``, and a ``Window`` whose frame is built by ``set_build_fn``."""

    def __init__(self):
        super().__init__("omni.ui")
        self.created = []  # every widget, in creation order
        ui = self

        class Model:
            def __init__(self, value=None):
                self.value, self._changed, self._end = value, [], []

            def get_value_as_int(self):
                return int(self.value)

            def get_value_as_bool(self):
                return bool(self.value)

            def get_value_as_string(self):
                return str(self.value)

            def set_value(self, value):
                if value != self.value:
                    self.value = value
                    for fn in list(self._changed):
                        fn(self)

            def add_value_changed_fn(self, fn):
                self._changed.append(fn)

            def add_end_edit_fn(self, fn):
                self._end.append(fn)

            def user_types(self, value):  # test helper: the user edits the field and leaves it
                self.set_value(value)
                for fn in list(self._end):
                    fn(self)

        class ComboModel:
            def __init__(self, index, items):
                self.items, self._index, self._changed = list(items), Model(index), []
                self._index.add_value_changed_fn(lambda _m: [fn(self, None) for fn in list(self._changed)])

            def get_item_value_model(self, item=None, column_id=0):
                return self._index

            def add_item_changed_fn(self, fn):
                self._changed.append(fn)

            def selected(self):
                return self.items[self._index.value]

        class Widget:
            def __init__(self, *args, **kwargs):
                self.args, self.kwargs = args, kwargs
                self.enabled = kwargs.get("enabled", True)
                ui.created.append(self)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class Label(Widget):
            def __init__(self, text, **kwargs):
                super().__init__(text, **kwargs)
                self.text = text

        class Button(Widget):
            def __init__(self, text, clicked_fn=None, **kwargs):
                super().__init__(text, **kwargs)
                self.text, self.clicked_fn = text, clicked_fn

            def click(self):
                assert self.enabled, f"{self.text} is disabled"
                self.clicked_fn()

        class ValueWidget(Widget):
            def __init__(self, model=None, **kwargs):
                super().__init__(**kwargs)
                self.model = model

        class ComboBox(Widget):
            def __init__(self, index, *items, **kwargs):
                super().__init__(**kwargs)
                self.model = ComboModel(index, items)

        class Frame(Widget):
            def __init__(self, build_fn=None, **kwargs):
                super().__init__(**kwargs)
                self.build_fn = build_fn
                if build_fn:
                    build_fn()

            def set_build_fn(self, fn):
                self.build_fn = fn

            def rebuild(self):
                self.build_fn()

        class Window:
            def __init__(self, title, width=0, height=0, visible=True):
                self.title, self.frame, self.destroyed, self._visible = title, Frame(), False, False
                self.visible = visible

            @property
            def visible(self):
                return self._visible

            @visible.setter
            def visible(self, value):
                if value and not self._visible and self.frame.build_fn:
                    self.frame.rebuild()  # omni.ui builds a frame when it is first shown
                self._visible = value

            def destroy(self):
                self.destroyed = True

        self.Window, self.Frame, self.Label, self.Button, self.ComboBox = Window, Frame, Label, Button, ComboBox
        self.VStack = self.HStack = self.Separator = Widget
        self.IntField = self.CheckBox = self.StringField = ValueWidget
        self.SimpleIntModel = self.SimpleBoolModel = self.SimpleStringModel = Model

    def after(self, title):
        """The first widget (not a container) made after the label ``title``: the row's field."""
        for i, widget in enumerate(self.created):
            if getattr(widget, "text", None) == title and type(widget).__name__ == "Label":
                return next(w for w in self.created[i + 1 :] if type(w).__name__ not in ("Frame", "Widget"))
        raise KeyError(title)

    def button(self, text):
        return next(w for w in reversed(self.created) if type(w).__name__ == "Button" and w.text == text)


def error_label(ui):
    """The word-wrapped label under the readout."""
    return next(w for w in ui.created if type(w).__name__ == "Label" and w.kwargs.get("word_wrap"))


FAKE_RUNNER = """
import json, sys
args = dict(a.split("=", 1) for a in sys.argv[1:])
with open(args["progress_file"], "a") as f:
    record = {"iteration": 2, "timestep": 64, "sps": 12345.6, "mean_return": 3.25, "sfp_hit_rate": 0.5}
    f.write(json.dumps(record) + "\\n")
"""


@pytest.fixture
def view(monkeypatch, tmp_path):
    ui = FakeUI()
    omni = sys.modules.get("omni") or types.ModuleType("omni")
    monkeypatch.setitem(sys.modules, "omni", omni)
    monkeypatch.setitem(sys.modules, "omni.ui", ui)
    monkeypatch.setattr(omni, "ui", ui, raising=False)
    # load the view alone, over the omni.ui stand-in
    spec = importlib.util.spec_from_file_location("panel_under_test", ROOT / "omni_sfp" / "kit" / "panel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "fake_runner.py").write_text(FAKE_RUNNER)
    model = PanelModel(runner_module="fake_runner", pythonpath=[str(tmp_path)], workdir=str(tmp_path))
    panel = module.TrainingPanel(model)
    panel.visible = True
    yield ui, model, panel
    model.shutdown(timeout=1.0)


def test_the_panel_shows_the_model(view):
    ui, model, _ = view
    task = ui.after("Task").model
    assert task.items == registry.list_tasks() and task.selected() == "Cartpole"
    assert ui.after("Number of envs").model.value == 512
    assert ui.after("Single forward pass").model.value is True
    cache_check = ui.after("Cache check").model
    assert cache_check.selected() == "auto" and cache_check.items == list(CACHE_CHECKS)
    assert ui.after("Mixed precision").model.value is False
    compile_trunk = ui.after("Compile trunk").model
    assert compile_trunk.selected() == "auto" and compile_trunk.items == ["auto", "true", "false"]
    assert ui.after("State").text == "idle" and ui.after("Steps / s").text == "-"
    assert ui.button("Stop").enabled is False and ui.button("Train").enabled is True


def test_edits_reach_the_model(view):
    ui, model, _ = view
    ui.after("Number of envs").model.user_types(64)
    ui.after("Single forward pass").model.set_value(False)
    ui.after("Mixed precision").model.set_value(True)
    ui.after("Checkpoint").model.user_types("  runs/x/last.pt ")
    ui.after("Cache check").model.get_item_value_model().set_value(CACHE_CHECKS.index("content"))
    ui.after("Compile trunk").model.get_item_value_model().set_value(1)  # "true"
    assert model.get("compile") is True
    ui.after("Compile trunk").model.get_item_value_model().set_value(2)  # "false"
    assert model.get("compile") is False
    ui.after("Task").model.get_item_value_model().set_value(registry.list_tasks().index("LQR60x8"))
    assert {
        k: model.get(k) for k in ("num_envs", "sfp_enabled", "mixed_precision", "checkpoint", "cache_check", "task")
    } == {
        "num_envs": 64,
        "sfp_enabled": False,
        "mixed_precision": True,
        "checkpoint": "runs/x/last.pt",
        "cache_check": "content",
        "task": "LQR60x8",
    }


def test_a_bad_edit_shows_the_one_line_error_and_restores_the_field(view):
    ui, model, panel = view
    field = ui.after("Number of envs").model
    field.user_types(0)
    assert model.get("num_envs") == 512 and field.value == 512
    error = error_label(ui)
    assert error.text == "num_envs=0 is not allowed: expected an integer >= 1"
    field.user_types(32)
    assert error.text == "" and model.get("num_envs") == 32


def test_model_changes_reach_the_widgets_without_echo(view):
    ui, model, _ = view
    heard = []
    model.subscribe(lambda topic, key: heard.append(key))
    model.set("sfp_enabled", False)  # e.g. from the settings bridge
    model.set("cache_check", "off")
    model.set("num_envs", 2048)
    model.set("compile", True)
    assert ui.after("Compile trunk").model.selected() == "true"
    assert ui.after("Single forward pass").model.value is False
    assert ui.after("Cache check").model.selected() == "off"
    assert ui.after("Number of envs").model.value == 2048
    assert heard == [
        "sfp_enabled",
        "cache_check",
        "num_envs",
        "compile",
    ]  # each change once: the widgets did not echo it


def test_train_runs_and_the_readout_follows(view):
    ui, model, _ = view
    ui.button("Train").click()
    assert ui.button("Train").enabled is False and ui.button("Stop").enabled is True
    deadline = time.monotonic() + 30
    while model.readout.state == "running":  # the extension's update loop does this every frame
        assert time.monotonic() < deadline
        model.poll()
        time.sleep(0.01)
    assert ui.after("State").text == "finished, exit code 0"
    assert (
        ui.after("Iteration").text,
        ui.after("Steps / s").text,
        ui.after("Mean return").text,
        ui.after("Cache hit rate").text,
    ) == ("2", "12,346", "3.25", "50.0%")
    assert ui.button("Train").enabled is True and ui.button("Stop").enabled is False


def test_test_without_a_checkpoint_is_an_error_in_the_panel(view):
    ui, model, _ = view
    ui.button("Test").click()
    error = error_label(ui)
    assert error.text.startswith("checkpoint='' is not allowed: expected a run folder or a checkpoint file")
    assert model.readout.state == "idle"


def test_destroy_removes_the_window_and_the_listener(view):
    ui, model, panel = view
    window = panel._window
    assert model.listener_count == 1
    panel.destroy()
    assert window.destroyed and model.listener_count == 0


def test_video_and_export_boxes_reach_the_runner_overrides(view):
    ui, model, _ = view
    assert ui.after("Record video").model.value is False and ui.after("Export policy").model.value is False
    assert "video=false" in model.to_overrides() and "export=false" in model.to_overrides()
    ui.after("Record video").model.set_value(True)
    ui.after("Export policy").model.set_value(True)
    assert (model.get("video"), model.get("export")) == (True, True)
    assert "video=true" in model.to_overrides() and "export=true" in model.to_overrides()  # for Train and Test alike
