"""The ``omni.sfp`` Kit extension: task registration, the settings bridge, the panel and its menu entry.

Enabling it imports neither torch nor skrl (training runs in a subprocess), so it loads in any Kit, even one
whose Python lacks them. What it did is published under ``/exts/omni.sfp/state/`` (``started``,
``registered_tasks``, ``overrides``, ``subscriptions``, ``ui``, ``run_state``, ``errors``): the visible side
effect tests and headless users read.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import carb
import carb.settings
import omni.ext
import omni.kit.app

from omni_sfp.kit.panel_model import PanelModel
from omni_sfp.kit.settings import STATE, SettingsBridge

MENU_PATH = "Window"
MENU_NAME = "omni-sfp Training"

_instance: OmniSfpExtension | None = None


def get_instance() -> OmniSfpExtension | None:
    """The running extension, or None when it is disabled."""
    return _instance


def available(module: str) -> bool:
    """Whether ``module`` can be imported here (its Kit extension is enabled, or it is installed)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or not a package
        return False


def register_tasks() -> tuple[list[str], list[str]]:
    """Add the simulator tasks that are importable here to omni_sfp's registry.

    Returns all registered task names and one error line per source that could not be registered.
    """
    from omni_sfp.envs import registry

    errors = []
    if available("omniisaacgymenvs"):
        from omni_sfp.envs.oige import register_oige_tasks

        try:
            register_oige_tasks()
        except (ValueError, OSError) as error:
            errors.append(f"OmniIsaacGymEnvs tasks not registered: {error}")
    if available("isaaclab"):
        from omni_sfp.envs.isaaclab import register_isaaclab_tasks

        try:
            register_isaaclab_tasks()
        except (ValueError, OSError) as error:
            errors.append(f"Isaac Lab tasks not registered: {error}")
    return registry.list_tasks(), errors


class OmniSfpExtension(omni.ext.IExt):
    """Kit starts one of these when the extension is enabled and calls :meth:`on_shutdown` when disabled."""

    def on_startup(self, ext_id: str) -> None:
        global _instance
        self._settings = carb.settings.get_settings()
        self._panel: Any = None
        self._menu: list[Any] = []
        self._menu_utils: Any = None

        self.model = PanelModel()
        self.registered_tasks, errors = register_tasks()
        self.bridge = SettingsBridge(self.model, self._settings)
        errors += self.bridge.errors
        self._unsubscribe_state = self.model.subscribe(self._on_model)
        self._update_subscription = _subscribe_to_updates(self._on_update)
        if available("omni.ui"):
            self._build_ui()

        for error in errors:
            carb.log_error(f"[omni.sfp] {error}")
        self._settings.set_string_array(f"{STATE}/registered_tasks", self.registered_tasks)
        if errors:  # carb has no empty array: no errors, no item
            self._settings.set_string_array(f"{STATE}/errors", errors)
        else:
            self._settings.destroy_item(f"{STATE}/errors")
        self._settings.set_bool(f"{STATE}/ui", self._panel is not None)
        self._settings.set_string(f"{STATE}/run_state", self.model.readout.state)
        self._settings.set_int(f"{STATE}/subscriptions", self.subscription_count)
        self._settings.set_bool(f"{STATE}/started", True)
        _instance = self

    def on_shutdown(self) -> None:
        global _instance
        _instance = None
        self.model.shutdown(timeout=5.0)  # SIGINT, so the runner saves a checkpoint; killed after 5 s
        if self._menu and self._menu_utils is not None:
            self._menu_utils.remove_menu_items(self._menu, MENU_PATH)
        self._menu = []
        if self._panel is not None:
            self._panel.destroy()
            self._panel = None
        _unsubscribe(self._update_subscription)
        self._update_subscription = None
        self._unsubscribe_state()
        self._unsubscribe_state = None
        self.bridge.destroy()
        for key in ("registered_tasks", "errors", "run_state", "run_summary"):
            self._settings.destroy_item(f"{STATE}/{key}")
        self._settings.set_bool(f"{STATE}/ui", False)
        self._settings.set_int(f"{STATE}/subscriptions", self.subscription_count)
        self._settings.set_bool(f"{STATE}/started", False)

    @property
    def subscription_count(self) -> int:
        """Live subscriptions: the bridge's (carb and model), the update loop's and the state listener's."""
        return (
            self.bridge.subscription_count
            + (self._update_subscription is not None)
            + (self._unsubscribe_state is not None)
        )

    def _build_ui(self) -> None:
        from omni_sfp.kit.panel import TrainingPanel

        self._panel = TrainingPanel(self.model)
        if available("omni.kit.menu.utils"):
            import omni.kit.menu.utils as menu_utils

            self._menu_utils = menu_utils
            self._menu = [menu_utils.MenuItemDescription(name=MENU_NAME, onclick_fn=lambda *_: self._panel.toggle())]
            menu_utils.add_menu_items(self._menu, MENU_PATH)

    def _on_update(self, _event: Any) -> None:
        if self.model.running:
            self.model.poll()

    def _on_model(self, topic: str, _key: str | None) -> None:
        if topic == "readout":
            self._settings.set_string(f"{STATE}/run_state", self.model.readout.state)
            self._settings.set_string(f"{STATE}/run_summary", self.model.readout.summary())


def _subscribe_to_updates(callback: Callable[[Any], None]) -> Any:
    """Call ``callback`` every frame until the returned object is dropped."""
    app = omni.kit.app.get_app()
    if hasattr(omni.kit.app, "GLOBAL_EVENT_UPDATE"):  # Kit 106+: the event dispatcher
        import carb.eventdispatcher

        return carb.eventdispatcher.get_eventdispatcher().observe_event(
            event_name=omni.kit.app.GLOBAL_EVENT_UPDATE, on_event=callback, observer_name="omni.sfp poll"
        )
    return app.get_update_event_stream().create_subscription_to_pop(callback, name="omni.sfp poll")


def _unsubscribe(subscription: Any) -> None:
    if hasattr(subscription, "reset"):  # carb.eventdispatcher.ObserverGuard
        subscription.reset()
    elif hasattr(subscription, "unsubscribe"):  # carb.events.ISubscription
        subscription.unsubscribe()
