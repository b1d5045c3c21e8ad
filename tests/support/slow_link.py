"""A slow network between a worker and the Temporal server: a loopback TCP relay that hands
the server what the worker sends ``delay`` seconds late (what the server sends back goes at
once). When the worker's side of a connection ends (its process was killed), what it sent that
the relay still holds is dropped, as a dying host's unsent packets are: a heartbeat the worker
handed to its SDK just before it died never reaches the server.

    async with SlowLink(server_address(client), delay=0.5) as link:
        worker = await start_worker(link.address, ...)
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

CHUNK = 65536


class SlowLink:
    def __init__(self, target: str, delay: float) -> None:
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self._delay = delay
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.Task[None]] = set()
        self.address = ""

    async def __aenter__(self) -> SlowLink:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for link in self._links:
            link.cancel()
        await asyncio.gather(*self._links, return_exceptions=True)

    async def _relay(self, down: asyncio.StreamReader, back: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._links.add(task)
        up_reader, up = await asyncio.open_connection(*self._target)
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def hold() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await down.read(CHUNK):
                    held.put_nowait((loop.time() + self._delay, data))

        async def send_late() -> None:
            while True:
                due, data = await held.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                up.write(data)
                await up.drain()

        async def answer() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await up_reader.read(CHUNK):
                    back.write(data)
                    await back.drain()

        sending = asyncio.ensure_future(send_late())
        answering = asyncio.ensure_future(answer())
        try:
            await hold()  # the worker's side ended: what is still held is lost with it
        finally:
            for part in (sending, answering):
                part.cancel()
            await asyncio.gather(sending, answering, return_exceptions=True)
            for writer in (up, back):
                writer.close()
            self._links.discard(task)
