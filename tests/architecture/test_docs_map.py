"""The documentation holds: the layout map in docs/architecture.md names every product module and
nothing that does not exist, and every relative link in the README and docs/ leads somewhere.

Nothing is imported and no server is needed: the map and the links are read as text. The readers
are themselves tested on small synthetic texts, so a check cannot pass by seeing nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAP_HEADING = "## The layout map"
PRODUCT_DIRS = ("workflows", "activities", "treadle", "bench")
ENTRY_POINTS = ("worker.py", "starter.py")
INDENT = 2
"""Spaces of indentation per directory level in the map."""

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


# --- the layout map ---------------------------------------------------------------------------


def map_block(markdown: str) -> str:
    """The first fenced block after the map's heading."""
    start = markdown.index(MAP_HEADING)
    match = re.search(r"^```[^\n]*\n(.*?)^```", markdown[start:], re.M | re.S)
    assert match, f"no code block after {MAP_HEADING!r}"
    return match.group(1)


def map_entries(block: str) -> list[str]:
    """Every path the map names, relative to the root: a line's first word, joined to the
    directories (names ending in ``/``) above it by indentation. A directory entry is kept with
    its trailing slash; a package's modules may be listed under it or not."""
    entries: list[str] = []
    stack: list[str] = []  # the directory open at each level
    for number, line in enumerate(block.splitlines(), 1):
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        assert indent % INDENT == 0, f"map line {number}: indentation {indent}: {line!r}"
        level = indent // INDENT
        assert level <= len(stack), f"map line {number}: indented under no directory: {line!r}"
        del stack[level:]
        name = line.split()[0]
        path = "/".join([*stack, name])
        entries.append(path)
        if name.endswith("/"):
            stack.append(name.rstrip("/"))
    return entries


def product_modules(root: Path) -> set[str]:
    """Every module and package of the product: ``.py`` files under the product directories
    (an ``__init__.py`` as its package, ``dir/``), and the entry points."""
    found = {name for name in ENTRY_POINTS if (root / name).is_file()}
    for top in PRODUCT_DIRS:
        for path in (root / top).rglob("*.py"):
            relative = path.relative_to(root)
            if "__pycache__" in relative.parts:
                continue
            found.add(relative.parent.as_posix() + "/")
            if path.name != "__init__.py":
                found.add(relative.as_posix())
    return found


def map_problems(root: Path, entries: list[str]) -> list[str]:
    """What the map gets wrong: product modules it leaves out, names that do not exist, and
    names listed twice."""
    named = set(entries)
    problems = [f"not in the map: {path}" for path in sorted(product_modules(root) - named)]
    for path in entries:
        target = root / path.rstrip("/")
        exists = target.is_dir() if path.endswith("/") else target.is_file()
        if not exists:
            problems.append(f"in the map but not in the tree: {path}")
    problems += [f"listed twice: {path}" for path in sorted(named) if entries.count(path) > 1]
    return problems


def test_the_layout_map_names_every_module_and_nothing_else() -> None:
    """docs/architecture.md's map names each product module and package, and only what exists."""
    entries = map_entries(map_block(ARCHITECTURE.read_text()))
    problems = map_problems(ROOT, entries)
    assert not problems, "docs/architecture.md's layout map:\n" + "\n".join(problems)


def test_the_map_reader_follows_indentation(tmp_path: Path) -> None:
    """Nested names are joined to their directories; a missing module and a stale name are both
    reported, and a package listed without its modules still counts as the package."""
    files = ("worker.py", "workflows/__init__.py", "workflows/a.py", "workflows/sub/__init__.py")
    for path in (*files, "workflows/sub/b.py", "bench/c.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    block = "worker.py   entry\nworkflows/  layer\n  a.py  one\n  sub/  pkg\n    b.py  two\n"
    block += "  gone.py  stale\n"
    entries = map_entries(block)
    assert entries == [
        "worker.py", "workflows/", "workflows/a.py", "workflows/sub/", "workflows/sub/b.py",
        "workflows/gone.py",
    ]  # fmt: skip
    assert map_problems(tmp_path, entries) == [
        "not in the map: bench/",
        "not in the map: bench/c.py",
        "in the map but not in the tree: workflows/gone.py",
    ]


# --- links ------------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = INLINE_CODE.sub(lambda m: m.group(0).strip("`"), heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor, numbered as GitHub numbers repeats (``name``, ``name-1``...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for match in HEADING.finditer(FENCE.sub("", markdown)):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        found.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return found


def relative_links(markdown: str) -> list[str]:
    """Link and image targets outside code, leaving out URLs with a scheme (``https:``...)."""
    text = INLINE_CODE.sub("", FENCE.sub("", markdown))
    return [t for t in LINK.findall(text) if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t)]


def broken_links(document: Path) -> list[str]:
    """The document's relative links whose file, or heading in a Markdown file, is missing."""
    problems = []
    for target in relative_links(document.read_text()):
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        if not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
            problems.append(f"{target}: no heading with that anchor")
    return problems


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    """Each relative link and image in README.md and docs/ leads to a file that exists, and a
    link to a heading names one the page has."""
    problems = [
        f"{document.relative_to(ROOT)}: {problem}"
        for document in documents()
        for problem in broken_links(document)
    ]
    assert not problems, "\n".join(problems)


def test_the_link_reader_sees_links_and_headings(tmp_path: Path) -> None:
    """Links in code are not links; a missing file and a missing heading are both reported."""
    (tmp_path / "other.md").write_text("# Other page\n\n## The `run_command` rules: why\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\nSee [other](other.md#the-run_command-rules-why), [here](#page), "
        "[web](https://example.com), ![img](missing.png)\nand [gone](other.md#nowhere).\n"
        "`[not a link](nowhere.md)`\n```\n[nor this](nowhere.md)\n```\n"
    )
    assert broken_links(page) == [
        "missing.png: no such file",
        "other.md#nowhere: no heading with that anchor",
    ]
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_the_readme_links_every_page_of_the_manual() -> None:
    """The README is the front door: each page under docs/ is reachable from it in one click."""
    linked = {
        (ROOT / target.partition("#")[0]).resolve()
        for target in relative_links((ROOT / "README.md").read_text())
    }
    pages = sorted((ROOT / "docs").rglob("*.md"))
    unlinked = [str(page.relative_to(ROOT)) for page in pages if page.resolve() not in linked]
    assert not unlinked, "README.md links none of: " + ", ".join(unlinked)
