"""The dev server every benchmark starts for itself: free loopback ports (its metrics on one
too, which ``bench.actions`` reads), a SQLite file in the benchmark's temporary directory,
Treadle's search attributes registered."""

from __future__ import annotations

import socket
from pathlib import Path

from treadle.devserver import TIMER_TICK, TIMER_TICK_KEY, DevServerConfig
from treadle.workflows.agent.messages.search_attributes import REQUIRED


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dev_server_config(db_filename: Path, timer_shift: str | None = None) -> DevServerConfig:
    """``timer_shift``: the server's timer granularity (``treadle.devserver.TIMER_TICK``, as
    ``temporal-dev.yaml`` sets it, unless given; ``1s`` is the server's own default)."""
    dynamic: dict[str, object] = {
        "system.forceSearchAttributesCacheRefreshOnRead": True,
        TIMER_TICK_KEY: TIMER_TICK if timer_shift is None else timer_shift,
    }
    return DevServerConfig(
        port=free_port(),
        ui_port=free_port(),
        metrics_port=free_port(),
        db_filename=db_filename,
        log_level="error",
        search_attributes={name: kind.name.title() for name, kind in REQUIRED.items()},
        dynamic_config=dynamic,
    )
