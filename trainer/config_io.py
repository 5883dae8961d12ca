"""Typed settings from YAML / JSON: frozen dataclasses built from nested dicts (every value
converted to its annotated type, unknown keys refused with the valid ones), dotted
``section.key=value`` overrides parsed as YAML, and config files read with their relative
paths resolved. ``trainer.config`` (the training run) and ``trainer.ur2n`` build on it.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from lr_opensearch.errors import ConfigError


def plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def convert(value: Any, hint: Any, where: str) -> Any:
    """Convert a parsed YAML/JSON value to the annotated type ``hint``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return convert(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: invalid value {value!r}")
    if dataclasses.is_dataclass(hint):
        if isinstance(value, typing.cast(type, hint)):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return build_settings(hint, value, where)
    if origin is tuple:
        if not isinstance(value, Sequence) or isinstance(value, str):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        item = args[0] if args else Any
        return tuple(convert(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return {str(k): ("" if v is None else str(v)) for k, v in value.items()}
    if hint is Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if hint is type(None):
        if value is not None:
            raise ConfigError(f"{where}: expected null, got {value!r}")
        return None
    if hint in (int, float):
        if isinstance(value, str):  # YAML 1.1 reads "2e-4" (no dot) as a string
            try:
                value = float(value) if hint is float or not value.strip().lstrip("+-").isdigit() else int(value)
            except ValueError:
                raise ConfigError(f"{where}: expected a number, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        if hint is int and float(value) != int(value):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return hint(value)
    if hint is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    raise ConfigError(f"{where}: unsupported setting type {hint!r}")


def build_settings(cls: Any, data: Mapping[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {unknown}; valid: {names}")
    kwargs = {k: convert(v, hints[k], f"{where}.{k}" if where else k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where or 'config'}: {exc}") from None


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``"optim.lr=2e-4"`` -> ``("optim.lr", 2e-4)`` (the value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.key=value")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: value is not valid YAML: {exc}") from None
    return key.strip(), value


def read_config_data(path: str | Path | None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The nested dict of a YAML/JSON config file with ``key=value`` overrides applied and
    relative ``data.sources[].path`` values resolved against the file's folder (shared by
    :func:`load_config` and other runs' configs, e.g. ``trainer.ur2n``)."""
    data: dict[str, Any] = {}
    base = Path.cwd()
    if path is not None:
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read config {p}: {exc}") from None
        try:
            loaded = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
        except (json.JSONDecodeError, yaml.YAMLError) as exc:
            raise ConfigError(f"{p}: not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections")
        data, base = loaded, p.resolve().parent
    for text in overrides:
        key, value = parse_override(text)
        set_dotted(data, key, value)
    for src in (data.get("data") or {}).get("sources") or []:
        if isinstance(src, dict) and isinstance(src.get("path"), str):
            src["path"] = str((base / src["path"]).resolve()) if not Path(src["path"]).is_absolute() else src["path"]
    return data
