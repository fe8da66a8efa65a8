"""Helpers for the consumer-group integration tests.

Two halves:

* `MemberProc`: one consumer-group member (kafka-python, confluent-kafka or aiokafka) in its
  own Python subprocess, so a test can kill it with SIGKILL (no LeaveGroup) or ask it to close
  cleanly. The subprocess is this module run as `python -m tests.integration.groups_support
  member SPEC_JSON`; it prints one JSON object per line on stdout (its assignment whenever it
  changes, every record it reads, every commit) and takes commands on stdin (`close`). It has
  its own hard deadline, so an orphan cannot outlive a test run for long.
* Raw group requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch)
  over `clients.RawConnection`, for requests a well-behaved client never sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):  # pragma: no cover - run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SESSION_TIMEOUT_MS = 6000  # the broker's group.min.session.timeout.ms (Kafka's default)
HEARTBEAT_INTERVAL_MS = 1000  # so members notice a rebalance within about a second
MEMBER_MAX_SECONDS = 150  # a member subprocess exits by itself after this long
REPO_ROOT = Path(__file__).resolve().parents[2]

# Kafka error codes used by the group tests.
NONE = 0
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
OFFSET_METADATA_TOO_LARGE = 12
INVALID_GROUP_ID = 24
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_SUBSCRIBED_TO_TOPIC = 86


# ======================================================================================
# Test side: a member subprocess and what it reported
# ======================================================================================


class MemberProc:
    """One group member in a subprocess.

    client: "kafka-python" | "confluent" | "aiokafka"
    assignor: the client's name for it ("range", "roundrobin", "sticky", "cooperative-sticky")
    commit: commit the exact offsets of the records it printed, synchronously, after every poll
    max_records: print at most this many records, commit them (when `commit`), close, exit
    instance_id: group.instance.id (static membership; confluent members only)
    session_timeout_ms: the member's session.timeout.ms (the broker's minimum by default)
    """

    def __init__(
        self,
        client: str,
        bootstrap: str,
        topic: str,
        group: str,
        *,
        name: str,
        log_dir: Path,
        assignor: str = "range",
        commit: bool = False,
        max_records: int | None = None,
        max_seconds: float = MEMBER_MAX_SECONDS,
        instance_id: str | None = None,
        session_timeout_ms: int = SESSION_TIMEOUT_MS,
    ):
        self.client, self.name, self.group = client, name, group
        spec = dict(
            client=client,
            bootstrap=bootstrap,
            topic=topic,
            group=group,
            name=name,
            assignor=assignor,
            commit=commit,
            max_records=max_records,
            max_seconds=max_seconds,
            session_timeout_ms=session_timeout_ms,
            instance_id=instance_id,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
        )
        log_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = log_dir / f"member-{name}.stderr"
        self._stderr = open(self.stderr_path, "wb")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.groups_support", "member", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            text=True,
            bufsize=1,
        )
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"member-{name}", daemon=True)
        self._reader.start()

    # -- what the member reported ----------------------------------------------------
    def _read(self) -> None:
        for line in self.proc.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"ev": "garbage", "line": line[:500]}
            ev["t"] = time.monotonic()
            with self._lock:
                self.events.append(ev)

    def _events(self, kind: str) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["ev"] == kind]

    @property
    def assignment(self) -> frozenset[int] | None:
        """The partitions it owns now (its last report), None before its first assignment."""
        got = self._events("assigned")
        return frozenset(got[-1]["partitions"]) if got else None

    def assignment_history(self) -> list[tuple[float, frozenset[int]]]:
        return [(e["t"], frozenset(e["partitions"])) for e in self._events("assigned")]

    def records(self) -> list[tuple[int, int, str | None, str | None]]:
        """(partition, offset, key hex, value hex) in the order it read them."""
        return [(e["p"], e["o"], e["k"], e["v"]) for e in self._events("rec")]

    def committed(self) -> dict[int, int]:
        """Partition -> next offset, merged over all its successful commits."""
        out: dict[int, int] = {}
        for e in self._events("committed"):
            out.update({int(p): o for p, o in e["offsets"].items()})
        return out

    def errors(self) -> list[dict]:
        return self._events("error") + self._events("garbage")

    # -- control -------------------------------------------------------------------------
    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def request_close(self) -> None:
        """Ask for a clean close (the client sends LeaveGroup); does not wait."""
        try:
            self.proc.stdin.write("close\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def wait_exit(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"member {self.name} did not exit within {timeout_s}s (killed)\n{self.stderr_tail()}")

    def close(self, timeout_s: float = 20) -> int:
        self.request_close()
        return self.wait_exit(timeout_s)

    def kill(self) -> None:
        """SIGKILL: the member disappears without LeaveGroup."""
        if self.running():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def cleanup(self) -> None:
        self.kill()
        self._reader.join(timeout=5)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        self._stderr.close()

    def stderr_tail(self, lines: int = 30) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            text = []
        return f"--- member {self.name} ({self.client}) stderr tail ---\n" + "\n".join(text)

    def __repr__(self) -> str:
        return f"<MemberProc {self.name} {self.client} pid={self.pid} assignment={self.assignment}>"


def assignment_summary(members) -> str:
    return "; ".join(
        f"{m.name}({m.client}, running={m.running()}): {sorted(m.assignment) if m.assignment is not None else None}"
        for m in members
    )


def exact_cover(members, partitions: int, each: int | None = None) -> bool:
    """Every partition owned by exactly one of `members` (by their latest reports) and, when
    `each` is given, every member owning that many. (A member that just subscribed reports an
    empty assignment until its first rebalance completes: `each` tells that apart.)"""
    owned = [m.assignment for m in members]
    if any(a is None for a in owned):
        return False
    if each is not None and any(len(a) != each for a in owned):
        return False
    return sum(len(a) for a in owned) == partitions and frozenset().union(*owned) == frozenset(range(partitions))


def wait_exact_cover(members, partitions: int, timeout_s: float, what: str = "", each: int | None = None) -> float:
    """Wait until `members` own every partition exactly once (`each` apiece, if given);
    returns the seconds waited."""
    start = time.monotonic()
    deadline = start + timeout_s
    while time.monotonic() < deadline:
        if exact_cover(members, partitions, each):
            return time.monotonic() - start
        for m in members:
            if not m.running():
                raise AssertionError(
                    f"member {m.name} exited (code {m.proc.returncode}) while "
                    f"waiting for {what or 'an exact assignment'}\n{m.stderr_tail()}"
                )
        time.sleep(0.05)
    tails = "\n".join(m.stderr_tail(15) for m in members)
    raise AssertionError(
        f"no exact assignment of {partitions} partitions over {len(members)} "
        f"members within {timeout_s}s ({what}): {assignment_summary(members)}\n{tails}"
    )


def wait_records(members, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(len(m.records()) for m in members) >= count:
            return
        time.sleep(0.05)
    got = sum(len(m.records()) for m in members)
    raise AssertionError(
        f"members read {got} records, expected {count}, within {timeout_s}s: {assignment_summary(members)}"
    )


class MemberFactory:
    """Starts members for one test and kills (by PID) whatever is left at the end."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.members: list[MemberProc] = []

    def __call__(self, client: str, bootstrap: str, topic: str, group: str, **kwargs) -> MemberProc:
        name = kwargs.pop("name", None) or f"m{len(self.members)}"
        m = MemberProc(client, bootstrap, topic, group, name=name, log_dir=self.log_dir, **kwargs)
        self.members.append(m)
        return m

    def close_all(self) -> None:
        for m in self.members:
            m.cleanup()


# ======================================================================================
# Member side: runs in the subprocess
# ======================================================================================


def _emit(**ev) -> None:
    sys.stdout.write(json.dumps(ev) + "\n")
    sys.stdout.flush()


def _hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


@contextlib.contextmanager
def _commit_report(offsets: dict[int, int]):
    """Report a commit as `committed`, or its failure as an `error` (the member goes on)."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the test decides what a failed commit means
        _emit(ev="error", error=f"commit {offsets} failed: {type(exc).__name__}: {exc}")
    else:
        _emit(ev="committed", offsets=offsets)


class _Commands:
    """Lines from stdin, read by a thread; EOF counts as `close` (the test went away)."""

    def __init__(self):
        self.close = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        self.close.set()


class _MemberState:
    def __init__(self, spec: dict):
        self.spec = spec
        self.count = 0
        self.last_assignment: list[int] | None = None
        self.deadline = time.monotonic() + spec["max_seconds"]

    def note_assignment(self, partitions) -> None:
        parts = sorted(partitions)
        if parts != self.last_assignment:
            self.last_assignment = parts
            _emit(ev="assigned", partitions=parts)

    def take(self, records) -> dict[int, int]:
        """Print records (up to max_records); returns partition -> next offset to commit."""
        limit = self.spec["max_records"]
        to_commit: dict[int, int] = {}
        for p, o, k, v in records:
            if limit is not None and self.count >= limit:
                break
            self.count += 1
            _emit(ev="rec", p=p, o=o, k=_hex(k), v=_hex(v))
            to_commit[p] = o + 1
        return to_commit

    def done(self) -> bool:
        limit = self.spec["max_records"]
        return limit is not None and self.count >= limit

    def expired(self) -> bool:
        return time.monotonic() > self.deadline


def _member_kafka_python(spec: dict, cmds: _Commands) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    assignors = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "sticky": StickyPartitionAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }
    st = _MemberState(spec)
    consumer = KafkaConsumer(
        bootstrap_servers=spec["bootstrap"],
        group_id=spec["group"],
        client_id=f"it-{spec['name']}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=spec["session_timeout_ms"],
        heartbeat_interval_ms=spec["heartbeat_interval_ms"],
        partition_assignment_strategy=[assignors[spec["assignor"]]],
        fetch_max_wait_ms=100,
        request_timeout_ms=15_000,
        retry_backoff_ms=100,
    )
    consumer.subscribe([spec["topic"]])
    _emit(ev="subscribed")
    try:
        while not cmds.close.is_set() and not st.done() and not st.expired():
            got = consumer.poll(timeout_ms=200)
            st.note_assignment(tp.partition for tp in consumer.assignment())
            recs = [
                (m.partition, m.offset, m.key, m.value)
                for tp in sorted(got, key=lambda tp: tp.partition)
                for m in got[tp]
            ]
            to_commit = st.take(recs)
            if spec["commit"] and to_commit:
                with _commit_report(to_commit):
                    consumer.commit(
                        {TopicPartition(spec["topic"], p): OffsetAndMetadata(o, "", -1) for p, o in to_commit.items()}
                    )
    finally:
        consumer.close(autocommit=False)


def _member_confluent(spec: dict, cmds: _Commands) -> None:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    st = _MemberState(spec)
    consumer = Consumer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "group.id": spec["group"],
            "client.id": f"it-{spec['name']}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "session.timeout.ms": spec["session_timeout_ms"],
            "heartbeat.interval.ms": spec["heartbeat_interval_ms"],
            "partition.assignment.strategy": spec["assignor"],
            "fetch.wait.max.ms": 100,
            **({"group.instance.id": spec["instance_id"]} if spec.get("instance_id") else {}),
        }
    )
    consumer.subscribe([spec["topic"]])
    _emit(ev="subscribed")
    try:
        while not cmds.close.is_set() and not st.done() and not st.expired():
            msgs = consumer.consume(num_messages=500, timeout=0.2)
            st.note_assignment(tp.partition for tp in consumer.assignment())
            recs = []
            for m in msgs:
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        _emit(ev="error", error=str(m.error()))
                    continue
                recs.append((m.partition(), m.offset(), m.key(), m.value()))
            to_commit = st.take(recs)
            if spec["commit"] and to_commit:
                with _commit_report(to_commit):
                    consumer.commit(
                        offsets=[TopicPartition(spec["topic"], p, o) for p, o in to_commit.items()], asynchronous=False
                    )
    finally:
        consumer.close()


def _member_aiokafka(spec: dict, cmds: _Commands) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    assignors = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "sticky": StickyPartitionAssignor,
    }

    async def run():
        st = _MemberState(spec)
        consumer = AIOKafkaConsumer(
            spec["topic"],
            bootstrap_servers=spec["bootstrap"],
            group_id=spec["group"],
            client_id=f"it-{spec['name']}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=spec["session_timeout_ms"],
            heartbeat_interval_ms=spec["heartbeat_interval_ms"],
            partition_assignment_strategy=(assignors[spec["assignor"]],),
            fetch_max_wait_ms=100,
            request_timeout_ms=15_000,
            retry_backoff_ms=100,
        )
        await consumer.start()
        _emit(ev="subscribed")
        try:
            while not cmds.close.is_set() and not st.done() and not st.expired():
                got = await consumer.getmany(timeout_ms=200)
                st.note_assignment(tp.partition for tp in consumer.assignment())
                recs = [
                    (m.partition, m.offset, m.key, m.value)
                    for tp in sorted(got, key=lambda tp: tp.partition)
                    for m in got[tp]
                ]
                to_commit = st.take(recs)
                if spec["commit"] and to_commit:
                    with _commit_report(to_commit):
                        await consumer.commit({TopicPartition(spec["topic"], p): o for p, o in to_commit.items()})
        finally:
            await consumer.stop()

    asyncio.run(asyncio.wait_for(run(), spec["max_seconds"] + 30))


MEMBERS = {"kafka-python": _member_kafka_python, "confluent": _member_confluent, "aiokafka": _member_aiokafka}


def member_main(spec: dict) -> int:
    # A watchdog: whatever the client does, the process is gone shortly after its deadline.
    watchdog = threading.Timer(spec["max_seconds"] + 45, lambda: os._exit(3))
    watchdog.daemon = True
    watchdog.start()
    cmds = _Commands()
    try:
        MEMBERS[spec["client"]](spec, cmds)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which decides
        _emit(ev="error", error=f"{type(exc).__name__}: {exc}")
        raise
    _emit(ev="closed")
    return 0


# ======================================================================================
# Raw group requests
# ======================================================================================


def consumer_subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        b = t.encode()
        out += struct.pack(">h", len(b)) + b
    return out + struct.pack(">i", -1)


def consumer_assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], null user data."""
    b = topic.encode()
    out = struct.pack(">hi", 0, 1) + struct.pack(">h", len(b)) + b + struct.pack(">i", len(partitions))
    out += b"".join(struct.pack(">i", p) for p in partitions)
    return out + struct.pack(">i", -1)


def raw_join(
    conn,
    versions,
    group: str,
    *,
    member_id: str = "",
    protocol_type: str = "consumer",
    protocols: list[tuple[str, bytes]] | None = None,
    session_timeout_ms: int = SESSION_TIMEOUT_MS,
    rebalance_timeout_ms: int = 10_000,
    version: int | None = None,
    timeout_s: float = 20,
):
    """One JoinGroup request; the decoded response."""
    from kafka.protocol.consumer import JoinGroupRequest

    from .clients import pick_version

    v = version if version is not None else pick_version(versions, JoinGroupRequest, cap=9)
    P = JoinGroupRequest.JoinGroupRequestProtocol
    req = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        member_id=member_id,
        group_instance_id=None,
        protocol_type=protocol_type,
        protocols=[P(name=n, metadata=m) for n, m in (protocols or [])],
        reason=None,
    )
    return conn.request(req, v, timeout_s=timeout_s)


def raw_join_member(conn, versions, group: str, topic: str, **kwargs):
    """Join as a new member, following MEMBER_ID_REQUIRED (v4+) with the id the broker gave."""
    protocols = kwargs.pop("protocols", None) or [("range", consumer_subscription([topic]))]
    resp = raw_join(conn, versions, group, protocols=protocols, **kwargs)
    if resp.error_code == MEMBER_ID_REQUIRED:
        kwargs.pop("member_id", None)
        resp = raw_join(conn, versions, group, member_id=resp.member_id, protocols=protocols, **kwargs)
    return resp


def raw_sync(
    conn,
    versions,
    group: str,
    generation: int,
    member_id: str,
    assignments: list[tuple[str, bytes]],
    *,
    protocol_name: str | None = "range",
    timeout_s: float = 20,
):
    from kafka.protocol.consumer import SyncGroupRequest

    from .clients import pick_version

    v = pick_version(versions, SyncGroupRequest, cap=5)
    A = SyncGroupRequest.SyncGroupRequestAssignment
    req = SyncGroupRequest(
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name=protocol_name,
        assignments=[A(member_id=m, assignment=a) for m, a in assignments],
    )
    return conn.request(req, v, timeout_s=timeout_s)


def raw_heartbeat(conn, versions, group: str, generation: int, member_id: str):
    from kafka.protocol.consumer import HeartbeatRequest

    from .clients import pick_version

    v = pick_version(versions, HeartbeatRequest, cap=4)
    req = HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None)
    return conn.request(req, v, timeout_s=10)


def raw_leave(conn, versions, group: str, member_id: str):
    from kafka.protocol.consumer import LeaveGroupRequest

    from .clients import pick_version

    v = pick_version(versions, LeaveGroupRequest, cap=5)
    if v >= 3:
        M = LeaveGroupRequest.MemberIdentity
        req = LeaveGroupRequest(group_id=group, members=[M(member_id=member_id, group_instance_id=None, reason=None)])
    else:
        req = LeaveGroupRequest(group_id=group, member_id=member_id)
    return conn.request(req, v, timeout_s=10)


def raw_commit(
    conn,
    versions,
    group: str,
    topic: str,
    offsets: dict[int, tuple[int, str | None]],
    *,
    generation: int = -1,
    member_id: str = "",
    version: int | None = None,
):
    """OffsetCommit of {partition: (offset, metadata)}; returns ({partition: error}, version)."""
    from kafka.protocol.consumer import OffsetCommitRequest

    from .clients import pick_version

    v = version if version is not None else pick_version(versions, OffsetCommitRequest, cap=9)
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    P = T.OffsetCommitRequestPartition
    req = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=None,
        retention_time_ms=-1,
        topics=[
            T(
                name=topic,
                partitions=[
                    P(
                        partition_index=p,
                        committed_offset=o,
                        committed_leader_epoch=-1,
                        commit_timestamp=-1,
                        committed_metadata=md,
                    )
                    for p, (o, md) in sorted(offsets.items())
                ],
            )
        ],
    )
    resp = conn.request(req, v, timeout_s=10)
    return {p.partition_index: p.error_code for t in resp.topics for p in t.partitions}


def raw_offset_fetch(conn, versions, group: str, topic: str, partitions: list[int]):
    """OffsetFetch; returns {partition: (offset, metadata, error_code)} and the top-level error."""
    from kafka.protocol.consumer import OffsetFetchRequest

    from .clients import pick_version

    v = pick_version(versions, OffsetFetchRequest, cap=9)
    if v >= 8:
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        T = G.OffsetFetchRequestTopics
        req = OffsetFetchRequest(
            groups=[
                G(group_id=group, member_id=None, member_epoch=-1, topics=[T(name=topic, partition_indexes=partitions)])
            ],
            require_stable=False,
        )
        resp = conn.request(req, v, timeout_s=10)
        (g,) = resp.groups
        topics, top_error = g.topics, g.error_code
    else:
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        req = OffsetFetchRequest(
            group_id=group, topics=[T(name=topic, partition_indexes=partitions)], require_stable=False
        )
        resp = conn.request(req, v, timeout_s=10)
        topics, top_error = resp.topics, getattr(resp, "error_code", 0)
    out = {p.partition_index: (p.committed_offset, p.metadata, p.error_code) for t in topics for p in t.partitions}
    return out, top_error


def raw_describe_group(conn, versions, group: str) -> tuple[int, str, list[str]]:
    """DescribeGroups of one group: (error code, state, sorted client ids of its members)."""
    from kafka.protocol.admin import DescribeGroupsRequest

    from .clients import pick_version

    v = pick_version(versions, DescribeGroupsRequest, cap=5)
    resp = conn.request(DescribeGroupsRequest(groups=[group], include_authorized_operations=False), v, timeout_s=10)
    (g,) = resp.groups
    return g.error_code, g.group_state, sorted(m.client_id for m in g.members)


def raw_delete_groups(conn, versions, groups: list[str]) -> dict[str, int]:
    from kafka.protocol.admin import DeleteGroupsRequest

    from .clients import pick_version

    v = pick_version(versions, DeleteGroupsRequest, cap=2)
    resp = conn.request(DeleteGroupsRequest(groups_names=groups), v, timeout_s=10)
    return {r.group_id: r.error_code for r in resp.results}


def raw_offset_delete(conn, versions, group: str, topic: str, partitions: list[int]):
    """OffsetDelete; returns (top-level error, {partition: error})."""
    from kafka.protocol.consumer import OffsetDeleteRequest

    from .clients import pick_version

    v = pick_version(versions, OffsetDeleteRequest, cap=0)
    T = OffsetDeleteRequest.OffsetDeleteRequestTopic
    req = OffsetDeleteRequest(
        group_id=group,
        topics=[T(name=topic, partitions=[T.OffsetDeleteRequestPartition(partition_index=p) for p in partitions])],
    )
    resp = conn.request(req, v, timeout_s=10)
    return resp.error_code, {p.partition_index: p.error_code for t in resp.topics for p in t.partitions}


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "member":
        sys.exit("usage: python -m tests.integration.groups_support member SPEC_JSON")
    sys.exit(member_main(json.loads(sys.argv[2])))
