"""A model that tries to leave its workspace gets error observations; nothing outside changes."""

from __future__ import annotations

from tests.support.harness import Harness, tool_messages
from treadle.workflows.agent.messages.models import AgentResult, RunStatus


async def test_escape_attempts_are_refused_inside_a_real_run(harness: Harness) -> None:
    """Absolute paths, '..' and symlinks leading out are refused; the run still answers."""
    outside = harness.workspace.parent / "outside.txt"
    outside.write_text("secret")
    (harness.workspace / "link").symlink_to(harness.workspace.parent, target_is_directory=True)
    model = harness.script(
        {
            "tool_calls": [
                {"id": "abs", "name": "read_file", "arguments": {"path": str(outside)}},
                {"id": "dots", "name": "read_file", "arguments": {"path": "../outside.txt"}},
                {
                    "id": "link",
                    "name": "write_file",
                    "arguments": {"path": "link/outside.txt", "content": "pwned"},
                },
                {"id": "list", "name": "list_dir", "arguments": {"path": "link"}},
            ]
        },
        {"content": "I stayed inside."},
    )
    handle = await harness.start(model)
    result: AgentResult = await handle.result()

    assert result.status is RunStatus.DONE
    assert outside.read_text() == "secret"
    results = {m["tool_call_id"]: m["content"] for m in tool_messages(harness.requests(model)[1])}
    assert results["abs"].startswith("ERROR: path ")
    assert "is absolute" in results["abs"]
    assert "outside the workspace" in results["dots"]
    assert "outside the workspace" in results["link"]
    assert "outside the workspace" in results["list"]
    assert all("secret" not in text for text in results.values())


async def test_command_escape_attempts_are_refused_inside_a_real_run(harness: Harness) -> None:
    """Glued option values, writes through links and a link-following recursive search leave
    nothing outside created or shown; an ordinary command in the same step still runs."""
    outside = harness.workspace.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (harness.workspace / "link").symlink_to(outside, target_is_directory=True)
    (harness.workspace / "a.txt").write_text("b\na\n")
    calls = {
        "glued": f"sort -o{outside}/made.txt a.txt",
        "dots": "sort -o../outside/made.txt a.txt",
        "through_link": "sort -olink/made.txt a.txt",
        "recursive": "grep -R secret .",
        "ordinary": "sort -o sorted.txt a.txt",
    }
    model = harness.script(
        {
            "tool_calls": [
                {"id": name, "name": "run_command", "arguments": {"command": line}}
                for name, line in calls.items()
            ]
        },
        {"content": "I stayed inside."},
    )
    handle = await harness.start(model, allow_run_command=True, command_allowlist=("grep", "sort"))
    result: AgentResult = await handle.result()

    assert result.status is RunStatus.DONE
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    results = {m["tool_call_id"]: m["content"] for m in tool_messages(harness.requests(model)[1])}
    for name in ("glued", "dots", "through_link"):
        assert results[name].startswith("ERROR: argument "), results[name]
        assert "outside the workspace" in results[name]
    assert results["recursive"].startswith("ERROR: ")  # refused, or found nothing when confined
    assert "secret" not in results["recursive"]
    assert results["ordinary"] == "exit code 0\n(no output)"
    assert (harness.workspace / "sorted.txt").read_text() == "a\nb\n"
