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


TIMER_SHIFT = "history.timerProcessorMaxTimeShift"
"""The server's timer granularity (1 s by default, on the dev server as on a cluster): a timer
(a heartbeat or sticky timeout, a retry's backoff) fires up to this much after it is due."""


def dev_server_config(db_filename: Path, timer_shift: str | None = None) -> DevServerConfig:
    dynamic: dict[str, object] = {"system.forceSearchAttributesCacheRefreshOnRead": True}
    if timer_shift is not None:
        dynamic[TIMER_SHIFT] = timer_shift
    return DevServerConfig(
        port=free_port(),
        ui_port=free_port(),
        db_filename=db_filename,
        log_level="error",
        search_attributes={name: kind.name.title() for name, kind in REQUIRED.items()},
        dynamic_config=dynamic,
    )
