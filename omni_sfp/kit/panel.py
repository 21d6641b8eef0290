"""The training panel: an ``omni.ui`` window bound to :class:`~omni_sfp.kit.panel_model.PanelModel`.

A thin view: every widget edit goes to ``model.set`` (whose one-line error is shown in the panel), every
model change comes back to the widgets through ``model.subscribe``, and the buttons call the model's
start / stop. The readout is refreshed when the extension's update loop polls the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from omni import ui

from omni_sfp.kit.panel_model import CACHE_CHECKS, PanelModel, RunError

WINDOW_TITLE = "omni-sfp Training"
COMPILE_CHOICES = ("auto", True, False)  # the compile toggle's values, as the combo box lists them
COMPILE_LABELS = ("auto", "true", "false")
LABEL_WIDTH = 130


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


class TrainingPanel:
    """The window; :meth:`destroy` removes it and its model listener."""

    def __init__(self, model: PanelModel) -> None:
        self._model = model
        self._syncing = False  # set while model values are pushed into widgets, so their callbacks do not echo
        self._fields: dict[str, Any] = {}  # toggle key -> omni.ui value model
        self._labels: dict[str, ui.Label] = {}
        self._buttons: dict[str, ui.Button] = {}
        self._task_names: list[str] = []
        self._window = ui.Window(WINDOW_TITLE, width=440, height=520, visible=False)
        self._window.frame.set_build_fn(self._build)
        self._unsubscribe = model.subscribe(self._on_model)

    @property
    def visible(self) -> bool:
        return self._window.visible

    @visible.setter
    def visible(self, value: bool) -> None:
        self._window.visible = value

    def toggle(self) -> None:
        self._window.visible = not self._window.visible

    def destroy(self) -> None:
        self._unsubscribe()
        self._fields.clear()
        self._labels.clear()
        self._buttons.clear()
        self._window.destroy()
        self._window = None

    # ---- layout ----------------------------------------------------------------------------------------
    def _build(self) -> None:
        values = self._model.values
        with ui.VStack(spacing=6, height=0):
            with self._row("Task"):
                self._task_frame = ui.Frame(build_fn=self._build_task_combo)
                ui.Button("Refresh", width=70, clicked_fn=self._task_frame.rebuild, tooltip="Re-read the task registry")
            with self._row("Number of envs"):
                self._fields["num_envs"] = self._int_field("num_envs", values["num_envs"])
            with self._row("Single forward pass"):
                self._fields["sfp_enabled"] = self._check_box("sfp_enabled", values["sfp_enabled"])
            with self._row("Cache check"):
                combo = ui.ComboBox(CACHE_CHECKS.index(values["cache_check"]), *CACHE_CHECKS)
                combo.model.add_item_changed_fn(
                    lambda m, _item: self._apply("cache_check", CACHE_CHECKS[self._index(m)])
                )
                self._fields["cache_check"] = combo.model
            with self._row("Mixed precision"):
                self._fields["mixed_precision"] = self._check_box("mixed_precision", values["mixed_precision"])
            with self._row("Compile trunk"):
                combo = ui.ComboBox(COMPILE_CHOICES.index(values["compile"]), *COMPILE_LABELS)
                combo.model.add_item_changed_fn(
                    lambda m, _item: self._apply("compile", COMPILE_CHOICES[self._index(m)])
                )
                self._fields["compile"] = combo.model
            with self._row("Max iterations"):
                self._fields["max_iterations"] = self._int_field("max_iterations", values["max_iterations"])
            with self._row("Record video"):
                self._fields["video"] = self._check_box("video", values["video"])
            with self._row("Export policy"):
                self._fields["export"] = self._check_box("export", values["export"])
            with self._row("Checkpoint"):
                field = ui.StringField(model=ui.SimpleStringModel(values["checkpoint"]))
                field.model.add_end_edit_fn(lambda m: self._apply("checkpoint", m.get_value_as_string().strip()))
                self._fields["checkpoint"] = field.model
            with ui.HStack(height=28, spacing=6):
                self._buttons["train"] = ui.Button("Train", clicked_fn=lambda: self._run(self._model.start_training))
                self._buttons["stop"] = ui.Button("Stop", clicked_fn=lambda: self._model.stop(), enabled=False)
                self._buttons["test"] = ui.Button("Test", clicked_fn=lambda: self._run(self._model.start_test))
            ui.Separator(height=6)
            for key, title in (
                ("state", "State"),
                ("iteration", "Iteration"),
                ("sps", "Steps / s"),
                ("mean_return", "Mean return"),
                ("sfp_hit_rate", "Cache hit rate"),
            ):
                with self._row(title):
                    self._labels[key] = ui.Label("-")
            self._labels["error"] = ui.Label("", word_wrap=True, style={"color": 0xFF5050FF})
        self._show_readout()

    @contextmanager
    def _row(self, title: str) -> Iterator[None]:
        """A labelled row; the widgets made inside the ``with`` go to the right of the label."""
        with ui.HStack(height=24, spacing=6):
            ui.Label(title, width=LABEL_WIDTH)
            yield

    def _build_task_combo(self) -> None:
        try:
            self._task_names = self._model.tasks()
        except ImportError as error:  # the registry could not be imported: keep the current task selectable
            self._task_names = [self._model.get("task")]
            self._show_error(f"task list unavailable: {error}")
        current = self._task_names.index(self._model.get("task"))
        combo = ui.ComboBox(current, *self._task_names)
        combo.model.add_item_changed_fn(lambda m, _item: self._apply("task", self._task_names[self._index(m)]))
        self._fields["task"] = combo.model

    def _int_field(self, key: str, value: int) -> Any:
        field = ui.IntField(model=ui.SimpleIntModel(value))
        field.model.add_end_edit_fn(lambda m: self._apply(key, m.get_value_as_int()))
        return field.model

    def _check_box(self, key: str, value: bool) -> Any:
        box = ui.CheckBox(model=ui.SimpleBoolModel(value))
        box.model.add_value_changed_fn(lambda m: self._apply(key, m.get_value_as_bool()))
        return box.model

    @staticmethod
    def _index(combo_model: Any) -> int:
        return combo_model.get_item_value_model().get_value_as_int()

    # ---- view -> model ---------------------------------------------------------------------------------
    def _apply(self, key: str, value: Any) -> None:
        if self._syncing:
            return
        try:
            self._model.set(key, value)
        except ValueError as error:  # ToggleError: one line naming the key, the value and what is allowed
            self._show_error(str(error))
            self._sync(key)  # put the model's (unchanged) value back into the widget
            return
        self._show_error("")

    def _run(self, start: Callable[[], Any]) -> None:
        try:
            start()
        except (ValueError, RunError) as error:  # bad toggle, unknown task, no checkpoint, already running
            self._show_error(str(error))
            return
        self._show_error("")

    # ---- model -> view ---------------------------------------------------------------------------------
    def _on_model(self, topic: str, key: str | None) -> None:
        if topic == "values" and key is not None:
            self._sync(key)
        elif topic == "readout":
            self._show_readout()

    def _sync(self, key: str) -> None:
        field = self._fields.get(key)
        if field is None:
            return
        value = self._model.get(key)
        self._syncing = True
        try:
            if key == "task":
                if value not in self._task_names:
                    self._task_frame.rebuild()
                else:
                    field.get_item_value_model().set_value(self._task_names.index(value))
            elif key == "cache_check":
                field.get_item_value_model().set_value(CACHE_CHECKS.index(value))
            elif key == "compile":
                field.get_item_value_model().set_value(COMPILE_CHOICES.index(value))
            else:
                field.set_value(value)
        finally:
            self._syncing = False

    def _show_readout(self) -> None:
        if not self._labels:
            return
        readout = self._model.readout
        self._labels["state"].text = readout.summary()
        self._labels["iteration"].text = "-" if readout.iteration is None else str(readout.iteration)
        self._labels["sps"].text = _fmt(readout.sps, ",.0f")
        self._labels["mean_return"].text = _fmt(readout.mean_return, ".2f")
        self._labels["sfp_hit_rate"].text = "-" if readout.sfp_hit_rate is None else f"{readout.sfp_hit_rate:.1%}"
        running = readout.state in ("running", "stopping")
        self._buttons["train"].enabled = not running
        self._buttons["test"].enabled = not running
        self._buttons["stop"].enabled = readout.state == "running"

    def _show_error(self, message: str) -> None:
        label = self._labels.get("error")
        if label is not None:
            label.text = message
