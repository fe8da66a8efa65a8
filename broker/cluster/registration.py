"""Broker registration: this broker's record under a lease, kept alive every
`broker.heartbeat.interval.ms`. The lease's TTL is `broker.session.timeout.ms`: when a broker
dies its registration vanishes that long after its last keep-alive, and the controller moves
its leaderships. A lease lost while the store was unreachable (etcd down for longer than the
session) is replaced by a new registration as soon as the store answers again.

A registration never replaces another process's: `brokers/<id>` is created only when absent
(compare-and-set at revision 0), or replaced only when it holds this process's own
incarnation. Another incarnation there is either a live broker with the same node id or this
node's previous process, killed less than a session ago; at start the broker waits, up to the
session timeout plus REGISTRATION_WAIT_MARGIN_S, for it to vanish, and then refuses to start
(RegistrationRefused: exit status 2). So a quick restart after kill -9 waits out the old
lease, and a duplicate node id never takes over a live broker's registration (which would
also share its WAL object keys and its partitions' replica identity).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from ..clock import Clock
from ..config import StartRefused
from ..metadata import KeyValue, Lease, LeaseExpired, MetadataError, MetadataStore, RevisionConflict
from ..metadata import records

log = logging.getLogger(__name__)

REVOKE_TIMEOUT_S = 2.0
# At start, how much longer than the session timeout another incarnation's registration is
# waited for: etcd notices an expired lease within about half a second, and we look again
# every REGISTRATION_POLL_S (or heartbeat interval, if shorter).
REGISTRATION_WAIT_MARGIN_S = 2.0
REGISTRATION_POLL_S = 1.0


class RegistrationRefused(StartRefused):
    """Another broker process's registration of this node id outlived the wait."""


class Membership:
    def __init__(
        self,
        store: MetadataStore,
        record: records.BrokerRecord,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        announce: Callable[[KeyValue], Awaitable[None]],
        clock: Clock,
    ) -> None:
        """`announce` applies the registration to this broker's view before its watch event."""
        self._store = store
        self._clock = clock
        self._announce = announce
        self.record = record
        self._ttl_s = max(1, math.ceil(session_timeout_ms / 1000))
        self._session_timeout_s = session_timeout_ms / 1000
        self._interval_s = heartbeat_interval_ms / 1000
        self.lease: Lease | None = None
        self._task: asyncio.Task[None] | None = None
        self._on_new_lease: list[Callable[[Lease], Any]] = []

    def on_new_lease(self, listener: Callable[[Lease], Any]) -> None:
        """Told when the registration had to be renewed under a new lease (the controller
        role, held under the old lease, is gone)."""
        self._on_new_lease.append(listener)

    async def start(self) -> None:
        """Register, waiting out another incarnation's registration for up to the session
        timeout plus REGISTRATION_WAIT_MARGIN_S; RegistrationRefused if it is still there."""
        await self._register(self._session_timeout_s + REGISTRATION_WAIT_MARGIN_S)
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

    async def drain(self) -> int:
        """Controlled shutdown: rewrite this registration with `draining` set, under the same
        lease, so the controller moves this broker's leaderships away (and gives it no new
        ones) while it still serves. A registration renewed later keeps the flag. Returns the
        store revision of the write; raises MetadataError (the store did not answer, or this
        process is not registered now)."""
        self.record = msgspec.structs.replace(self.record, draining=True)
        lease = self.lease
        key, value = records.broker_key(self.record.node_id), records.encode(self.record)
        current = await self._store.get(key)
        if lease is None or current is None or current.lease != lease.id or self._other_incarnation(current):
            raise MetadataError("this broker is not registered under its lease now")
        revision = await self._store.put(key, value, expected_revision=current.revision, lease=lease)
        await self._announce(KeyValue(key, value, revision, lease.id))
        log.info("broker %d registered as draining (controlled shutdown)", self.record.node_id)
        return revision

    async def _register(self, wait_s: float) -> None:
        """Create the registration under a new lease where no other incarnation's is; wait
        up to `wait_s` for one that is there to vanish (its lease expiring), then raise
        RegistrationRefused."""
        node_id = self.record.node_id
        key, value = records.broker_key(node_id), records.encode(self.record)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        poll_s = min(REGISTRATION_POLL_S, self._interval_s)
        attempt = 0
        while True:
            attempt += 1
            current = await self._store.get(key)
            other = self._other_incarnation(current)
            if other is None:
                lease = await self._store.grant_lease(self._ttl_s)
                try:
                    # Absent, or our own (a registration whose answer was lost): never another's.
                    revision = await self._store.put(
                        key, value, expected_revision=current.revision if current else 0, lease=lease
                    )
                except RevisionConflict:  # registered between our read and our write: look again
                    await self._revoke_quietly(lease)
                    if loop.time() < deadline:
                        continue
                    raise RegistrationRefused(
                        f"node.id {node_id} was registered by another broker process "
                        "while this one tried to register: stop that broker, or give this "
                        "one a different node.id"
                    ) from None
                except BaseException:  # outcome unknown: drop the lease, and with it the key if it was written
                    await self._revoke_quietly(lease)
                    raise
                self.lease = lease
                await self._announce(KeyValue(key, value, revision, lease.id))
                log.info("broker %d registered (lease %x, ttl %d s)", node_id, lease.id, lease.ttl_s)
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                waited = f", still after {wait_s:.1f} s" if wait_s > 0 else ""
                raise RegistrationRefused(
                    f"node.id {node_id} is registered by another live broker process ({_describe(other)}){waited}: "
                    "stop that broker, or give this one a different node.id"
                )
            same_address = (other.host, other.port) == (self.record.host, self.record.port)
            log.warning(
                "node.id %d is registered by another broker process (%s): waiting for its registration to "
                "end (attempt %d, %.1f s left; %s)",
                node_id,
                _describe(other),
                attempt,
                remaining,
                "same address as this broker: probably its previous process, whose lease expires within "
                "broker.session.timeout.ms"
                if same_address
                else "another address: a second broker with this node.id?",
            )
            await self._clock.sleep(min(poll_s, remaining))

    def _other_incarnation(self, current: KeyValue | None) -> records.BrokerRecord | _Unreadable | None:
        """The registration in `current` if it is another process's, else None."""
        if current is None:
            return None
        try:
            registered = records.decode(current.value, records.BrokerRecord)
        except (ValueError, msgspec.DecodeError) as exc:  # a newer broker's record: not ours either
            return _Unreadable(str(exc))
        return None if registered.incarnation == self.record.incarnation else registered

    async def _revoke_quietly(self, lease: Lease) -> None:
        try:
            await asyncio.wait_for(self._store.revoke_lease(lease), REVOKE_TIMEOUT_S)
        except (MetadataError, asyncio.TimeoutError) as exc:
            log.warning("could not revoke lease %x (%s); it expires by itself", lease.id, exc)

    async def _keep_alive(self) -> None:
        while True:
            await self._clock.sleep(self._interval_s)
            try:
                assert self.lease is not None
                await self._store.keep_alive(self.lease)
            except LeaseExpired:
                log.warning("broker lease expired; registering again")
                try:
                    await self._register(0)  # our old registration went with the lease
                except MetadataError as exc:
                    log.warning("registration failed (%s); retrying", exc)
                    continue
                except RegistrationRefused as exc:
                    log.error(
                        "cannot register again: %s; this broker stays unregistered and retries every %.1f s",
                        exc,
                        self._interval_s,
                    )
                    continue
                assert self.lease is not None  # _register returns only once registered
                for listener in self._on_new_lease:
                    listener(self.lease)
            except MetadataError as exc:
                log.warning("broker lease keep-alive failed (%s); retrying", exc)


class _Unreadable:
    """A registration this broker cannot decode (a newer record version)."""

    host, port = "", -1

    def __init__(self, error: str) -> None:
        self.error = error

    def __str__(self) -> str:
        return f"unreadable record: {self.error}"


def _describe(other: records.BrokerRecord | _Unreadable) -> str:
    if isinstance(other, _Unreadable):
        return str(other)
    rpc = f", rpc {other.rpc_host}:{other.rpc_port}" if other.rpc_host else ""
    az = f", az {other.az}" if other.az else ""
    return f"{other.host}:{other.port}{rpc}{az}, incarnation {other.incarnation}, version {other.software_version}"
