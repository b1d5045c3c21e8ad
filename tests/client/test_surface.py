"""The client's public surface holds: every exported name exists, and the error tree drawn in
``treadle/client/errors.py``'s docstring is the tree of its classes, every one an
``AgentClientError``."""

from __future__ import annotations

import inspect
import re

import treadle.client
from treadle.client import errors

NODE = re.compile(r"^    (?:[│ ]*[├└]── )?([A-Z]\w+)")
"""A node of the drawn tree: its name, right after the tree's lines (or first, for the root)."""


def test_every_exported_name_exists() -> None:
    """``__all__`` names only what the package has, each once (ruff keeps it sorted)."""
    names = treadle.client.__all__
    assert [n for n in names if not hasattr(treadle.client, n)] == []
    assert len(set(names)) == len(names)


def test_the_error_tree_in_the_docstring_is_the_class_tree() -> None:
    """Each error class is drawn under its parent, and the drawing names no other class."""
    drawn: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        node = NODE.match(line)
        if node is None:
            continue  # prose, or a node's description going on
        depth = node.start(1)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        drawn[node.group(1)] = stack[-1][1] if stack else None
        stack.append((depth, node.group(1)))
    classes = {
        name: cls
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, errors.AgentClientError)
    }
    assert set(drawn) == set(classes)
    for name, parent in drawn.items():
        bases = [b.__name__ for b in classes[name].__bases__ if b.__name__ in classes]
        assert bases == ([] if parent is None else [parent]), name
    assert all(name in errors.__all__ for name in classes)
