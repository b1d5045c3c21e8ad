"""The dev server every benchmark starts for itself: free loopback ports, a SQLite file in the
benchmark's temporary directory, Treadle's search attributes registered."""

from __future__ import annotations

import socket
from pathlib import Path

from treadle.devserver import DevServerConfig
from workflows.agent.search_attributes import REQUIRED


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dev_server_config(db_filename: Path) -> DevServerConfig:
    return DevServerConfig(
        port=free_port(),
        ui_port=free_port(),
        db_filename=db_filename,
        log_level="error",
        search_attributes={name: kind.name.title() for name, kind in REQUIRED.items()},
        dynamic_config={"system.forceSearchAttributesCacheRefreshOnRead": True},
    )
