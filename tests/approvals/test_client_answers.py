"""What the command line shares when a run asks its client: files only inside the working
directory and never a secret-looking one without consent, environment variables only from the
allow-list and never secrets, and no secret value of the client's environment in anything."""

from __future__ import annotations

import os
from pathlib import Path, PurePath

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from treadle.cli.client_answers import (
    MIN_SECRET_CHARS,
    REDACTED,
    SECRET_DIRECTORIES,
    SECRET_FILE_NAMES,
    SECRET_PATHS,
    ClientPolicy,
    Declined,
    PathRefused,
    Shared,
    confine,
    environment_reply,
    looks_secret,
    read_reply,
    redact,
    requested_names,
    secret_file,
    secret_path,
    secret_values,
)

# --------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/ with a file, a subdirectory, a link inside, and links that lead out."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("do not send")
    root = tmp_path / "root"
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.rs").write_text("fn main() {}\n")
    (root / "notes.md").write_text("hello\n")
    (root / "inside_link").symlink_to(root / "src")
    (root / "out_link").symlink_to(outside)
    (root / "src" / "up_link").symlink_to(tmp_path)
    return root


def test_paths_inside_the_working_directory_are_read(tree: Path) -> None:
    """Relative, dotted, absolute-but-inside and linked-inside paths all name files in root."""
    real = Path(os.path.realpath(tree))
    assert confine(tree, "notes.md") == real / "notes.md"
    assert confine(tree, "./src/../notes.md") == real / "notes.md"
    assert confine(tree, str(tree / "src" / "main.rs")) == real / "src" / "main.rs"
    assert confine(tree, "inside_link/main.rs") == real / "src" / "main.rs"


@pytest.mark.parametrize(
    "requested",
    ["../outside/secret.txt", "/etc/passwd", "out_link/secret.txt", "src/up_link/outside", "..",
     "src/../../outside/secret.txt", "", "   ", "a\0b"],
)  # fmt: skip
def test_paths_that_lead_out_are_refused(tree: Path, requested: str) -> None:
    """``..``, absolute paths elsewhere, links that lead out, and non-paths: refused."""
    with pytest.raises(PathRefused):
        confine(tree, requested)


SEGMENTS = st.sampled_from(
    ["..", ".", "src", "notes.md", "main.rs", "inside_link", "out_link", "up_link", "x", ""]
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(SEGMENTS, min_size=1, max_size=6), absolute=st.booleans())
def test_a_confined_path_is_always_inside(tree: Path, parts: list[str], absolute: bool) -> None:
    """Whatever mix of ``..``, links and names: either refused, or a path whose every link is
    resolved and which lies inside the working directory."""
    requested = "/".join(parts)
    if absolute:
        requested = str(tree) + "/" + requested
    try:
        found = confine(tree, requested)
    except PathRefused:
        return
    real_root = Path(os.path.realpath(tree))
    assert found == Path(os.path.realpath(found))
    assert found == real_root or real_root in found.parents


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from(["src", "inside_link", "."]), max_size=4))
def test_paths_made_of_inside_names_are_accepted(tree: Path, parts: list[str]) -> None:
    """Paths that never step out are never refused (confinement does not refuse too much)."""
    confine(tree, "/".join([*parts, "main.rs"]) if parts else "notes.md")


def test_a_file_is_read_cut_or_declined(tree: Path) -> None:
    """Text is sent; a large file is cut to the cap, saying so; binary, missing, a directory and
    paths outside are declined with the reason."""
    policy = ClientPolicy(root=tree, allow_reads=True, max_read_chars=200)
    assert read_reply(policy, "notes.md") == Shared("hello\n")
    (tree / "big.txt").write_text("é" * 1_000)
    big = read_reply(policy, "big.txt")
    assert isinstance(big, Shared) and len(big.content) <= 200
    assert big.content.startswith("éé") and "cut: big.txt has 2000 bytes" in big.content
    (tree / "blob.bin").write_bytes(b"\x00\x01\x02")
    assert read_reply(policy, "blob.bin") == Declined("blob.bin is a binary file")
    (tree / "latin.txt").write_bytes("café".encode("latin-1"))
    assert read_reply(policy, "latin.txt") == Declined("latin.txt is not UTF-8 text")
    missing = read_reply(policy, "nope.txt")
    assert isinstance(missing, Declined) and "does not exist" in missing.reason
    assert read_reply(policy, "src") == Declined("src is not a regular file")
    outside = read_reply(policy, "../outside/secret.txt")
    assert isinstance(outside, Declined) and "outside" in outside.reason


# --------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------


ENVIRON = {
    "HOME_DIR": "/home/me",
    "EDITOR": "vim",
    "MY_API_KEY": "sk-123",
    "GITHUB_TOKEN": "ghp",
    "db_password": "pw",
}


@pytest.mark.parametrize(
    ("name", "secret"),
    [("OPENAI_API_KEY", True), ("github_token", True), ("AWS_SECRET_ACCESS_KEY", True),
     ("DB_PASSWORD", True), ("Credentials_File", True), ("keyring", True), ("HOME", False),
     ("PATH", False), ("EDITOR", False)],
)  # fmt: skip
def test_secret_names(name: str, secret: bool) -> None:
    """Names holding KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL (any case) are secrets."""
    assert looks_secret(name) is secret


def test_requested_names_are_split_and_cleaned() -> None:
    """Several names, ``$NAME``, quotes; ``*`` and nothing mean "the environment"."""
    assert requested_names("HOME, $EDITOR `PATH`") == ("HOME", "EDITOR", "PATH")
    assert requested_names("*") == ()
    assert requested_names("") == ()


def test_only_allowed_variables_are_shared() -> None:
    """Allowed names are answered (unset ones say so); others are listed as not shared."""
    reply = environment_reply("HOME_DIR, EDITOR, UNSET_ONE", ["HOME_DIR", "UNSET_ONE"], ENVIRON)
    assert reply == Shared(
        "HOME_DIR=/home/me\nUNSET_ONE is not set\n"
        "not shared: EDITOR (not in the client's --env allow-list)"
    )


def test_a_secret_is_never_shared_even_when_allowed() -> None:
    """``--env MY_API_KEY`` does not make it shareable; asked alone, the query is declined."""
    reply = environment_reply("MY_API_KEY", ["MY_API_KEY", "HOME_DIR"], ENVIRON)
    assert reply == Declined("not shared: MY_API_KEY (a secret: never shared)")
    everything = environment_reply("*", ["MY_API_KEY", "HOME_DIR", "db_password"], ENVIRON)
    assert isinstance(everything, Shared)
    assert "sk-123" not in everything.content and "pw" not in everything.content.split("\n")[0]
    assert everything.content.startswith("HOME_DIR=/home/me\nnot shared: MY_API_KEY")


def test_no_allow_list_declines_the_environment() -> None:
    """Without ``--env`` nothing is shared, and the reason says how to share."""
    reply = environment_reply("*", [], ENVIRON)
    assert isinstance(reply, Declined) and "--env NAME" in reply.reason
    assert environment_reply("EDITOR", [], ENVIRON) == Declined(
        "not shared: EDITOR (not in the client's --env allow-list)"
    )


@given(
    names=st.lists(st.sampled_from(sorted(ENVIRON)), min_size=1, max_size=5),
    allowed=st.lists(st.sampled_from(sorted(ENVIRON)), max_size=5),
)
def test_no_secret_value_ever_leaves(names: list[str], allowed: list[str]) -> None:
    """Whatever is asked and allowed, no secret's value is in the answer."""
    reply = environment_reply(",".join(names), allowed, ENVIRON)
    if isinstance(reply, Shared):
        for name, value in ENVIRON.items():
            if looks_secret(name):
                assert f"{name}={value}" not in reply.content
            elif name in names and name not in allowed:
                assert f"{name}=" not in reply.content


# --------------------------------------------------------------------------------------------
# Files that look like secrets
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "pattern"),
    [(".env", ".env"), (".env.production", ".env.*"), ("deploy/prod.env", "*.env"),
     (".netrc", ".netrc"), ("certs/server.PEM", "*.pem"), ("id_rsa", "id_rsa*"),
     ("keys/id_ed25519.pub", "id_ed25519*"), (".git/config", ".git/config"),
     ("sub/.git/config", ".git/config"), ("temporal.toml", "temporal.toml"),
     (".pypirc", ".pypirc"), (".npmrc", ".npmrc"), ("aws/credentials", "*credential*"),
     ("client_secret.json", "*secret*"), (".ssh/config", ".ssh/*"), (".aws/config", ".aws/*"),
     ("infra/terraform.tfstate", "*.tfstate"), (".config/gcloud/adc.json", ".config/gcloud/*")],
)  # fmt: skip
def test_secret_looking_files(path: str, pattern: str) -> None:
    """The documented names, directories and path endings are secrets, in any case."""
    assert secret_file(PurePath(path)) == pattern


@pytest.mark.parametrize(
    "path",
    ["notes.md", "src/main.rs", "README.md", ".gitignore", ".git/HEAD", "environment.md",
     "config/settings.toml", "keyboard.py", "tokens.py", "docs/ssh.md", "."],
)  # fmt: skip
def test_ordinary_files_are_not_secrets(path: str) -> None:
    """Source, docs and ordinary config are not refused (the rule is a list, not a guess)."""
    assert secret_file(PurePath(path)) is None


def test_allow_reads_alone_never_sends_a_secret_looking_file(tree: Path) -> None:
    """``read_reply`` declines a secret-looking file, asked by name, by an absolute path or
    through a harmless-looking link, saying why and how it could be sent; with the user's
    consent at a prompt (``secret_ok``) it is read."""
    (tree / ".env").write_text("OPENAI_API_KEY=canary-123\n")
    (tree / "settings.txt").symlink_to(tree / ".env")
    policy = ClientPolicy(root=tree, allow_reads=True)
    for requested in (".env", str(tree / ".env"), "settings.txt", "./src/../.env"):
        reply = read_reply(policy, requested)
        assert isinstance(reply, Declined), requested
        assert "looks like a secret (it matches .env)" in reply.reason
        assert "consents at a terminal" in reply.reason and "--allow-reads" in reply.reason
    assert read_reply(policy, ".env", secret_ok=True) == Shared("OPENAI_API_KEY=canary-123\n")
    assert secret_path(tree, "notes.md") is None
    assert secret_path(tree, "../outside/secret.txt") is None  # refused by confine instead


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from([".env", ".netrc", "id_rsa", "server.pem", "temporal.toml", ".npmrc"]),
    prefix=st.lists(st.sampled_from([".", "src/..", "inside_link/..", "src/./.."]), max_size=3),
    folder=st.sampled_from(["src", "inside_link", "./src"]),
    absolute=st.booleans(),
)
def test_no_secret_file_is_sent_without_consent(
    tree: Path, name: str, prefix: list[str], folder: str, absolute: bool
) -> None:
    """However the path to a secret-looking file is spelt (dots, links, absolute), --allow-reads
    alone declines it as a secret."""
    (tree / "src" / name).write_text("very-secret-value")
    requested = "/".join([*prefix, folder, name])
    if absolute:
        requested = f"{tree}/{requested}"
    reply = read_reply(ClientPolicy(root=tree, allow_reads=True), requested)
    assert isinstance(reply, Declined) and "looks like a secret" in reply.reason


# --------------------------------------------------------------------------------------------
# Redaction
# --------------------------------------------------------------------------------------------


def test_secret_values_are_the_long_values_of_secret_names() -> None:
    """Values of KEY/TOKEN/SECRET/PASSWORD/CREDENTIAL names, 8 characters or more, longest
    first; short ones and ordinary names are left alone."""
    environ = {
        "OPENAI_API_KEY": "sk-abcdefgh",
        "GITHUB_TOKEN": "ghp_0123456789abcdef",
        "DB_PASSWORD": "short",
        "HOME": "/home/someone",
        "AWS_SECRET_ACCESS_KEY": "sk-abcdefgh",
    }
    assert secret_values(environ) == ("ghp_0123456789abcdef", "sk-abcdefgh")
    assert MIN_SECRET_CHARS == 8


def test_a_file_that_embeds_an_exported_key_is_sent_redacted(tree: Path) -> None:
    """The key's value is replaced wherever it is, before the file is cut, so no part of it is
    sent either."""
    key = "canary-0123456789"  # long enough to be redacted; no key-shaped text in the repo
    (tree / "setup.sh").write_text(f"export OPENAI_API_KEY={key}\necho {key}\n")
    policy = ClientPolicy(root=tree, allow_reads=True)
    reply = read_reply(policy, "setup.sh", redacting=secret_values({"OPENAI_API_KEY": key}))
    assert reply == Shared(f"export OPENAI_API_KEY={REDACTED}\necho {REDACTED}\n")
    (tree / "long.txt").write_text("x" * 190 + key)
    cut = read_reply(
        ClientPolicy(root=tree, allow_reads=True, max_read_chars=200),
        "long.txt",
        redacting=(key,),
    )
    assert isinstance(cut, Shared) and "sk-proj" not in cut.content


SECRET_TEXT = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", min_size=8, max_size=20)


@given(
    secrets=st.lists(SECRET_TEXT, min_size=1, max_size=4),
    pieces=st.lists(st.one_of(st.text(max_size=12), st.integers(0, 3)), max_size=12),
)
def test_redaction_leaves_no_secret_value(secrets: list[str], pieces: list[str | int]) -> None:
    """Whatever text holds the values (overlapping, repeated, next to each other), none is
    left whole once redacted, and text without them is unchanged."""
    text = "".join(secrets[p % len(secrets)] if isinstance(p, int) else p for p in pieces)
    redacted = redact(text, secrets)
    for value in secrets:
        assert value not in redacted
    if not any(value in text for value in secrets):
        assert redacted == text


def test_the_readme_lists_every_secret_pattern() -> None:
    """The documented list (docs/client-queries.md) is the list the client applies."""
    readme = (Path(__file__).parents[2] / "docs" / "client-queries.md").read_text()
    for pattern in SECRET_FILE_NAMES:
        # "*secret*" and the like are written as words: "names holding secret, credential..."
        word = pattern.strip("*")
        shown = word if pattern == f"*{word}*" and word.isalpha() else f"`{pattern}`"
        assert shown in readme, pattern
    for directory in SECRET_DIRECTORIES:
        assert f"`{directory}/`" in readme, directory
    for path in SECRET_PATHS:
        assert f"`{path}`" in readme, path
