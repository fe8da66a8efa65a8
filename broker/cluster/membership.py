"""Broker registration: this broker's record under a lease, kept alive every
`broker.heartbeat.interval.ms`. The lease's TTL is `broker.session.timeout.ms`: when a broker
dies its registration vanishes that long after its last keep-alive, and the controller moves
its leaderships. A lease lost while the store was unreachable (etcd down for longer than the
session) is replaced by a new registration as soon as the store answers again.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from ..metadata import KeyValue, Lease, LeaseExpired, MetadataError, MetadataStore
from ..metadata import records

log = logging.getLogger(__name__)

REVOKE_TIMEOUT_S = 2.0


class Membership:
    def __init__(self, store: MetadataStore, record: records.BrokerRecord, session_timeout_ms: int,
                 heartbeat_interval_ms: int, announce: Callable[[KeyValue], Awaitable[None]]) -> None:
        """`announce` applies the registration to this broker's view before its watch event."""
        self._store = store
        self._announce = announce
        self.record = record
        self._ttl_s = max(1, math.ceil(session_timeout_ms / 1000))
        self._interval_s = heartbeat_interval_ms / 1000
        self.lease: Lease | None = None
        self._task: asyncio.Task[None] | None = None
        self._on_new_lease: list[Callable[[Lease], Any]] = []

    def on_new_lease(self, listener: Callable[[Lease], Any]) -> None:
        """Told when the registration had to be renewed under a new lease (the controller
        role, held under the old lease, is gone)."""
        self._on_new_lease.append(listener)

    async def start(self) -> None:
        await self._register()
        self._task = asyncio.get_running_loop().create_task(self._keep_alive(), name="broker-lease")

    async def stop(self) -> None:
        """Deregister at once (clean shutdown), so the controller moves leaderships now."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.lease is not None:
            try:
                await asyncio.wait_for(self._store.revoke_lease(self.lease), REVOKE_TIMEOUT_S)
            except (MetadataError, asyncio.TimeoutError) as exc:
                log.warning("could not revoke the broker lease (%s); it expires by itself", exc)

    async def _register(self) -> None:
        lease = await self._store.grant_lease(self._ttl_s)
        # Overwrite: our previous run may still be registered if it died within the TTL.
        key, value = records.broker_key(self.record.node_id), records.encode(self.record)
        revision = await self._store.put(key, value, lease=lease)
        self.lease = lease
        await self._announce(KeyValue(key, value, revision, lease.id))
        log.info("broker %d registered (lease %x, ttl %d s)", self.record.node_id, lease.id, lease.ttl_s)

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                assert self.lease is not None
                await self._store.keep_alive(self.lease)
            except LeaseExpired:
                log.warning("broker lease expired; registering again")
                try:
                    await self._register()
                except MetadataError as exc:
                    log.warning("registration failed (%s); retrying", exc)
                    continue
                for listener in self._on_new_lease:
                    listener(self.lease)
            except MetadataError as exc:
                log.warning("broker lease keep-alive failed (%s); retrying", exc)
