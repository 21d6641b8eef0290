"""A stand-in for ``carb.settings`` (Kit 110.4: the ``carb.settings`` bindings of PyPI ``omniverse-kit==110.4.0.386251``,
``carb/settings/ISettings.h`` over ``carb/dictionary/IDictionary.h``), standard library only.

It reproduces what ``omni_sfp.kit.settings`` relies on, as the real kernel does it (recorded in Kit 110.4 and
rechecked there by ``tests/kit/test_settings.py::test_the_stand_in_behaves_as_kit_110_4_carb_settings``):

- ``get_settings()`` returns one process-wide object; ``get(path)`` returns a scalar, a ``list`` for an array, a
  ``dict`` for a node with children and None for a missing path (a trailing ``/`` finds nothing; the leading
  ``/`` is optional). An array set empty reads back as ``{}`` (carb stores it as an empty dictionary).
- Typed setters (``set_bool/int/float/string`` and their ``*_array``) replace the value *and its type*
  (``set_string`` on an int node makes a string node); ``set_int`` takes a ``bool`` (stored as ``int``),
  ``set_bool`` an ``int``, ``set_float`` an ``int``; ``set_int("1")`` and ``set_string(5)`` raise ``TypeError``.
- ``set(path, value)`` picks the type from the Python value; a ``list``/``tuple`` rewrites the node: on an
  existing node the subscribers hear DESTROYED then CREATED, on a missing one CREATED only.
- ``set_default_*`` write only where the path is missing; an existing node (of any type) is left alone.
- ``subscribe_to_node_change_events(path, fn)`` calls ``fn(item, event_type)`` synchronously, inside the
  setter, with the new value already readable: a write to a missing node gives CREATED then CHANGED, a write
  to an existing node CHANGED, even when the value is the same (nothing is de-duplicated); creating a missing
  parent on the way gives the parent's subscribers CREATED first; a child's change is not the parent's
  (that is ``subscribe_to_tree_change_events``, not reproduced). ``destroy_item`` gives DESTROYED to every subscribed node under
  the node, children before parents, then to the node itself, and does nothing for a missing path. A subscription may be to a path
  that does not exist yet. ``unsubscribe_to_change_events`` twice is harmless.

Not reproduced (omni_sfp does not use them): tree subscriptions, ``get_as_*``, ``set_default`` of arrays,
``initialize_from_dictionary``, writing below a scalar node.
"""

from __future__ import annotations

import copy
import enum
import itertools
import types
from collections.abc import Callable
from typing import Any


class ChangeEventType(enum.Enum):
    """``carb.settings.ChangeEventType`` (``carb::dictionary::ChangeEventType``)."""

    CREATED = 0
    CHANGED = 1
    DESTROYED = 2


class SubscriptionId:
    """The opaque handle ``subscribe_to_node_change_events`` returns."""

    def __init__(self, number: int) -> None:
        self.number = number


class Item:
    """The ``carb.dictionary.Item`` a callback gets: omni_sfp only passes it on; it names its path."""

    def __init__(self, path: str) -> None:
        self.path = path


_MISSING = object()


def _parts(path: str) -> list[str]:
    return path[1:].split("/") if path.startswith("/") else path.split("/")


def _key(path: str) -> str:
    return "/" + "/".join(_parts(path))


class Settings:
    """One settings tree with node subscriptions (``carb.settings.ISettings``)."""

    def __init__(self) -> None:
        self._root: dict[str, Any] = {}
        self._subscribers: dict[int, tuple[str, Callable[[Any, ChangeEventType], None]]] = {}
        self._numbers = itertools.count(1)

    # ---- reading -----------------------------------------------------------------------------------------------
    def _lookup(self, path: str) -> Any:
        node: Any = self._root
        for part in _parts(path):
            if not isinstance(node, dict) or part not in node:
                return _MISSING
            node = node[part]
        return node

    def get(self, path: str) -> Any:
        node = self._lookup(path)
        return None if node is _MISSING else copy.deepcopy(node)

    # ---- events --------------------------------------------------------------------------------------------------
    def subscribe_to_node_change_events(
        self, path: str, on_change: Callable[[Any, ChangeEventType], None]
    ) -> SubscriptionId:
        number = next(self._numbers)
        self._subscribers[number] = (_key(path), on_change)
        return SubscriptionId(number)

    def unsubscribe_to_change_events(self, subscription: SubscriptionId) -> None:
        self._subscribers.pop(subscription.number, None)

    def _emit(self, path: str, event: ChangeEventType) -> None:
        for key, on_change in list(self._subscribers.values()):
            if key == path:
                on_change(Item(path), event)

    # ---- writing -------------------------------------------------------------------------------------------------
    def _store(self, path: str, value: Any, *, rewrite: bool) -> None:
        """Write ``value`` at ``path``, creating parents; ``rewrite``: an array written with ``set``."""
        parts = _parts(path)
        node, created = self._root, []
        for depth, part in enumerate(parts[:-1]):
            if part not in node:
                node[part] = {}
                created.append("/" + "/".join(parts[: depth + 1]))
            node = node[part]
            if not isinstance(node, dict):
                raise NotImplementedError(f"{path}: writing below a scalar node is not reproduced")
        existed = parts[-1] in node
        node[parts[-1]] = value
        key = "/" + "/".join(parts)
        for parent in created:
            self._emit(parent, ChangeEventType.CREATED)
        if rewrite:
            if existed:
                self._emit(key, ChangeEventType.DESTROYED)
            self._emit(key, ChangeEventType.CREATED)
            return
        if not existed:
            self._emit(key, ChangeEventType.CREATED)
        self._emit(key, ChangeEventType.CHANGED)

    @staticmethod
    def _array(values: Any) -> Any:
        return list(values) if len(values) else {}

    def set(self, path: str, value: Any) -> None:
        if isinstance(value, (list, tuple)):
            self._store(path, self._array(copy.deepcopy(list(value))), rewrite=True)
        elif isinstance(value, dict):
            self._store(path, copy.deepcopy(value), rewrite=True)
        elif isinstance(value, (bool, int, float, str)):
            self._store(path, value, rewrite=False)
        else:
            raise TypeError(f"set(): unsupported value type {type(value).__name__}")

    def set_bool(self, path: str, value: bool) -> None:
        self._store(path, bool(_check(value, (bool, int), "set_bool")), rewrite=False)

    def set_int(self, path: str, value: int) -> None:
        self._store(path, int(_check(value, (int,), "set_int")), rewrite=False)

    def set_float(self, path: str, value: float) -> None:
        self._store(path, float(_check(value, (int, float), "set_float")), rewrite=False)

    def set_string(self, path: str, value: str) -> None:
        self._store(path, _check(value, (str,), "set_string"), rewrite=False)

    def set_bool_array(self, path: str, values: list[bool]) -> None:
        self._store(path, self._array([bool(_check(v, (bool, int), "set_bool_array")) for v in values]), rewrite=False)

    def set_int_array(self, path: str, values: list[int]) -> None:
        self._store(path, self._array([int(_check(v, (int,), "set_int_array")) for v in values]), rewrite=False)

    def set_float_array(self, path: str, values: list[float]) -> None:
        self._store(
            path, self._array([float(_check(v, (int, float), "set_float_array")) for v in values]), rewrite=False
        )

    def set_string_array(self, path: str, values: list[str]) -> None:
        self._store(path, self._array([_check(v, (str,), "set_string_array") for v in values]), rewrite=False)

    def _set_default(self, setter: Callable[[str, Any], None], path: str, value: Any) -> None:
        if self._lookup(path) is _MISSING:
            setter(path, value)

    def set_default(self, path: str, value: Any) -> None:
        self._set_default(self.set, path, value)

    def set_default_bool(self, path: str, value: bool) -> None:
        self._set_default(self.set_bool, path, value)

    def set_default_int(self, path: str, value: int) -> None:
        self._set_default(self.set_int, path, value)

    def set_default_float(self, path: str, value: float) -> None:
        self._set_default(self.set_float, path, value)

    def set_default_string(self, path: str, value: str) -> None:
        self._set_default(self.set_string, path, value)

    def destroy_item(self, path: str) -> None:
        parts = _parts(path)
        parent = self._lookup("/" + "/".join(parts[:-1])) if len(parts) > 1 else self._root
        if not isinstance(parent, dict) or parts[-1] not in parent:
            return
        key = "/" + "/".join(parts)
        del parent[parts[-1]]
        under = {
            subscribed
            for subscribed, _ in self._subscribers.values()
            if subscribed == key or subscribed.startswith(key + "/")
        }
        for subscribed in sorted(under, key=_deepest_first):
            self._emit(subscribed, ChangeEventType.DESTROYED)


def _deepest_first(path: str) -> tuple[int, str]:
    """The order of DESTROYED events: children before their parent; siblings come in the hash order of carb's
    dictionary, which nothing may rely on (here: by path)."""
    return -path.count("/"), path


def _check(value: Any, kinds: tuple[type, ...], name: str) -> Any:
    if not isinstance(value, kinds):
        raise TypeError(f"{name}(): incompatible function arguments ({type(value).__name__})")
    return value


def modules(settings: Settings | None = None) -> dict[str, types.ModuleType]:
    """``carb`` and ``carb.settings`` modules over one :class:`Settings`, for ``sys.modules``. ``carb.log_error``
    lines are kept in ``carb.logged`` (Kit writes them to its log with ``[Error]``)."""
    settings = settings or Settings()
    carb = types.ModuleType("carb")
    carb_settings = types.ModuleType("carb.settings")
    carb_settings.ISettings = Settings
    carb_settings.ChangeEventType = ChangeEventType
    carb_settings.get_settings = lambda: settings
    carb.settings = carb_settings
    carb.logged = []
    carb.log_error = lambda message: carb.logged.append(("error", message))
    carb.log_warn = lambda message: carb.logged.append(("warn", message))
    carb.log_info = lambda message: carb.logged.append(("info", message))
    return {"carb": carb, "carb.settings": carb_settings}


__all__ = ["ChangeEventType", "Settings", "modules"]
