"""``treadle``'s face: ``__all__`` is the public surface a library user imports from, every name
in it resolves, every public name is in it, and importing the package (which every module of
Treadle does first, inside the workflow sandbox too) imports nothing else."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import treadle

ROOT = Path(__file__).resolve().parents[2]
USER_PAGES = ("embedding.md", "tools.md", "hooks.md", "models.md")
"""The pages that show a library user's own code."""


@pytest.mark.parametrize("name", treadle.__all__)
def test_every_listed_name_resolves(name: str) -> None:
    """``from treadle import NAME`` works for each name of ``__all__``, and gives the object of
    that name (``AgentClient`` lives in ``treadle.client``, from the client's branch)."""
    value = getattr(treadle, name)
    assert getattr(value, "__name__", name) == name or name.isupper()


def test_every_public_name_is_listed() -> None:
    """Past the names of ``__all__``, the package shows only its modules (imported ones become
    attributes): nothing public slips out unlisted, and ``__all__`` is sorted, unique."""
    public = {
        name
        for name in vars(treadle)
        if not name.startswith("_") and not isinstance(vars(treadle)[name], ModuleType)
    }
    assert public <= set(treadle.__all__)
    assert set(dir(treadle)) >= set(treadle.__all__)
    listed = [n for n in treadle.__all__ if n.isupper()] + sorted(
        n for n in treadle.__all__ if not n.isupper()
    )
    assert treadle.__all__ == listed and len(set(listed)) == len(listed)


def test_an_unknown_name_is_an_attribute_error() -> None:
    """A name not on the face is not looked for anywhere."""
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        treadle.Nope  # noqa: B018


def _imported_by(statement: str) -> set[str]:
    """The modules of Treadle, temporalio, pydantic and httpx a fresh interpreter has loaded
    after ``statement``."""
    code = (
        f"{statement}\nimport sys\n"
        "print('\\n'.join(m for m in sys.modules "
        "if m.split('.')[0] in {'treadle', 'temporalio', 'pydantic', 'httpx'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(done.stdout.split())


def test_importing_treadle_imports_nothing_else() -> None:
    """``import treadle`` loads the package's ``__init__`` and nothing more."""
    assert _imported_by("import treadle") == {"treadle"}


def test_a_message_module_does_not_load_the_plugin_or_the_activities() -> None:
    """The run's messages, imported as the workflow sandbox imports them, bring no activity
    code, no plugin and no HTTP client: the face costs them nothing."""
    loaded = _imported_by("import treadle.workflows.agent.messages.models")
    assert not {m for m in loaded if m.startswith(("treadle.activities", "treadle.plugin"))}
    assert "httpx" not in loaded


def test_the_users_pages_import_only_from_the_face() -> None:
    """The code a user copies from the docs imports Treadle by its public names, never from a
    module whose path tells how Treadle is built (``from activities.tools.custom import ...``
    is what broke for users)."""
    found = []
    for page in USER_PAGES:
        for line in (ROOT / "docs" / page).read_text().splitlines():
            module = re.match(r"\s*(?:from|import) ([\w.]+)", line)
            if module and _treadles_inside(module.group(1)):
                found.append(f"{page}: {line.strip()}")
    assert found == []


def _treadles_inside(module: str) -> bool:
    """A module below ``treadle``, or one of the repository's own ``activities`` and
    ``workflows`` (a user's app has its own of those names: ``activities.greetings``)."""
    if module.startswith("treadle."):
        return True
    path = ROOT.joinpath(*module.split("."))
    top = module.split(".")[0]
    return (
        top in ("activities", "workflows")
        and "." in module
        and (path.with_suffix(".py").is_file() or (path / "__init__.py").is_file())
    )
