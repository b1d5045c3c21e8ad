"""``--output-schema``: the JSON Schema a run's typed answer must satisfy, resolved here, on the
client, before the run starts: from a schema file (JSON or YAML), or from a pydantic model (or
any type pydantic can describe) named by its import path, ``package.module:Model``.

The workflow never imports your code (it runs on workers that may not have it, and importing in
workflow code is no deterministic step): it receives the schema itself, in ``AgentConfig``. A
config file's ``output_schema`` may be an import path too; it is resolved the same way.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter
from pydantic.errors import PydanticUserError

from treadle.cli.exits import UsageError

__all__ = ["MAX_DOCUMENT_BYTES", "read_document", "resolve"]

IMPORT_PATH = re.compile(r"^[A-Za-z_][\w.]*[:.][A-Za-z_]\w*$")
"""``module:Name`` or ``module.Name``."""


def resolve(value: str, *, option: str = "--output-schema") -> dict[str, Any]:
    """The JSON Schema ``value`` names: a file's content, or an import path's type described."""
    path = Path(value)
    if path.is_file():
        return _from_file(path, option)
    if IMPORT_PATH.match(value):
        return _from_import(value, option)
    raise UsageError(
        f"{option} {value}: no such file, and not an import path (package.module:Model)"
    )


MAX_DOCUMENT_BYTES = 1_000_000
"""A run input file (``--output-schema``, ``--config``) at most: refused before it is read, so
a file of many megabytes cannot hold the command (YAML parses a few hundred KB a second), nor a
run (a schema is checked at every workflow task; its own limit is tighter)."""


def read_document(path: Path, option: str) -> Any:
    """A JSON or YAML file's content; ``UsageError`` in one line for a file that cannot be
    read, is over ``MAX_DOCUMENT_BYTES``, or is neither."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror}") from exc
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise UsageError(f"{option} {path} is over {MAX_DOCUMENT_BYTES:,} bytes; refused")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{option} {path} is not UTF-8 text") from exc
    try:
        return json.loads(text)  # the fast path: most are JSON
    except json.JSONDecodeError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0]
        raise UsageError(f"{option} {path} is not valid JSON or YAML: {first}") from exc


def _from_file(path: Path, option: str) -> dict[str, Any]:
    loaded = read_document(path, option)
    if not isinstance(loaded, dict):
        raise UsageError(f"{option} {path} must hold a JSON Schema object")
    return loaded


def _from_import(value: str, option: str) -> dict[str, Any]:
    module_name, _, name = value.rpartition(":") if ":" in value else value.rpartition(".")
    # As `python -m` does: modules of the directory the command runs in can be named.
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"{option} {value}: cannot import {module_name}: {exc}") from exc
    target = getattr(module, name, None)
    if target is None:
        raise UsageError(f"{option} {value}: {module_name} has no {name}")
    try:
        schema: dict[str, Any] = TypeAdapter(target).json_schema()
    except (PydanticUserError, TypeError) as exc:
        raise UsageError(f"{option} {value}: not a type pydantic can describe: {exc}") from exc
    return schema
