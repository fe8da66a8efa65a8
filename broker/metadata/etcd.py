"""`etcd://` metadata: the MetadataStore contract over etcd's v3 API, for clusters.

URL: `etcd://host:port[,host:port...]/prefix`. Every key lives under `prefix/` in etcd, so
several clusters (or test runs) can share one etcd; a store never sees keys outside it.

Mapping. A key's revision is etcd's `mod_revision` and the store revision is the header
revision, so revisions are etcd's own. Compare-and-set is an etcd transaction comparing
`mod_revision` (0 matches an absent key); on failure it reads the compared keys so the
RevisionConflict says what it found. Leases are etcd leases (etcd may grant a longer TTL
than asked: its minimum is 1.5 x the election timeout). A watch is one etcd watch stream.

Client. gRPC through `grpc.aio`, with the generated etcd v3 stubs of the `aetcd` package
(`aetcd.rpc`). aetcd's own client talks to one host, has no paginated or revision-pinned
range reads, buffers watch events without bound and can't tell a write that was never sent
from one whose outcome is unknown, so this module drives the stubs itself:
- Endpoints: one channel at a time, to the current endpoint. Before each request the
  channel must be READY within `connect_timeout_s`; an endpoint that refuses or does not
  connect in time is skipped for the next one (each endpoint at most once per request),
  and MetadataUnavailable is raised when none answers. Nothing has been sent then.
- A request that fails once sent (UNAVAILABLE: the connection dropped) moves to the next
  endpoint; reads, lease calls and unconditional puts are tried there again (they are
  idempotent; each endpoint once, and with a single endpoint once more after
  reconnecting), compare-and-set writes are not: their outcome is unknown, so they raise
  MetadataUnavailable and the caller reads before retrying. Every request has a deadline
  (`request_timeout_s`); a timeout raises MetadataUnavailable.
- Lists are read in pages of LIST_PAGE_KEYS keys, all at the first page's revision.
- A watch whose stream breaks reconnects (failing over like a request) and resumes at the
  revision after the last event it delivered, so it neither misses nor repeats a change;
  it raises MetadataUnavailable if it cannot for `watch_resume_timeout_s`, and
  RevisionCompacted if etcd compacted the revisions it needs. Events are pulled from the
  stream as the watcher iterates (gRPC flow control is the bound), never queued.
- Lease keep-alive: our own task per lease (`LeaseKeepAlive` in store.py), one renewal
  (a short LeaseKeepAlive stream) every TTL/3, failures logged and retried until the lease
  would have expired; stopped by `close()`.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import urllib.parse
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from typing import TypeVar

import grpc
import grpc.aio
from aetcd import rpc

from ..clock import Clock
from .store import (
    EventType,
    KeyValue,
    Lease,
    LeaseExpired,
    LeaseKeepAlive,
    MetadataError,
    MetadataUnavailable,
    RevisionCompacted,
    RevisionConflict,
    WatchEvent,
    check_request_size,
    check_ttl,
    check_txn,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_PORT = 2379
DEFAULT_CONNECT_TIMEOUT_S = 2.0
DEFAULT_REQUEST_TIMEOUT_S = 5.0
DEFAULT_WATCH_RESUME_TIMEOUT_S = 15.0
LIST_PAGE_KEYS = 1000  # keys per Range page: bounds one response (etcd values are <= 1 MiB)
LIST_ATTEMPTS = 3  # a listing restarts if its pinned revision is compacted meanwhile
WATCH_RESUME_BACKOFF_S = (0.05, 1.0)  # first and largest delay between resume attempts

# gRPC keepalive pings detect a dead connection under an open watch. etcd answers pings
# more often than every 5 s with GOAWAY, and pings without a call in flight likewise.
_CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
]

_UNAVAILABLE_CODES = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
}


def parse_etcd_url(url: str) -> tuple[list[tuple[str, int]], str]:
    """(endpoints, key prefix ending in '/') of `etcd://host:port[,host:port...]/prefix`;
    ValueError with a clear message otherwise."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "etcd":
        raise ValueError(f"not an etcd:// URL: {url!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"etcd URL takes no query or fragment: {url!r}")
    endpoints = []
    for item in parts.netloc.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon:
            host, port = item.strip(), str(DEFAULT_PORT)
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"etcd URL endpoints must be host:port[,host:port...], got {parts.netloc!r}")
        endpoints.append((host, int(port)))
    prefix = parts.path.strip("/")
    if not prefix:
        raise ValueError(f"etcd URL needs a key prefix: etcd://host:port/prefix, got {url!r}")
    return endpoints, prefix + "/"


def _range_end(prefix: bytes) -> bytes:
    """The end of the key range of all keys starting with `prefix` (etcd's convention)."""
    end = bytearray(prefix)
    for i in reversed(range(len(end))):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"


def _error(exc: grpc.aio.AioRpcError, what: str) -> MetadataError:
    """The one place where gRPC/etcd errors become MetadataStore errors."""
    code, details = exc.code(), exc.details() or ""
    message = f"etcd {what}: {code.name} {details}".rstrip()
    if code == grpc.StatusCode.NOT_FOUND and "lease not found" in details:
        return LeaseExpired(message)
    if code == grpc.StatusCode.OUT_OF_RANGE and "compacted" in details:
        return RevisionCompacted(message, 0)
    if code in _UNAVAILABLE_CODES:
        return MetadataUnavailable(message)
    return MetadataError(message)


class EtcdMetadataStore:
    def __init__(
        self,
        url: str,
        *,
        clock: Clock,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        watch_resume_timeout_s: float = DEFAULT_WATCH_RESUME_TIMEOUT_S,
    ) -> None:
        self._endpoints, prefix = parse_etcd_url(url)
        self._clock = clock
        self.prefix = prefix
        self._prefix = prefix.encode()
        self._connect_timeout_s = connect_timeout_s
        self._request_timeout_s = request_timeout_s
        self._watch_resume_timeout_s = watch_resume_timeout_s
        self._index = 0  # the endpoint in use (or to try first)
        self._channel: grpc.aio.Channel | None = None
        self._kv: rpc.KVStub | None = None
        self._lease: rpc.LeaseStub | None = None
        self._connect_lock: asyncio.Lock | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._keepers: set[LeaseKeepAlive] = set()
        self._watches: set[_EtcdWatch] = set()
        self._closed = False

    @property
    def endpoint(self) -> str:
        """host:port of the endpoint in use (or to be tried first)."""
        host, port = self._endpoints[self._index]
        return f"{host}:{port}"

    @property
    def _kv_stub(self) -> rpc.KVStub:
        """The ready channel's KV stub: requests run inside `_call`, which connects first."""
        assert self._kv is not None
        return self._kv

    @property
    def _lease_stub(self) -> rpc.LeaseStub:
        """The ready channel's lease stub: requests run inside `_call`, which connects first."""
        assert self._lease is not None
        return self._lease

    # -- key-value ---------------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        request = rpc.RangeRequest(key=self._key(key))
        response = await self._call("get", lambda: self._kv_stub.Range(request, timeout=self._request_timeout_s))
        return self._kv_from(response.kvs[0]) if response.kvs else None

    async def put(
        self, key: str, value: bytes, expected_revision: int | None = None, lease: Lease | None = None
    ) -> int:
        value = bytes(value)
        check_request_size([(key, value)])
        put = rpc.PutRequest(key=self._key(key), value=value, lease=lease.id if lease else 0)
        if expected_revision is None:
            response = await self._call("put", lambda: self._kv_stub.Put(put, timeout=self._request_timeout_s))
            return response.header.revision
        response = await self._txn({key: expected_revision}, [rpc.RequestOp(request_put=put)], "put")
        return response.header.revision

    async def delete(self, key: str, expected_revision: int | None = None) -> bool:
        request = rpc.DeleteRangeRequest(key=self._key(key))
        if expected_revision is None:
            response = await self._call(
                "delete", lambda: self._kv_stub.DeleteRange(request, timeout=self._request_timeout_s)
            )
            return response.deleted > 0
        txn = await self._txn({key: expected_revision}, [rpc.RequestOp(request_delete_range=request)], "delete")
        return txn.responses[0].response_delete_range.deleted > 0

    async def list(self, prefix: str) -> list[KeyValue]:
        return (await self.list_with_revision(prefix))[0]

    async def list_with_revision(self, prefix: str) -> tuple[builtins.list[KeyValue], int]:
        start = self._key(prefix)
        end = _range_end(start)
        for attempt in range(LIST_ATTEMPTS):
            kvs: list[KeyValue] = []
            revision = 0
            key = start
            try:
                while True:
                    request = rpc.RangeRequest(key=key, range_end=end, limit=LIST_PAGE_KEYS, revision=revision)
                    response = await self._call(
                        "list", lambda: self._kv_stub.Range(request, timeout=self._request_timeout_s)
                    )
                    if revision == 0:
                        revision = response.header.revision
                    kvs.extend(self._kv_from(kv) for kv in response.kvs)
                    if not response.more or not response.kvs:
                        return kvs, revision
                    key = response.kvs[-1].key + b"\0"
            except RevisionCompacted:
                log.info("etcd compacted revision %d while listing %r; listing again", revision, prefix)
        raise MetadataUnavailable(f"etcd list {prefix!r}: compacted {LIST_ATTEMPTS} times while paging")

    async def txn(
        self,
        compares: Mapping[str, int],
        puts: Mapping[str, bytes] | None = None,
        deletes: Collection[str] = (),
        lease: Lease | None = None,
    ) -> int:
        puts = {key: bytes(value) for key, value in (puts or {}).items()}
        deletes = list(deletes)
        check_txn(compares, puts, deletes)
        lease_id = lease.id if lease else 0
        ops = [
            rpc.RequestOp(request_put=rpc.PutRequest(key=self._key(k), value=v, lease=lease_id))
            for k, v in puts.items()
        ]
        ops += [rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=self._key(k))) for k in deletes]
        response = await self._txn(compares, ops, "txn")
        return response.header.revision

    async def _txn(self, compares: Mapping[str, int], ops: builtins.list[rpc.RequestOp], what: str) -> rpc.TxnResponse:
        keys = list(compares)
        request = rpc.TxnRequest(
            compare=[
                rpc.Compare(result=rpc.Compare.EQUAL, target=rpc.Compare.MOD, key=self._key(key), mod_revision=expected)
                for key, expected in compares.items()
            ],
            success=ops,
            failure=[rpc.RequestOp(request_range=rpc.RangeRequest(key=self._key(key), keys_only=True)) for key in keys],
        )
        idempotent = not compares  # a CAS whose connection dropped may have been applied
        response = await self._call(
            what, lambda: self._kv_stub.Txn(request, timeout=self._request_timeout_s), idempotent=idempotent
        )
        if not response.succeeded:
            found = []
            for key, expected, op in zip(keys, compares.values(), response.responses):
                kvs = op.response_range.kvs
                actual = kvs[0].mod_revision if kvs else 0
                if actual != expected:
                    found.append(f"{key}: expected revision {expected}, found {actual}")
            raise RevisionConflict("; ".join(found) or f"{keys}: revision changed")
        return response

    # -- leases ------------------------------------------------------------------------

    async def grant_lease(self, ttl_s: int) -> Lease:
        check_ttl(ttl_s)
        request = rpc.LeaseGrantRequest(TTL=ttl_s)
        response = await self._call(
            "grant lease", lambda: self._lease_stub.LeaseGrant(request, timeout=self._request_timeout_s)
        )
        if response.error:
            raise MetadataError(f"etcd grant lease: {response.error}")
        return Lease(response.ID, response.TTL)

    async def keep_alive(self, lease: Lease) -> int:
        async def renew() -> rpc.LeaseKeepAliveResponse:
            call = self._lease_stub.LeaseKeepAlive(timeout=self._request_timeout_s)
            try:
                await call.write(rpc.LeaseKeepAliveRequest(ID=lease.id))
                response = await call.read()
            finally:
                call.cancel()
            if response is grpc.aio.EOF:
                raise MetadataUnavailable("etcd keep-alive: the stream ended without an answer")
            return response

        response = await self._call("keep-alive", renew)
        if response.TTL <= 0:
            raise LeaseExpired(f"lease {lease.id:x} expired or was revoked")
        return response.TTL

    def start_keep_alive(self, lease: Lease) -> LeaseKeepAlive:
        self._check_open()
        self._keepers = {k for k in self._keepers if k.running}
        keeper = LeaseKeepAlive(self, lease, clock=self._clock).start()
        self._keepers.add(keeper)
        return keeper

    async def revoke_lease(self, lease: Lease) -> None:
        request = rpc.LeaseRevokeRequest(ID=lease.id)
        try:
            await self._call(
                "revoke lease", lambda: self._lease_stub.LeaseRevoke(request, timeout=self._request_timeout_s)
            )
        except LeaseExpired:
            pass  # already gone: revoking is idempotent
        for keeper in [k for k in self._keepers if k.lease.id == lease.id]:
            self._keepers.discard(keeper)
            await keeper.revoked()

    # -- watches -----------------------------------------------------------------------

    async def watch(self, prefix: str, start_revision: int | None = None) -> _EtcdWatch:
        self._check_open()
        watch = _EtcdWatch(self, prefix, start_revision)
        await watch._open()
        self._watches.add(watch)
        return watch

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for keeper in list(self._keepers):
            await keeper.stop()
        self._keepers.clear()
        for watch in list(self._watches):
            await watch.close()
        self._watches.clear()
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)

    # -- connection and requests -------------------------------------------------------

    def _key(self, key: str) -> bytes:
        return self._prefix + key.encode()

    def _kv_from(self, kv: rpc.KeyValue) -> KeyValue:
        return KeyValue(kv.key[len(self._prefix) :].decode(), kv.value, kv.mod_revision, kv.lease)

    def _check_open(self) -> None:
        if self._closed:
            raise MetadataError("the metadata store is closed")

    async def _call(self, what: str, request: Callable[[], Awaitable[T]], *, idempotent: bool = True) -> T:
        """Run one request on a ready channel, failing over to the next endpoint as the
        module docstring says."""
        last: MetadataError | None = None
        # Each endpoint once; at least twice, so one dropped connection to a single
        # endpoint is survived by reconnecting.
        for _ in range(max(2, len(self._endpoints))):
            channel = await self._ready_channel()
            try:
                return await request()
            except grpc.aio.AioRpcError as exc:
                error = _error(exc, what)
                if not isinstance(error, MetadataUnavailable):
                    raise error from exc
                log.warning("etcd %s on %s failed: %s", what, self.endpoint, error)
                self._retire(channel)
                if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED or not idempotent:
                    raise error from exc
                last = error
        assert last is not None
        raise last

    async def _ready_channel(self) -> grpc.aio.Channel:
        self._check_open()
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            self._check_open()
            if self._channel is not None:
                if await self._wait_ready(self._channel):
                    return self._channel
                log.warning("etcd endpoint %s is unreachable; trying the next one", self.endpoint)
                self._retire(self._channel)
            failed = []
            for _ in range(len(self._endpoints)):
                host, port = self._endpoints[self._index]
                channel = grpc.aio.insecure_channel(f"{host}:{port}", options=_CHANNEL_OPTIONS)
                if await self._wait_ready(channel):
                    self._channel = channel
                    self._kv = rpc.KVStub(channel)
                    self._lease = rpc.LeaseStub(channel)
                    return channel
                failed.append(f"{host}:{port}")
                await channel.close()
                self._index = (self._index + 1) % len(self._endpoints)
            raise MetadataUnavailable(
                f"no etcd endpoint answered within {self._connect_timeout_s} s: {', '.join(failed)}"
            )

    async def _wait_ready(self, channel: grpc.aio.Channel) -> bool:
        """True once the channel is READY; False as soon as it fails to connect, or after
        connect_timeout_s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._connect_timeout_s
        state = channel.get_state(try_to_connect=True)
        while state != grpc.ChannelConnectivity.READY:
            if state in (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN):
                return False
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(channel.wait_for_state_change(state), remaining)
            except asyncio.TimeoutError:
                return False
            state = channel.get_state(try_to_connect=True)
        return True

    def _retire(self, channel: grpc.aio.Channel) -> None:
        """Stop using `channel` (the next request fails over to the next endpoint); it is
        closed once its calls in flight end or after request_timeout_s."""
        if self._channel is None or self._channel is not channel:
            return
        self._channel = None
        self._index = (self._index + 1) % len(self._endpoints)
        task = asyncio.get_running_loop().create_task(channel.close(grace=self._request_timeout_s))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)


class _EtcdWatch:
    """One etcd watch stream over a key prefix, resumed after the last delivered revision
    when the stream breaks."""

    def __init__(self, store: EtcdMetadataStore, prefix: str, start_revision: int | None) -> None:
        self._store = store
        self._prefix = prefix
        self._key = store._key(prefix)
        self._next_revision = start_revision  # None until the first stream says "now"
        self._call: grpc.aio.StreamStreamCall | None = None
        self._events: deque[WatchEvent] = deque()  # of the last response only
        self._closed = False

    def __aiter__(self) -> AsyncIterator[WatchEvent]:
        return self

    async def __anext__(self) -> WatchEvent:
        while not self._events:
            if self._closed:
                raise StopAsyncIteration
            try:
                response = await self._read()
            except MetadataError:
                await self.close()
                raise
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._closed and not (task is not None and task.cancelling()):
                    raise StopAsyncIteration from None
                raise
            try:
                if response is None:  # the stream broke: resume where we are
                    await self._resume()
                    continue
                self._take(response)
            except MetadataError:
                await self.close()  # a watch that raised is over
                raise
        return self._events.popleft()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._store._watches.discard(self)
        if self._call is not None:
            self._call.cancel()
            self._call = None

    async def __aenter__(self) -> _EtcdWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _open(self) -> None:
        """Create the etcd watch at `_next_revision` and wait (bounded) until it exists."""
        store = self._store
        channel = await store._ready_channel()
        call = rpc.WatchStub(channel).Watch()
        create = rpc.WatchCreateRequest(
            key=self._key, range_end=_range_end(self._key), start_revision=self._next_revision or 0
        )
        try:
            async with asyncio.timeout(store._request_timeout_s):
                await call.write(rpc.WatchRequest(create_request=create))
                response = await call.read()
        except grpc.aio.AioRpcError as exc:
            call.cancel()
            store._retire(channel)
            raise _error(exc, f"watch {self._prefix!r}") from exc
        except TimeoutError:
            call.cancel()
            store._retire(channel)
            raise MetadataUnavailable(
                f"etcd watch {self._prefix!r}: not created within {store._request_timeout_s} s"
            ) from None
        if response is grpc.aio.EOF or not response.created:
            call.cancel()
            raise MetadataUnavailable(f"etcd watch {self._prefix!r}: the stream ended before the watch was created")
        if self._next_revision is None:
            self._next_revision = response.header.revision + 1
        self._call = call
        self._take(response)  # raises if it was created and canceled at once

    async def _read(self) -> rpc.WatchResponse | None:
        """The next response, or None if the stream broke in a way a resume may fix."""
        call = self._call
        if call is None:
            return None
        try:
            response = await call.read()
        except grpc.aio.AioRpcError as exc:
            error = _error(exc, f"watch {self._prefix!r}")
            if not isinstance(error, MetadataUnavailable):
                raise error from exc
            log.warning("etcd watch %r broke (%s); resuming at revision %d", self._prefix, error, self._next_revision)
            return None
        if response is grpc.aio.EOF:
            return None
        return response

    def _take(self, response: rpc.WatchResponse) -> None:
        if response.compact_revision:
            raise RevisionCompacted(
                f"etcd watch {self._prefix!r}: revision {self._next_revision} was compacted "
                f"(compacted up to {response.compact_revision})",
                response.compact_revision,
            )
        if response.canceled:
            raise MetadataError(f"etcd canceled watch {self._prefix!r}: {response.cancel_reason or 'no reason given'}")
        store = self._store
        kvs = [store._kv_from(event.kv) for event in response.events]
        for n, (event, kv) in enumerate(zip(response.events, kvs)):
            # etcd sends a revision's events in one response (unless asked to fragment)
            last = n + 1 == len(kvs) or kvs[n + 1].revision != kv.revision
            if event.type == rpc.Event.DELETE:
                self._events.append(WatchEvent(EventType.DELETE, KeyValue(kv.key, b"", kv.revision), last))
            else:
                self._events.append(WatchEvent(EventType.PUT, kv, last))
            self._next_revision = kv.revision + 1

    async def _resume(self) -> None:
        """Reopen the stream at `_next_revision`, failing over between endpoints, for at
        most watch_resume_timeout_s (then MetadataUnavailable)."""
        if self._call is not None:
            self._call.cancel()
            self._call = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._store._watch_resume_timeout_s
        delay, max_delay = WATCH_RESUME_BACKOFF_S
        while True:
            if self._closed:
                return
            try:
                await self._open()
                return
            except MetadataUnavailable as exc:
                if loop.time() + delay > deadline:
                    raise MetadataUnavailable(
                        f"etcd watch {self._prefix!r} could not resume at revision {self._next_revision}: {exc}"
                    ) from exc
            await self._store._clock.sleep(delay)
            delay = min(delay * 2, max_delay)
