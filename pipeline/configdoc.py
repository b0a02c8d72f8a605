"""docs/config.md from the config model (contracts/config.py), so the page and the parser cannot disagree.

Every table of the file gets a section listing its keys: type, default, bounds (from the msgspec
annotations) and meaning (the string under each field, read from the module's source with `ast`:
Python keeps no attribute docstrings at run time). Written by `python -m pipeline.docgen`.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import typing

import msgspec
from msgspec import inspect as mi

from contracts import config
from contracts.strict import file_keys

INTRO = """# Configuration (TOML), version {version}

Generated from `contracts/config.py` by `python -m pipeline.docgen`; do not edit by hand.

One file for every component; `contracts/example_config.toml` is the full example (what `goodput demo`
scales). Every table below is validated whenever the file is read, whether or not it is selected (a typo
in `[store.server]` stops a chDB setup too): an unknown key anywhere is refused by its full name with
the nearest known one suggested (`[store].paht: unknown key; did you mean 'path'?`), and a wrong type
or a value out of bounds names the key, what was expected and what was found.

Reading a file takes three steps, in this order: the file is parsed; relative paths in it (the keys of
type *path*) are made absolute against **the directory of the file**, so `--config other/dir/config.toml`
keeps its data next to it whatever the working directory (without `--config`, the shipped example
stands in for a file in the working directory); then the environment variables below override their
keys. Precedence: defaults < file < environment < command-line flags.

Secrets never live in the file: the `*_env` keys name the environment variables that hold them, read
only when a connection is made. Writing a password itself (`password = ...`) is refused without echoing
it.
"""


def _field_docs() -> dict[str, dict[str, str]]:
    """{class name: {field name: the string under it}} from contracts/config.py."""
    out: dict[str, dict[str, str]] = {}
    for node in ast.parse(inspect.getsource(config)).body:
        if isinstance(node, ast.ClassDef):
            docs = out.setdefault(node.name, {})
            for stmt, nxt in zip(node.body, node.body[1:], strict=False):
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                        docs[stmt.target.id] = " ".join(str(nxt.value.value).split())
    return out


def _type(t: mi.Type) -> str:
    if isinstance(t, mi.Metadata):
        return _type(t.type)
    if isinstance(t, mi.LiteralType):
        return " or ".join(json.dumps(v) for v in t.values)
    if isinstance(t, (mi.VarTupleType, mi.ListType)):
        return f"list of {_type(t.item_type)}"
    if isinstance(t, mi.DictType):
        return f"table of {_type(t.value_type)}"
    if isinstance(t, mi.UnionType):
        return " or ".join(_type(u) for u in t.types if not isinstance(u, mi.NoneType))
    names = {mi.IntType: "integer", mi.FloatType: "float", mi.StrType: "string", mi.BoolType: "boolean"}
    return names.get(type(t), "table")


def _bounds(t: mi.Type) -> str:
    if isinstance(t, mi.Metadata):
        return _bounds(t.type)
    if isinstance(t, mi.UnionType):
        return ", ".join(b for b in map(_bounds, t.types) if b)
    parts = []
    for name, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if getattr(t, name, None) is not None:
            parts.append(f"{op} {getattr(t, name)}")
    if pattern := getattr(t, "pattern", None):
        parts.append(f"matches `{pattern}`")
    if min_length := getattr(t, "min_length", None):
        parts.append(f"at least {min_length}")
    if isinstance(t, (mi.VarTupleType, mi.DictType)):
        parts += [b for b in [_bounds(_element(t))] if b]
    return ", ".join(parts)


def _element(t: mi.VarTupleType | mi.DictType) -> mi.Type:
    """What a list holds, or a table's values."""
    return t.item_type if isinstance(t, mi.VarTupleType) else t.value_type


def _default(f: msgspec.structs.FieldInfo) -> str:
    if f.default is not msgspec.NODEFAULT:
        value = f.default
    elif f.default_factory is not msgspec.NODEFAULT:
        value = f.default_factory()
    else:
        return "required"
    if value is None:
        return "none"
    return f"`{json.dumps(msgspec.to_builtins(value))}`"


def _is_path(tp: typing.Any) -> bool:
    tp = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else tp
    return any(
        isinstance(m, msgspec.Meta) and (m.extra or {}).get("path") for m in getattr(tp, "__metadata__", ())
    )


def _section(cls: type, header: str, docs: dict[str, dict[str, str]]) -> list[str]:
    rest = getattr(cls, "_rest", None)
    about = re.sub(r"^`\[[^`]*`: ", "", " ".join((cls.__doc__ or "").split()))
    out = [f"## `{header}`", "", about[:1].upper() + about[1:], ""]
    meaning = docs.get(cls.__name__, {})
    rows = []
    for key, f in file_keys(cls).items():
        t = mi.type_info(f.type)
        if isinstance(t, mi.StructType) or (
            isinstance(t, (mi.DictType, mi.VarTupleType)) and isinstance(_element(t), mi.StructType)
        ):
            continue  # a table of its own, in its own section
        kind = _type(t)
        if _is_path(f.type):
            kind = "list of path" if kind.startswith("list") else "path"
        name = "`<team>`" if key == rest else f"`{key}`"
        cells = (name, kind, _default(f), _bounds(t), meaning.get(f.name, ""))
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if rows:
        out += ["| key | type | default | bounds | meaning |", "|---|---|---|---|---|", *rows, ""]
    return out


def _tables(cls: type, path: str, header: str, docs: dict[str, dict[str, str]]) -> list[str]:
    """The sections of `cls` (the table at dotted `path`) and of every table below it, parents first."""
    out = _section(cls, header, docs)
    for key, f in file_keys(cls).items():
        t = mi.type_info(f.type)
        sub = f"{path}.{key}" if path else key
        if isinstance(t, mi.DictType) and isinstance(t.value_type, mi.StructType):
            out += _tables(t.value_type.cls, f"{sub}.<name>", f"[{sub}.<name>]", docs)
        elif isinstance(t, mi.VarTupleType) and isinstance(t.item_type, mi.StructType):
            out += _tables(t.item_type.cls, sub, f"[[{sub}]]", docs)
        elif isinstance(t, mi.StructType):
            out += _tables(t.cls, sub, f"[{sub}]", docs)
    return out


def config_md() -> str:
    docs = _field_docs()
    out = [INTRO.format(version=config.CONFIG_VERSION)]
    out += _tables(config.Config, "", "top level", docs)
    out += [
        "## Environment",
        "",
        "Applied after the file is read (`contracts.config.apply_env`): a variable that is set and not empty",
        "replaces the key. Its value is taken as given, so a relative path is relative to the working",
        "directory, like a command-line flag. The DaemonSet sets GOODPUT_NODE from the downward API.",
        "",
        "| variable | overrides |",
        "|---|---|",
    ]
    out += [f"| `{var}` | `[{'.'.join(keys[:-1])}].{keys[-1]}` |" for var, keys in config.ENVIRONMENT.items()]
    return "\n".join(out) + "\n"
