"""`treadle workspace ID --into DIR` cannot hurt its user, whatever the store holds: a crafted
manifest (a link and files below it) writes nothing outside the directory, a manifest's setuid
and world-writable modes are not restored, a directory holding other files is refused unless
``--force`` (an earlier check-out of the same run is not), and a ``--manifest`` that is not a
key is one line, exit 2."""

from __future__ import annotations

import stat
from pathlib import Path

from temporalio.client import Client

from tests.support.processes import clean_env, run_cli, server_address
from treadle.activities.store.blobs import FileBlobStore
from treadle.activities.workspace.manifest import SYMLINK, Manifest, Manifests, State


async def crafted(store: FileBlobStore, files: dict[str, tuple[bytes, int]]) -> str:
    """A manifest of ``files`` (path -> content, mode; ``SYMLINK``: the content is the link's
    target) put straight into the store, as anyone who can write the bucket could."""
    state: State = {}
    for path, (content, mode) in files.items():
        state[path] = (await store.put(content), mode, len(content))
    manifest = Manifest(
        workflow_id="crafted", step=1, seq=0, parent=None, base=None, changes=state,
        files=len(state), total_bytes=sum(e[2] for e in state.values()), changed=len(state),
        changed_bytes=0,
    )  # fmt: skip
    return await Manifests(store).put(manifest, state)


async def workspace(client: Client, store: Path, home: Path, *args: str) -> tuple[int, str, str]:
    done = await run_cli(
        "--address", server_address(client), "workspace", *args, "--store", str(store),
        env=clean_env(TREADLE_HOME=str(home)),
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr


async def test_a_manifest_with_files_below_its_link_writes_nothing_outside(
    client: Client, tmp_path: Path
) -> None:
    """A link ``d -> ../outside`` and forty files ``d/f…``: the check-out is refused whole
    in one line (exit 2), and nothing is written outside its directory."""
    store = FileBlobStore(tmp_path / "store")
    outside = tmp_path / "outside"
    outside.mkdir()
    files = {"d": (b"../outside", SYMLINK), "a.txt": (b"fine", 0o644)}
    files.update({f"d/f{n}": (b"planted", 0o644) for n in range(40)})
    key = await crafted(store, files)
    into = tmp_path / "into"
    code, out, err = await workspace(
        client, tmp_path / "store", tmp_path / "home", "x", "--manifest", key, "--into", str(into)
    )
    assert code == 2, (out, err)
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "below one of its symbolic links" in err
    assert list(outside.iterdir()) == []


async def test_modes_are_restored_within_0755_and_links_as_links(
    client: Client, tmp_path: Path
) -> None:
    """A setuid 04777 file comes back 0755, a world-writable 0666 one 0644, a private 0600
    stays 0600, a link is a link."""
    store = FileBlobStore(tmp_path / "store")
    key = await crafted(
        store,
        {
            "run.sh": (b"#!/bin/sh\n", 0o4777),
            "open.txt": (b"anyone", 0o666),
            "private.txt": (b"mine", 0o600),
            "link": (b"open.txt", SYMLINK),
        },
    )
    into = tmp_path / "into"
    code, _, err = await workspace(
        client, tmp_path / "store", tmp_path / "home", "x", "--manifest", key, "--into", str(into)
    )
    assert code == 0, err
    modes = {p.name: stat.S_IMODE(p.lstat().st_mode) for p in into.iterdir() if not p.is_symlink()}
    assert modes == {"run.sh": 0o755, "open.txt": 0o644, "private.txt": 0o600}
    assert (into / "link").is_symlink() and (into / "link").read_bytes() == b"anyone"


async def test_a_directory_of_other_files_is_refused_unless_forced(
    client: Client, tmp_path: Path
) -> None:
    """``--into`` a directory holding the user's files: refused (exit 2, one line), nothing
    removed; an earlier check-out of the same run is checked out over; another run's only with
    ``--force``, which removes what the snapshot does not have."""
    store_dir, home = tmp_path / "store", tmp_path / "home"
    store = FileBlobStore(store_dir)
    first = await crafted(store, {"a.txt": (b"one", 0o644)})
    second = await crafted(store, {"b.txt": (b"two", 0o644)})
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "precious.txt").write_text("mine")
    (repo / "src" / "main.py").write_text("print()")
    code, out, err = await workspace(client, store_dir, home, "r1", "--manifest", first,
                                     "--into", str(repo))  # fmt: skip
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and "not an earlier check-out of run 'r1'" in err
    assert "--force" in err
    assert (repo / "precious.txt").read_text() == "mine"
    assert (repo / "src" / "main.py").read_text() == "print()"

    fresh = tmp_path / "fresh"
    for key in (first, second):  # the same run's check-out again: over its own files
        code, out, err = await workspace(client, store_dir, home, "r1", "--manifest", key,
                                         "--into", str(fresh))  # fmt: skip
        assert code == 0, err
    assert sorted(p.name for p in fresh.iterdir()) == ["b.txt"]
    code, out, err = await workspace(client, store_dir, home, "r2", "--manifest", first,
                                     "--into", str(fresh))  # fmt: skip
    assert code == 2 and "not an earlier check-out of run 'r2'" in err, (out, err)

    code, out, err = await workspace(client, store_dir, home, "r1", "--manifest", first,
                                     "--into", str(repo), "--force")  # fmt: skip
    assert code == 0, err
    assert "2 removed" in out
    assert sorted(p.name for p in repo.rglob("*") if p.is_file()) == ["a.txt"]


async def test_a_manifest_that_is_not_a_key_is_one_line(client: Client, tmp_path: Path) -> None:
    """``--manifest ../../etc/passwd``: one line naming the option, exit 2."""
    code, out, err = await workspace(
        client, tmp_path / "store", tmp_path / "home", "x", "--manifest", "../../etc/passwd"
    )
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and "is not a manifest's key" in err, err
