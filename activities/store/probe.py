"""``wait_for_store``: succeeds once the worker's store answers, so a run that found it
unreachable knows when to make its call again.

One attempt asks once (a read of a key nobody writes: "missing" is an answer); a store that
does not answer fails the attempt, and Temporal retries it with backoff for as long as the
outage lasts (``treadle.workflows.agent.calls``). A failed attempt adds no history event, so the
wait costs the run the same few events however long it is. The probe only reads: writing would
create the directory of a filesystem store whose volume is not mounted.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from treadle.activities.errors import StoreUnavailable
from treadle.activities.heartbeat import heartbeating
from treadle.activities.store.blobs import BlobCorrupt, BlobMissing, BlobStore, key_of
from treadle.workflows.agent.parts.outages import STORE_UNAVAILABLE, StoreAnswered, StoreProbe

__all__ = ["PROBE_KEY", "StoreProbeActivities"]

PROBE_KEY = key_of(b"treadle: is the store there?\n")
"""What the probe reads; nothing stores it (a store may hold it: that answers too)."""


class StoreProbeActivities:
    """The probe over the worker's store (``None``: a worker without one, always answered)."""

    def __init__(self, store: BlobStore | None) -> None:
        self.store = store

    @activity.defn(name="wait_for_store")
    async def wait_for_store(self, probe: StoreProbe) -> StoreAnswered:
        """Ask the store once; fail the attempt (retryable) while it does not answer."""
        if self.store is None:
            return StoreAnswered(where=probe.where)
        try:
            async with heartbeating():
                await self.store.get(PROBE_KEY)
        except (BlobMissing, BlobCorrupt):
            pass  # it answered
        except StoreUnavailable as exc:
            activity.logger.info("store.still_unreachable store=%s", exc.where)
            raise ApplicationError(str(exc), exc.where, type=STORE_UNAVAILABLE) from None
        activity.logger.info("store.answers store=%s", self.store.describe())
        return StoreAnswered(where=self.store.describe())
