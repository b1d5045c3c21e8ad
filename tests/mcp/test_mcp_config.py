"""The worker's MCP config file: what it accepts, and one clear line for what it refuses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.support.mcp_server import SCRIPT
from tests.support.processes import clean_env, refusal, run_cli, start_worker
from treadle.activities.mcp import McpConfigError, load_mcp_config, parse_mcp_config

GOOD = """\
# Two servers: one the worker starts, one it reaches.
[[servers]]
name = "files"
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv"]
env = ["FILES_TOKEN"]
cwd = "work"
timeout_seconds = 30

[[servers]]
name = "search"
url = "https://mcp.example.com/mcp"
headers_from_env = { Authorization = "SEARCH_AUTH" }
list_timeout_seconds = 5
"""
ENVIRON = {"FILES_TOKEN": "t0ken", "SEARCH_AUTH": "Bearer s3cret"}


def test_a_good_file_gives_both_transports(tmp_path: Path) -> None:
    """stdio and HTTP servers load with their settings; a relative cwd is the file's."""
    path = tmp_path / "mcp.toml"
    path.write_text(GOOD)
    config = load_mcp_config(path, ENVIRON)
    files, search = config.servers
    assert (files.transport, search.transport) == ("stdio", "http")
    assert files.args == ("-y", "@modelcontextprotocol/server-filesystem", "/srv")
    assert files.cwd == tmp_path / "work"
    assert files.timeout_seconds == 30
    assert files.list_timeout_seconds == 10  # the default
    assert search.headers_from_env == {"Authorization": "SEARCH_AUTH"}
    assert config.names() == ("files", "search")
    assert "s3cret" not in config.model_dump_json()  # only names of variables, never values


def test_an_empty_file_means_no_servers(tmp_path: Path) -> None:
    """A file with comments only is valid: the worker offers no MCP tools."""
    path = tmp_path / "mcp.toml"
    path.write_text("# nothing yet\n")
    assert load_mcp_config(path, {}).servers == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[[servers]]\ncommand = "x"\n', "server #1: name: Field required"),
        ('[[servers]]\nname = "Bad Name"\ncommand = "x"\n', "server 'Bad Name': name: "),
        (
            '[[servers]]\nname = "a"\ncommand = "x"\nurl = "http://h/mcp"\n',
            "server 'a': give either command (stdio) or url (streamable HTTP)",
        ),
        ('[[servers]]\nname = "a"\n', "server 'a': give either command"),
        (
            '[[servers]]\nname = "a"\ncommand = "x"\nenv = { TOKEN = "abc" }\n',
            "server 'a': env: list the NAMES of worker environment variables",
        ),
        (
            '[[servers]]\nname = "a"\nurl = "http://h/mcp"\nheaders_from_env = { X = "a b" }\n',
            "server 'a': headers_from_env: X: 'a b' is not an environment variable name",
        ),
        (
            '[[servers]]\nname = "a"\nurl = "https://u:p@h/mcp"\n',
            "server 'a': url: credentials in the URL",
        ),
        ('[[servers]]\nname = "a"\nurl = "ftp://h/x"\n', "server 'a': url: 'ftp://h/x' is not"),
        (
            '[[servers]]\nname = "a"\nurl = "http://h/mcp"\nargs = ["x"]\n',
            "server 'a': args: only for a command (stdio) server",
        ),
        (
            '[[servers]]\nname = "a"\ncommand = "x"\ntimeout_seconds = 0\n',
            "server 'a': timeout_seconds: Input should be greater than 0",
        ),
        (
            '[[servers]]\nname = "a"\ncommand = "x"\nheaders = { A = "b" }\n',
            "server 'a': headers: Extra inputs are not permitted",
        ),
        (
            '[[servers]]\nname = "a"\ncommand = "x"\n[[servers]]\nname = "a"\ncommand = "y"\n',
            "servers: server name(s) used twice: a",
        ),
        ('[server]\nname = "a"\n', "unknown key(s) server"),
        ('[[servers]\nname = "a"\n', "not valid TOML: "),
        (
            '[[servers]]\nname = "a"\ncommand = "x"\nenv = ["NOT_SET_ANYWHERE"]\n',
            "environment variable(s) not set: server 'a' needs NOT_SET_ANYWHERE",
        ),
    ],
)
def test_a_bad_file_is_refused_in_one_line_naming_server_and_field(
    tmp_path: Path, text: str, expected: str
) -> None:
    """Each mistake is one line that starts with the file and names the server and field."""
    path = tmp_path / "mcp.toml"
    path.write_text(text)
    with pytest.raises(McpConfigError) as caught:
        load_mcp_config(path, {})
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"MCP config {path}: ")
    assert expected in message, message


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    """A path that does not exist says so."""
    with pytest.raises(McpConfigError, match=r"nope\.toml: no such file"):
        load_mcp_config(tmp_path / "nope.toml", {})


def test_many_problems_stay_on_one_line() -> None:
    """Three problems are shown, the rest counted."""
    data = {"servers": [{"name": f"s{i}"} for i in range(5)]}
    with pytest.raises(McpConfigError) as caught:
        parse_mcp_config(data)
    message = str(caught.value)
    assert "\n" not in message
    assert message.count("give either command") == 3
    assert message.endswith("(and 2 more)")


async def test_worker_refuses_a_bad_mcp_config_with_one_line_and_exit_2(tmp_path: Path) -> None:
    """worker.py --mcp-config bad.toml exits 2 with one 'error:' line, before connecting."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[[servers]]\nname = "a"\ncommand = "x"\nurl = "http://h/mcp"\n')
    done = await run_cli(
        "--mcp-config", str(bad),
        "--address", "127.0.0.1:1",  # never reached: the config is refused first
        program="worker.py",
    )  # fmt: skip
    assert refusal(done).startswith(f"error: MCP config {bad}: server 'a': give either command")


async def test_worker_reads_the_config_path_from_the_environment(tmp_path: Path) -> None:
    """TREADLE_MCP_CONFIG works like --mcp-config."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"servers": []}')  # JSON is not TOML
    done = await run_cli(
        "--address", "127.0.0.1:1", env=clean_env(TREADLE_MCP_CONFIG=str(bad)), program="worker.py"
    )
    assert refusal(done).startswith(f"error: MCP config {bad}: not valid TOML: ")


async def test_worker_starts_with_a_good_mcp_config_and_stops_cleanly(
    client: Client, tmp_path: Path
) -> None:
    """worker.py --mcp-config good.toml polls its task queue and exits 0 on SIGTERM."""
    good = tmp_path / "mcp.toml"
    good.write_text(
        f'[[servers]]\nname = "test"\ncommand = "{sys.executable}"\nargs = ["{SCRIPT}"]\n'
        'env = ["MCP_TEST_SECRET"]\n'
    )
    worker = await start_worker(
        client.service_client.config.target_host,
        f"test-mcp-{tmp_path.name}",
        clean_env(MCP_TEST_SECRET="x"),
        "--mcp-config",
        str(good),
    )
    assert await worker.terminate() == 0
    assert worker.output[-1] == "Worker stopped."
