"""The settings bridge: carb settings ``/exts/omni.sfp/<key>`` <-> the panel model's toggles.

The settings are seeded by the manifest's ``[settings]``, a ``.kit`` file and ``--/exts/omni.sfp/<key>=...``
on the command line; the bridge loads them into :class:`~omni_sfp.kit.panel_model.PanelModel` at start and follows
every later change (a subscription per key). A change made in the panel goes the other way, so the two always
agree and the next run's Hydra overrides (published read-only at ``/exts/omni.sfp/state/overrides``) follow.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import carb
import carb.settings

from omni_sfp.config.toggles import TOGGLE_BY_KEY, TOGGLES, ToggleError, coerce
from omni_sfp.kit.panel_model import PanelModel

ROOT = "/exts/omni.sfp"
STATE = f"{ROOT}/state"  # read-only values the extension publishes (not toggles)
OVERRIDES = f"{STATE}/overrides"  # string array: the Hydra overrides the next run gets


class SettingsBridge:
    """Keep ``model`` and the carb settings under :data:`ROOT` equal, in both directions, until :meth:`destroy`.

    A setting whose value a toggle does not allow is logged as one error line (also kept in :attr:`errors`)
    and the model keeps its previous value.
    """

    def __init__(self, model: PanelModel, settings: carb.settings.ISettings | None = None) -> None:
        self._model = model
        self._settings = settings or carb.settings.get_settings()
        self.errors: list[str] = []
        for toggle in TOGGLES:
            if self._read(toggle.key) is None:  # not in the manifest's [settings] (an old .kit file): seed it
                self._write(toggle.key, model.get(toggle.key))
            else:
                self._pull(toggle.key)
        self._subscriptions = [
            self._settings.subscribe_to_node_change_events(f"{ROOT}/{key}", partial(self._on_setting, key))
            for key in TOGGLE_BY_KEY
        ]
        self._unsubscribe_model = model.subscribe(self._on_model)
        self._publish()

    @property
    def subscription_count(self) -> int:
        """Live carb subscriptions plus the model listener (0 after :meth:`destroy`)."""
        return len(self._subscriptions) + (self._unsubscribe_model is not None)

    def destroy(self) -> None:
        """Remove every subscription and the published overrides."""
        for subscription in self._subscriptions:
            self._settings.unsubscribe_to_change_events(subscription)
        self._subscriptions = []
        if self._unsubscribe_model is not None:
            self._unsubscribe_model()
            self._unsubscribe_model = None
        self._settings.destroy_item(OVERRIDES)

    # carb -> model
    def _on_setting(self, key: str, _item: Any, _event_type: Any) -> None:
        # rewriting an array destroys and re-creates its node: both events see the final value
        if self._read(key) is not None:
            self._pull(key)

    def _pull(self, key: str) -> None:
        value = self._read(key)
        try:
            self._model.set(key, value)
        except ToggleError as error:
            message = f"[omni.sfp] setting {ROOT}/{key} ignored: {error}"
            self.errors.append(message)
            carb.log_error(message)

    # model -> carb
    def _on_model(self, topic: str, key: str | None) -> None:
        if topic != "values" or key is None:
            return
        value = self._model.get(key)
        if not self._agrees(key, value):
            self._write(key, value)
        self._publish()

    def _agrees(self, key: str, value: Any) -> bool:
        current = self._read(key)
        try:
            return current is not None and coerce(key, current) == value
        except ToggleError:
            return False

    def _read(self, key: str) -> Any:
        return self._settings.get(f"{ROOT}/{key}")

    def _write(self, key: str, value: Any) -> None:
        path = f"{ROOT}/{key}"
        kind = TOGGLE_BY_KEY[key].kind
        if kind == "bool" or (kind == "bool_auto" and isinstance(value, bool)):  # bool_auto: a bool or "auto"
            self._settings.set_bool(path, value)
        elif kind == "int":
            self._settings.set_int(path, value)
        elif kind == "ints":
            self._settings.set_int_array(path, list(value))
        else:
            self._settings.set_string(path, value)

    def _publish(self) -> None:
        self._settings.set_string_array(OVERRIDES, self._model.to_overrides())
