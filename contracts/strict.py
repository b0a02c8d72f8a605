"""Strict conversion of a parsed TOML document into msgspec Structs, with errors a person can act on.

msgspec checks types and bounds (`Meta`) quickly and without heavy dependencies (the node agent reads
the config too), but it names dictionary entries `[...]` and stops at an unknown key without saying what
was meant. So the tables are walked here: every key is checked against the Struct's fields (the nearest
known name is suggested, difflib), each table is converted on its own so that an error names the full
key path (`[gpu_types.H100].price_per_gpu_hour`), and msgspec's message becomes one line: where, what
was expected, what was found.

Struct hooks (class variables): `_rest` names a dict field that takes the keys which are no field (the
`[teams]` table: team names next to `default_team`); `_derived` lists fields that are not keys of the
file; `_secret_keys` maps a key a secret would be written under to the `*_env` key that names its
environment variable, so that writing the secret itself gets that advice and never echoes the value.
A field annotated with `Meta(extra={"path": True})` is a filesystem path (see `resolve_paths`).
"""

from __future__ import annotations

import difflib
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

Where = tuple[str | int, ...]
"""Key path of a table: ("store", "server"), ("pools", 0), ("gpu_types", "H100")."""


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and what is expected."""


def table_name(where: Where) -> str:
    """("store", "server") -> "[store.server]"; ("pools", 0) -> "[pools[0]]"; () -> ""."""
    text = ""
    for part in where:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return f"[{text}]" if text else ""


def key_name(where: Where, key: str | int) -> str:
    """The full name of `key` in the table at `where`: "[store].path", "schema_version", "[a].b[1]"."""
    table = table_name(where)
    if isinstance(key, int):
        return f"{table}[{key}]"
    return f"{table}.{key}" if table else key


def _unwrap(tp: Any) -> Any:
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def file_keys(cls: type) -> dict[str, msgspec.structs.FieldInfo]:
    """The keys a table of type `cls` may hold in the file, by their name there."""
    derived = getattr(cls, "_derived", ())
    return {f.encode_name: f for f in msgspec.structs.fields(cls) if f.name not in derived}


def _what(value: Any) -> str:
    names: dict[type, str] = {dict: "a table", list: "a list"}
    return names.get(type(value), f"{type(value).__name__} {value!r}")


def _unknown(cls: type, where: Where, key: str, value: Any, known: list[str]) -> str:
    secret_env = getattr(cls, "_secret_keys", {}).get(key)
    if secret_env:
        return (
            f"{key_name(where, key)}: secrets never live in the configuration file; put it in an "
            f'environment variable and name that variable instead: {secret_env} = "GOODPUT_..."'
        )
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if isinstance(value, dict) and not where:
        return f"[{key}]: unknown table{hint} (known: {', '.join(known)})"
    return f"{key_name(where, key)}: unknown key{hint} (known: {', '.join(known)})"


_MSGSPEC_WORDS = {"array": "list", "object": "table"}


def _split(message: str) -> tuple[str, str]:
    """msgspec's "Expected `int` >= 1 - at `$.port`" -> ("expected int >= 1", ".port")."""
    text, sep, path = message.rpartition(" - at ")
    if not sep:
        text, path = message, ""
    text = re.sub(r"`(\w+)`", lambda m: _MSGSPEC_WORDS.get(m[1], m[1]), text)
    return text[:1].lower() + text[1:], path.strip("`").removeprefix("$")


def _choices(tp: Any) -> list[str]:
    """The values a Literal allows, wherever it sits in `tp` (a union, a tuple's items)."""
    tp = _unwrap(tp)
    if typing.get_origin(tp) is Literal:
        return [repr(v) for v in typing.get_args(tp)]
    return [c for arg in typing.get_args(tp) for c in _choices(arg)]


def _rewrite(message: str, cls: type, where: Where, data: dict) -> str:
    """A msgspec error of the table at `where` -> "[store.server].port: expected int >= 1, got 0"."""
    text, path = _split(message)
    missing = re.fullmatch(r"object missing required field (\w+)", text)
    if missing:
        return f"{key_name(where, missing[1])}: required key missing"
    if not path:  # raised by a __post_init__: its message starts with the key it is about
        return f"{table_name(where)}.{text}" if where else text
    key, _, rest = path.lstrip(".").partition("[")
    name = key_name(where, key) + (f"[{rest}" if rest else "")
    if text.startswith("expected") and ", got" not in text and key in data and not rest:
        text += f", got {data[key]!r}"
    if text.startswith("invalid enum value") and key in file_keys(cls):
        text += f"; expected one of {', '.join(_choices(file_keys(cls)[key].type))}"
    return f"{name}: {text}"


def _leaf(tp: Any, value: Any, where: Where, key: str | int) -> Any:
    """A value that is no table, converted on its own so that an error can name its key."""
    try:
        return msgspec.convert(value, tp)
    except msgspec.ValidationError as e:
        text, path = _split(str(e))
        if text.startswith("expected") and ", got" not in text and not path:
            text += f", got {value!r}"
        return _fail(f"{key_name(where, key)}{path}: {text}")


def _fail(message: str) -> Any:
    raise ConfigError(message) from None


def _value(tp: Any, value: Any, where: Where, key: str) -> Any:
    inner = _unwrap(tp)
    here = (*where, key)
    if _is_struct(inner):
        return build(inner, value, here)
    origin, args = typing.get_origin(inner), typing.get_args(inner)
    if origin is dict:
        if not isinstance(value, dict):
            _fail(f"{table_name(here)}: expected a table, got {_what(value)}")
        item = _unwrap(args[1])
        if _is_struct(item):
            return {k: build(item, v, (*here, k)) for k, v in value.items()}
        return {k: _leaf(args[1], v, here, k) for k, v in value.items()}
    if origin is tuple and _is_struct(_unwrap(args[0])):
        if not isinstance(value, list):
            _fail(f"{key_name(where, key)}: expected a list of tables, got {_what(value)}")
        return tuple(build(_unwrap(args[0]), v, (*here, i)) for i, v in enumerate(value))
    return value  # converted with its table, whose error names it


def build(cls: type, value: Any, where: Where = ()) -> Any:
    """The Struct `cls` from the TOML table `value` found at `where`; ConfigError naming the key else."""
    if not isinstance(value, dict):
        _fail(f"{table_name(where)}: expected a table, got {_what(value)}")
    keys = file_keys(cls)
    rest = getattr(cls, "_rest", None)
    data: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, raw in value.items():
        if rest and (key not in keys or key == rest):
            extra[key] = raw
        elif key not in keys:
            _fail(_unknown(cls, where, key, raw, [k for k in keys if k != rest]))
        else:
            data[key] = _value(keys[key].type, raw, where, key)
    if rest:
        tp = typing.get_args(_unwrap(keys[rest].type))[1]
        data[rest] = {k: _leaf(tp, v, where, k) for k, v in extra.items()}
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as e:
        return _fail(_rewrite(str(e), cls, where, data))


def _is_path(tp: Any) -> bool:
    return typing.get_origin(tp) is Annotated and any(
        isinstance(m, msgspec.Meta) and (m.extra or {}).get("path") for m in tp.__metadata__
    )


def resolve_paths(obj: Any, base: Path) -> Any:
    """`obj` with every relative path field (also inside sub-tables and lists) made absolute against
    `base`; an empty path stays empty (it means "none")."""
    if not isinstance(obj, msgspec.Struct):
        return obj
    changes = {}
    for f in msgspec.structs.fields(obj):
        value = getattr(obj, f.name)
        new: Any
        tp = f.type
        if typing.get_origin(tp) is tuple and _is_path(typing.get_args(tp)[0]):
            new = tuple(str(base / v) for v in value)
        elif _is_path(tp):
            new = str(base / value) if value else value
        elif isinstance(value, dict):
            new = {k: resolve_paths(v, base) for k, v in value.items()}
        elif isinstance(value, tuple):
            new = tuple(resolve_paths(v, base) for v in value)
        else:
            new = resolve_paths(value, base)
        if new != value:
            changes[f.name] = new
    return msgspec.structs.replace(obj, **changes) if changes else obj
