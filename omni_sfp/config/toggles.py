"""The panel's toggles: a view of :mod:`omni_sfp.config.schema` for the Kit settings, and their Hydra overrides.

Each toggle is a carb setting ``/exts/omni.sfp/<key>`` (the manifest's ``[settings] exts."omni.sfp".<key>``,
written from :data:`TOGGLES` by ``python -m omni_sfp.schema --write``) and one Hydra override. Type, range,
choices and doc come from the schema; only the carb key, the override and, where the schema's default is null
("the task's"), the default task's value are set here. Standard library only (Kit imports it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from omni_sfp.config import schema

CACHE_CHECKS = schema.CACHE_CHECKS
# strings Hydra's override grammar takes verbatim; anything else is single-quoted
_BARE = re.compile(r"^[A-Za-z_/.][A-Za-z0-9_\-./:]*$")
_HYDRA_WORDS = {"true", "false", "null", "nan", "inf"}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class ToggleError(ValueError):
    """A toggle value that cannot be used; the message is one line naming the key, the value and what is allowed."""

    def __init__(self, key: str, value: Any, allowed: str) -> None:
        super().__init__(f"{key}={value!r} is not allowed: expected {allowed}")
        self.key, self.value, self.allowed = key, value, allowed


@dataclass(frozen=True)
class Toggle:
    """A panel toggle: a carb key bound to one schema setting (``spec``: its type, range, choices, doc)."""

    key: str  # carb key under /exts/omni.sfp/ and the manifest key under exts."omni.sfp"
    override: str | None  # Hydra key the runner gets; None for launcher-only settings
    spec: schema.Setting  # the schema's entry, never null in the panel

    @property
    def default(self) -> Any:
        return self.spec.default

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def doc(self) -> str:
        return self.spec.doc


def _toggle(key: str, override: str | None, default: Any = None) -> Toggle:
    """Toggle ``key`` for schema setting ``override`` (or the launcher setting ``key``); ``default`` replaces a
    null schema default with the value the default task resolves it to (tests/test_manifest.py checks it)."""
    spec = schema.setting(override or key)
    value = spec.default if default is None else default
    return Toggle(key, override, replace(spec, nullable=False, default=tuple(value) if spec.kind == "ints" else value))


TOGGLES: tuple[Toggle, ...] = (
    _toggle("task", "task"),
    _toggle("num_envs", "num_envs", default=512),  # cfg/task/Cartpole.yaml env.num_envs
    _toggle("sfp_enabled", "train.sfp.enabled"),
    _toggle("cache_check", "train.sfp.cache_check"),
    _toggle("mixed_precision", "train.mixed_precision"),
    _toggle("units", "train.models.units"),
    _toggle("compile", "train.models.compile"),  # true, false or auto (the panel's combo box)
    _toggle("max_iterations", "max_iterations", default=schema.setting("train.max_iterations").default),
    _toggle("checkpoint", "checkpoint"),
    _toggle("headless", "headless"),
    _toggle("seed", "seed"),
    _toggle("device", "device"),
    _toggle("video", "video"),  # Train and Test record clips into the run folder (videos/)
    _toggle("export", "export"),  # Train and Test write exported/policy.pt and policy.onnx
    _toggle("python_exe", None),
)
TOGGLE_BY_KEY: dict[str, Toggle] = {t.key: t for t in TOGGLES}
DEFAULTS: dict[str, Any] = {t.key: t.default for t in TOGGLES}


def coerce(key: str, value: Any) -> Any:
    """``value`` as toggle ``key``'s type, validated; strings (from a command line or a text field) are parsed.

    :raises ToggleError: unknown key, wrong type or a value out of range.
    """
    toggle = TOGGLE_BY_KEY.get(key)
    if toggle is None:
        raise ToggleError(key, value, f"one of the keys {', '.join(TOGGLE_BY_KEY)}")
    if toggle.kind == "bool":
        return _as_bool(toggle, value)
    if toggle.kind == "bool_auto":
        return _as_bool_or_auto(toggle, value)
    if toggle.kind == "int":
        return _as_int(toggle, value)
    if toggle.kind == "ints":
        return _as_ints(toggle, value)
    return _as_str(toggle, value)


def _as_bool(toggle: Toggle, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ToggleError(toggle.key, value, toggle.spec.allowed())


def _as_bool_or_auto(toggle: Toggle, value: Any) -> bool | str:
    if isinstance(value, str) and value.strip().lower() == schema.AUTO:
        return schema.AUTO
    return _as_bool(toggle, value)


def _as_int(toggle: Toggle, value: Any) -> int:
    parsed = int(value) if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value) else value
    if toggle.spec.problem(parsed) is not None:
        raise ToggleError(toggle.key, value, toggle.spec.allowed())
    return parsed


def _as_ints(toggle: Toggle, value: Any) -> tuple[int, ...]:
    items: Any = value
    if isinstance(value, str):
        text = value.strip().removeprefix("[").removesuffix("]")
        items = [int(p) if p.strip().isdigit() else p for p in text.split(",") if p.strip()]
    elif isinstance(value, (list, tuple)):
        items = [int(p) if isinstance(p, str) and p.isdigit() else p for p in value]
    if toggle.spec.problem(items) is not None:
        raise ToggleError(toggle.key, value, toggle.spec.allowed() + ", e.g. [256, 128, 64]")
    return tuple(items)


def _as_str(toggle: Toggle, value: Any) -> str:
    if toggle.spec.problem(value) is not None:
        raise ToggleError(toggle.key, value, toggle.spec.allowed())
    if "${" in value:
        raise ToggleError(toggle.key, value, "a string without '${' (Hydra would read it as an interpolation)")
    return value


def hydra_value(value: Any) -> str:
    """``value`` written in Hydra's override grammar (the runner parses it back to the same value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, str):
        if _BARE.match(value) and value.lower() not in _HYDRA_WORDS:
            return value
        # quoted: a backslash is literal unless it precedes a quote or ends the string
        escaped = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, value).replace("'", "\\'")
        return f"'{escaped}'"
    raise TypeError(f"no Hydra form for {type(value).__name__} {value!r}")
