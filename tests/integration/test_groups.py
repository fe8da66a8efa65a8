"""Consumer groups with real clients (kafka-python, confluent-kafka, aiokafka), each member in
its own subprocess (see groups_support.MemberProc), plus bad group requests over a raw socket.

Kafka behaviour these tests hold the broker to:
- every partition of a subscribed topic is owned by exactly one member of a stable group;
- a member that vanishes (SIGKILL, no LeaveGroup) keeps its partitions until its session
  timeout expires, then the others get them; a member that leaves (LeaveGroup) hands them over
  at once;
- committed offsets are where the next member of the group starts: no gap, no redelivery, also
  after the broker is killed with SIGKILL and restarted (offsets live in __consumer_offsets);
- after every member left, a new member gets every partition after the initial rebalance delay
  (group.initial.rebalance.delay.ms, 3000 as in Kafka), not after a stale leader times out;
- a live group carries on through a broker crash without redelivering committed records;
- range, roundrobin, sticky and cooperative-sticky assignors all work, and one group can mix
  the three clients;
- bad group requests get Kafka's error codes (ILLEGAL_GENERATION, GROUP_ID_NOT_FOUND,
  UNKNOWN_MEMBER_ID, OFFSET_METADATA_TOO_LARGE, INCONSISTENT_GROUP_PROTOCOL,
  INVALID_SESSION_TIMEOUT, INVALID_GROUP_ID, NON_EMPTY_GROUP, GROUP_SUBSCRIBED_TO_TOPIC) and
  the broker keeps serving.
One broker per module except where the broker itself is killed; every test uses its own topic
and group.
"""

from __future__ import annotations

import time

import pytest

from .clients import (
    RawConnection,
    api_versions,
    create_topic,
    kp_admin,
    make_records,
    produce_kafka_python,
    unique_topic,
)
from .groups_support import (
    GROUP_ID_NOT_FOUND,
    GROUP_SUBSCRIBED_TO_TOPIC,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    NON_EMPTY_GROUP,
    NONE,
    OFFSET_METADATA_TOO_LARGE,
    SESSION_TIMEOUT_MS,
    UNKNOWN_MEMBER_ID,
    MemberFactory,
    assignment_summary,
    consumer_assignment,
    consumer_subscription,
    exact_cover,
    raw_commit,
    raw_delete_groups,
    raw_heartbeat,
    raw_join,
    raw_join_member,
    raw_leave,
    raw_describe_group,
    raw_offset_delete,
    raw_offset_fetch,
    raw_sync,
    wait_exact_cover,
    wait_records,
)

pytestmark = pytest.mark.integration

CLIENTS = ["kafka-python", "confluent", "aiokafka"]
PARTITIONS = 6
SESSION_S = SESSION_TIMEOUT_MS / 1000
FIRST_JOIN_S = 30  # first assignment: process start, imports, 3 s initial delay, slack
CRASH_HANDOVER_S = SESSION_S + 14  # a SIGKILLed member: session timeout + generous slack
LONG_SESSION_MS = 120_000  # a member whose session cannot expire during the test
LEAVE_WAIT_S = 30  # bound on a clean leave's handover: well below LONG_SESSION_MS
DISCONNECT_SETTLE_S = 1.0  # loopback: the broker sees a killed member's socket close by then


@pytest.fixture
def members(tmp_path):
    factory = MemberFactory(tmp_path / "members")
    yield factory
    factory.close_all()


def describe(bootstrap: str, group: str) -> tuple[int, str, list[str]]:
    """(error, state, member client ids) of a group, as DescribeGroups answers."""
    with RawConnection(bootstrap) as conn:
        return raw_describe_group(conn, api_versions(bootstrap), group)


def new_topic(bootstrap: str, prefix: str, partitions: int = PARTITIONS) -> str:
    topic = unique_topic(prefix)
    create_topic(bootstrap, topic, partitions=partitions)
    return topic


def produce(bootstrap: str, topic: str, n: int, partitions: int = PARTITIONS, tag: str = "g"):
    """n records round-robin over the partitions; {(partition, offset): key hex}."""
    recs = make_records(n, partitions, tag=tag)
    offsets = produce_kafka_python(bootstrap, topic, recs)
    return {(r.partition, o): r.key.hex() for r, o in zip(recs, offsets)}


def assert_read_exactly_once(members, produced: dict) -> None:
    """Between them the members read every produced record once, each from a partition it
    owned, with the key that was produced at that offset."""
    seen: dict[tuple[int, int], str] = {}
    for m in members:
        owned = m.assignment or frozenset()
        for p, o, k, _v in m.records():
            assert (p, o) not in seen, f"record {p}@{o} read twice (second time by {m.name})"
            assert p in owned, f"{m.name} read partition {p} which it does not own ({sorted(owned)})"
            seen[(p, o)] = k
    assert set(seen) == set(produced), (
        f"missing {sorted(set(produced) - set(seen))[:10]}, extra {sorted(set(seen) - set(produced))[:10]}"
    )
    bad = [po for po in produced if seen[po] != produced[po]]
    assert not bad, f"wrong keys at {bad[:10]}"


# -- membership ---------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_three_members_then_leave_then_crash(module_broker, members, client):
    """3 members over 6 partitions: each partition owned exactly once and every record read
    once. One member, whose session would outlast the test, closes (LeaveGroup): the other two
    own everything, so the LeaveGroup did it. One of those is SIGKILLed: after its connection
    closed it is still a member of the Stable group (only its session expiring removes it);
    then the survivor owns everything. How long each handover takes is not asserted."""
    bs = module_broker.bootstrap
    topic = new_topic(bs, f"g3-{client}")
    group = unique_topic(f"grp3-{client}")
    trio = [members(client, bs, topic, group) for _ in range(2)]
    trio.append(members(client, bs, topic, group, session_timeout_ms=LONG_SESSION_MS))
    wait_exact_cover(trio, PARTITIONS, FIRST_JOIN_S, "three members", each=2)

    produced = produce(bs, topic, 60, tag=client)
    wait_records(trio, len(produced), 30)
    time.sleep(0.5)  # let any duplicate show up
    assert exact_cover(trio, PARTITIONS), f"assignment changed: {assignment_summary(trio)}"
    assert_read_exactly_once(trio, produced)

    # A clean leave hands over at once: c's session timeout is longer than the wait below, so
    # only its LeaveGroup can have moved its partitions.
    a, b, c = trio
    assert describe(bs, group) == (NONE, "Stable", sorted(f"it-{m.name}" for m in trio))
    c.request_close()
    wait_exact_cover([a, b], PARTITIONS, LEAVE_WAIT_S, "after a clean leave (LeaveGroup, not session expiry)")
    assert c.wait_exit(15) == 0, c.stderr_tail()
    assert describe(bs, group)[2] == sorted([f"it-{a.name}", f"it-{b.name}"])

    # A crash: no LeaveGroup, the connection just closes. b stays a member (and keeps its
    # partitions) until its session expires; then a gets everything.
    b.kill()
    time.sleep(DISCONNECT_SETTLE_S)  # the broker has seen the socket close
    assert describe(bs, group) == (NONE, "Stable", sorted([f"it-{a.name}", f"it-{b.name}"])), (
        "a SIGKILLed member was removed before its session timeout"
    )
    wait_exact_cover([a], PARTITIONS, CRASH_HANDOVER_S, "after a member was SIGKILLed")
    assert describe(bs, group)[2] == [f"it-{a.name}"]
    assert a.running() and not a.errors(), a.errors()


@pytest.mark.parametrize("client", CLIENTS)
def test_all_members_close_then_new_member(module_broker, members, client):
    """Every member closes at the same moment; a new member then gets every partition
    promptly: no stale leader, no endless REBALANCE_IN_PROGRESS."""
    bs = module_broker.bootstrap
    topic = new_topic(bs, f"gall-{client}")
    group = unique_topic(f"grpall-{client}")
    trio = [members(client, bs, topic, group) for _ in range(3)]
    wait_exact_cover(trio, PARTITIONS, FIRST_JOIN_S, "three members", each=2)
    for m in trio:
        m.request_close()
    for m in trio:
        assert m.wait_exit(20) == 0, m.stderr_tail()
    # Every LeaveGroup was applied: nobody is left to lead (or be waited for) when the
    # newcomer joins.
    assert describe(bs, group) == (NONE, "Empty", [])

    newcomer = members(client, bs, topic, group, name="newcomer")
    wait_exact_cover([newcomer], PARTITIONS, FIRST_JOIN_S, "the first reply to the newcomer")
    assert describe(bs, group) == (NONE, "Stable", ["it-newcomer"])
    produced = produce(bs, topic, 24, tag=f"{client}-new")
    wait_records([newcomer], len(produced), 30)
    assert_read_exactly_once([newcomer], produced)


def test_static_member_restart_keeps_its_partitions_without_rebalance(module_broker, members):
    """KIP-345: a static member (group.instance.id) killed with -9 and restarted within its
    session timeout takes its old place: same partitions, and the others are not rebalanced."""
    bs = module_broker.bootstrap
    topic = new_topic(bs, "gstatic")
    group = unique_topic("grpstatic")
    trio = [
        members(
            "confluent",
            bs,
            topic,
            group,
            name=f"static-{i}",
            instance_id=f"instance-{i}",
            session_timeout_ms=LONG_SESSION_MS,
        )
        for i in range(3)
    ]
    wait_exact_cover(trio, PARTITIONS, FIRST_JOIN_S, "three static members", each=2)
    victim = trio.pop()
    before = victim.assignment
    others_history = [len(m.assignment_history()) for m in trio]
    victim.kill()
    # The sessions outlast the test, so the restart is "within the session timeout" however
    # slowly the new process starts.
    again = members(
        "confluent",
        bs,
        topic,
        group,
        name="static-2-again",
        instance_id="instance-2",
        session_timeout_ms=LONG_SESSION_MS,
    )
    wait_exact_cover([*trio, again], PARTITIONS, FIRST_JOIN_S, "the restarted static member", each=2)
    assert again.assignment == before
    assert [len(m.assignment_history()) for m in trio] == others_history, "the others were rebalanced"


def test_mixed_clients_one_group(module_broker, members):
    """One member of each client in one group (all speak the "range" assignor of the
    "consumer" protocol type): exact assignment, every record read once; the group is listed
    and described as Stable with three members."""
    bs = module_broker.bootstrap
    topic = new_topic(bs, "gmix")
    group = unique_topic("grpmix")
    trio = [members(c, bs, topic, group, name=c) for c in CLIENTS]
    wait_exact_cover(trio, PARTITIONS, FIRST_JOIN_S, "one member of each client", each=2)
    produced = produce(bs, topic, 60, tag="mix")
    wait_records(trio, len(produced), 30)
    assert_read_exactly_once(trio, produced)

    admin = kp_admin(bs)
    try:
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert group in listed, f"{group} not in ListGroups: {sorted(listed)}"
        assert listed[group]["protocol_type"] == "consumer", listed[group]
        desc = admin.describe_groups([group])[group]
        assert desc["error"] is None, desc
        assert desc["group_state"] == "Stable", desc
        assert desc["protocol_type"] == "consumer" and desc["protocol_data"] == "range", desc
        assert len(desc["members"]) == 3, desc
    finally:
        admin.close()


# "range" (every client's default here) is covered by the tests above for each client. The
# assignors run in the clients (the broker passes their metadata through), so each client
# and each assignor is covered, not the whole matrix.
ASSIGNORS = [
    ("kafka-python", "sticky"),
    ("kafka-python", "cooperative-sticky"),
    ("aiokafka", "roundrobin"),
    ("confluent", "roundrobin"),
    ("confluent", "cooperative-sticky"),
]


@pytest.mark.parametrize("client,assignor", ASSIGNORS, ids=[f"{c}-{a}" for c, a in ASSIGNORS])
def test_assignor(module_broker, members, client, assignor):
    """Two members, then a third joins: exact assignment each time, every record read once."""
    bs = module_broker.bootstrap
    topic = new_topic(bs, f"ga-{assignor}")
    group = unique_topic(f"grpa-{client}-{assignor}")
    pair = [members(client, bs, topic, group, assignor=assignor) for _ in range(2)]
    wait_exact_cover(pair, PARTITIONS, FIRST_JOIN_S, f"two members, {assignor}", each=3)
    third = members(client, bs, topic, group, assignor=assignor)
    trio = pair + [third]
    wait_exact_cover(trio, PARTITIONS, FIRST_JOIN_S, f"a third member joined, {assignor}", each=2)
    produced = produce(bs, topic, 30, tag=assignor)
    wait_records(trio, len(produced), 30)
    time.sleep(0.3)
    assert_read_exactly_once(trio, produced)
    for m in trio:
        assert not m.errors(), m.errors()


# -- committed offsets --------------------------------------------------------------------


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """OffsetFetch through kafka-python's admin client: partition -> committed offset."""
    admin = kp_admin(bootstrap)
    try:
        got = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in got.items() if tp.topic == topic and om.offset >= 0}


def check_resumes_at(member, start: dict[int, int]) -> dict[int, int]:
    """Per partition, the member's records start at `start` (0 when nothing was committed)
    and are dense; returns where the next reader should start."""
    per_p: dict[int, list[int]] = {}
    for p, o, _k, _v in member.records():
        per_p.setdefault(p, []).append(o)
    nxt = dict(start)
    for p, offs in per_p.items():
        first = start.get(p, 0)
        assert offs[0] == first, (
            f"{member.name}: partition {p} resumed at {offs[0]}, committed offset {first} "
            f"({'redelivery' if offs[0] < first else 'gap'})"
        )
        assert offs == list(range(first, first + len(offs))), f"{member.name}: partition {p}: {offs[:20]}"
        nxt[p] = offs[-1] + 1
    return nxt


@pytest.mark.parametrize("client", CLIENTS)
def test_committed_offsets_resume_exactly(broker, members, client):
    """A member reads some records, commits exactly those and closes; the next member of the
    group starts right after them. The same after the broker is killed with SIGKILL and
    restarted. Between them the members read every record exactly once."""
    bs = broker.bootstrap
    partitions = 3
    topic = new_topic(bs, f"gres-{client}", partitions)
    group = unique_topic(f"grpres-{client}")
    produced = produce(bs, topic, 90, partitions, tag=f"{client}-1")

    first = members(client, bs, topic, group, commit=True, max_records=40, name="first")
    assert first.wait_exit(60) == 0, first.stderr_tail()
    assert len(first.records()) == 40
    nxt = check_resumes_at(first, {})
    assert first.committed() == nxt, (first.committed(), nxt)
    assert committed_offsets(bs, group, topic) == nxt

    second = members(client, bs, topic, group, commit=True, max_records=25, name="second")
    assert second.wait_exit(60) == 0, second.stderr_tail()
    nxt = check_resumes_at(second, nxt)
    assert committed_offsets(bs, group, topic) == nxt

    broker.restart(graceful=False)  # kill -9, same data dir
    assert committed_offsets(bs, group, topic) == nxt, "committed offsets lost by a broker crash"
    produced.update(produce(bs, topic, 30, partitions, tag=f"{client}-2"))

    remaining = len(produced) - 65
    third = members(client, bs, topic, group, commit=True, max_records=remaining, name="third")
    assert third.wait_exit(60) == 0, third.stderr_tail()
    nxt = check_resumes_at(third, nxt)
    ends = {p: sum(1 for (pp, _o) in produced if pp == p) for p in range(partitions)}
    assert nxt == ends, f"after the third member: next offsets {nxt}, log ends {ends}"
    assert committed_offsets(bs, group, topic) == ends

    read = [(p, o, k) for m in (first, second, third) for p, o, k, _v in m.records()]
    assert len(read) == len(set((p, o) for p, o, _k in read)) == len(produced)
    assert {(p, o): k for p, o, k in read} == produced


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_live_group_survives_broker_crash(broker, members, client):
    """Two members that commit what they read; the broker is killed with SIGKILL and
    restarted under them. They carry on (rejoining if the broker forgot the membership) and
    read every new record, and no committed record is delivered again."""
    bs = broker.bootstrap
    partitions = 4
    topic = new_topic(bs, f"glive-{client}", partitions)
    group = unique_topic(f"grplive-{client}")
    pair = [members(client, bs, topic, group, commit=True) for _ in range(2)]
    wait_exact_cover(pair, partitions, FIRST_JOIN_S, "two members", each=2)
    produced = produce(bs, topic, 20, partitions, tag=f"{client}-before")
    wait_records(pair, len(produced), 30)
    ends = {p: 5 for p in range(partitions)}
    deadline = time.monotonic() + 15
    while {**pair[0].committed(), **pair[1].committed()} != ends and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {**pair[0].committed(), **pair[1].committed()} == ends

    broker.restart(graceful=False)
    produced.update(produce(bs, topic, 20, partitions, tag=f"{client}-after"))
    wait_records(pair, len(produced), 60)
    time.sleep(0.5)
    read = sorted((p, o) for m in pair for p, o, _k, _v in m.records())
    dupes = sorted({po for po in read if read.count(po) > 1})
    assert not dupes, f"records delivered twice across the broker restart (committed before it): {dupes}"
    assert set(read) == set(produced)
    wait_exact_cover(pair, partitions, 30, "after the broker restart")
    assert all(m.running() for m in pair), assignment_summary(pair)


# -- bad input through a raw client -------------------------------------------------------


@pytest.fixture
def raw(module_broker):
    versions = api_versions(module_broker.bootstrap)
    with RawConnection(module_broker.bootstrap, timeout_s=20) as conn:
        yield conn, versions
    assert api_versions(module_broker.bootstrap), "broker stopped answering"
    assert module_broker.running()


def test_offset_commit_unknown_group_with_generation(module_broker, raw):
    """OffsetCommit with a generation (>= 0) to a group that does not exist: Kafka answers
    ILLEGAL_GENERATION up to v8 and GROUP_ID_NOT_FOUND from v9 (KIP-848's group coordinator,
    OffsetMetadataManager.validateOffsetCommit). With generation -1 and no member id it is a
    "simple" group commit and succeeds."""
    conn, versions = raw
    topic = new_topic(module_broker.bootstrap, "gunk", 1)
    lo, hi = versions[8]
    for v in sorted({min(hi, 8), min(hi, 9)} | ({lo} if lo >= 1 else {1})):
        group = unique_topic(f"nogroup-v{v}")
        errors = raw_commit(conn, versions, group, topic, {0: (5, None)}, generation=3, member_id="nobody", version=v)
        expected = GROUP_ID_NOT_FOUND if v >= 9 else ILLEGAL_GENERATION
        assert errors == {0: expected}, f"OffsetCommit v{v} to unknown group {group} with generation 3"
        fetched, top = raw_offset_fetch(conn, versions, group, topic, [0])
        assert fetched[0][0] == -1, f"a rejected commit was stored: {fetched}"

    group = unique_topic("simple")
    assert raw_commit(conn, versions, group, topic, {0: (7, "md")}) == {0: NONE}
    fetched, top = raw_offset_fetch(conn, versions, group, topic, [0])
    assert top == NONE and fetched[0][:3] == (7, "md", NONE), fetched


def test_offset_metadata_too_large(module_broker, raw):
    """offset.metadata.max.bytes (Kafka default 4096): a longer metadata string fails that
    partition with OFFSET_METADATA_TOO_LARGE and is not stored; the other partition in the
    same request is committed."""
    conn, versions = raw
    topic = new_topic(module_broker.bootstrap, "gmeta", 2)
    group = unique_topic("meta")
    errors = raw_commit(conn, versions, group, topic, {0: (3, "m" * 4096), 1: (4, "m" * 4097)})
    assert errors == {0: NONE, 1: OFFSET_METADATA_TOO_LARGE}
    fetched, _top = raw_offset_fetch(conn, versions, group, topic, [0, 1])
    assert fetched[0][:2] == (3, "m" * 4096)
    assert fetched[1][0] == -1, f"oversized metadata commit was stored: offset {fetched[1][0]}"


def test_stale_generation(module_broker, raw):
    """A member at generation N: OffsetCommit, Heartbeat and SyncGroup with N-1 get
    ILLEGAL_GENERATION; an unknown member id gets UNKNOWN_MEMBER_ID; generation N works."""
    conn, versions = raw
    topic = new_topic(module_broker.bootstrap, "gstale", 2)
    group = unique_topic("stale")
    join = raw_join_member(conn, versions, group, topic)
    assert join.error_code == NONE, join
    me = join.member_id
    assert join.leader == me
    sync = raw_sync(conn, versions, group, join.generation_id, me, [(me, consumer_assignment(topic, [0, 1]))])
    assert sync.error_code == NONE, sync
    # The leader rejoins: a new generation (no initial delay: the group is not empty).
    rejoin = raw_join(conn, versions, group, member_id=me, protocols=[("range", consumer_subscription([topic]))])
    assert rejoin.error_code == NONE, rejoin
    gen = rejoin.generation_id
    assert gen > join.generation_id
    sync = raw_sync(conn, versions, group, gen, me, [(me, consumer_assignment(topic, [0, 1]))])
    assert sync.error_code == NONE, sync

    stale = gen - 1
    assert raw_commit(conn, versions, group, topic, {0: (1, None)}, generation=stale, member_id=me) == {
        0: ILLEGAL_GENERATION
    }
    assert raw_commit(conn, versions, group, topic, {0: (1, None)}, generation=gen + 1, member_id=me) == {
        0: ILLEGAL_GENERATION
    }
    assert raw_heartbeat(conn, versions, group, stale, me).error_code == ILLEGAL_GENERATION
    assert raw_sync(conn, versions, group, stale, me, []).error_code == ILLEGAL_GENERATION
    assert raw_commit(conn, versions, group, topic, {0: (1, None)}, generation=gen, member_id="someone-else") == {
        0: UNKNOWN_MEMBER_ID
    }
    assert raw_heartbeat(conn, versions, group, gen, "someone-else").error_code == UNKNOWN_MEMBER_ID

    # An "admin" commit (no generation, no member) is only for groups without members.
    assert raw_commit(conn, versions, group, topic, {0: (1, None)}) == {0: UNKNOWN_MEMBER_ID}
    # Joins that must be refused at once, without disturbing the stable group: an unknown
    # member id, another protocol type, no protocol in common with the group.
    other = RawConnection(module_broker.bootstrap, timeout_s=20)
    try:
        assert (
            raw_join(
                other, versions, group, member_id="not-a-member", protocols=[("range", consumer_subscription([topic]))]
            ).error_code
            == UNKNOWN_MEMBER_ID
        )
        assert (
            raw_join(
                other, versions, group, protocol_type="connect", protocols=[("range", consumer_subscription([topic]))]
            ).error_code
            == INCONSISTENT_GROUP_PROTOCOL
        )
        assert (
            raw_join(other, versions, group, protocols=[("not-range", consumer_subscription([topic]))]).error_code
            == INCONSISTENT_GROUP_PROTOCOL
        )
    finally:
        other.close()

    assert raw_commit(conn, versions, group, topic, {0: (2, None)}, generation=gen, member_id=me) == {0: NONE}
    assert raw_heartbeat(conn, versions, group, gen, me).error_code == NONE
    fetched, _ = raw_offset_fetch(conn, versions, group, topic, [0, 1])
    assert fetched[0][0] == 2 and fetched[1][0] == -1, fetched
    assert raw_leave(conn, versions, group, me).error_code == NONE


def test_unknown_group_and_empty_group_id(module_broker, raw):
    """Heartbeat / SyncGroup / JoinGroup-with-a-member-id for a group that does not exist:
    UNKNOWN_MEMBER_ID. An empty group id: INVALID_GROUP_ID."""
    conn, versions = raw
    group = unique_topic("ghost")
    assert raw_heartbeat(conn, versions, group, 1, "m").error_code == UNKNOWN_MEMBER_ID
    assert raw_sync(conn, versions, group, 1, "m", []).error_code == UNKNOWN_MEMBER_ID
    assert (
        raw_join(conn, versions, group, member_id="m", protocols=[("range", consumer_subscription(["t"]))]).error_code
        == UNKNOWN_MEMBER_ID
    )
    # Kafka's GroupCoordinator.isValidGroupId: only OffsetCommit/OffsetFetch/DescribeGroups/
    # DeleteGroups accept an empty group id; the membership APIs answer INVALID_GROUP_ID.
    got = {
        "JoinGroup": raw_join(conn, versions, "", protocols=[("range", consumer_subscription(["t"]))]).error_code,
        "SyncGroup": raw_sync(conn, versions, "", 1, "m", []).error_code,
        "Heartbeat": raw_heartbeat(conn, versions, "", 1, "m").error_code,
        "LeaveGroup": leave_error(raw_leave(conn, versions, "", "m")),
    }
    assert got == dict.fromkeys(got, INVALID_GROUP_ID), f"empty group id: {got}"


def leave_error(resp) -> int:
    """LeaveGroup's top-level error, else the (only) member's error (v3+)."""
    if resp.error_code or not getattr(resp, "members", None):
        return resp.error_code
    return resp.members[0].error_code


def test_delete_groups_and_offsets(module_broker, raw):
    """DeleteGroups: NON_EMPTY_GROUP while a member is in it, GROUP_ID_NOT_FOUND for an
    unknown group, NONE for an empty group (its offsets go with it). OffsetDelete:
    GROUP_SUBSCRIBED_TO_TOPIC for a topic the members subscribe to, NONE otherwise."""
    conn, versions = raw
    bs = module_broker.bootstrap
    topic, other_topic = new_topic(bs, "gdel", 2), new_topic(bs, "gdel-other", 1)
    active, simple, unknown = unique_topic("del-active"), unique_topic("del-simple"), unique_topic("del-none")
    assert raw_commit(conn, versions, simple, topic, {0: (4, None)}) == {0: NONE}

    join = raw_join_member(conn, versions, active, topic)
    assert join.error_code == NONE, join
    me, gen = join.member_id, join.generation_id
    assert raw_sync(conn, versions, active, gen, me, [(me, consumer_assignment(topic, [0, 1]))]).error_code == NONE
    assert raw_commit(conn, versions, active, topic, {0: (5, None)}, generation=gen, member_id=me) == {0: NONE}
    assert raw_commit(conn, versions, active, other_topic, {0: (6, None)}, generation=gen, member_id=me) == {0: NONE}

    assert raw_offset_delete(conn, versions, active, topic, [0]) == (NONE, {0: GROUP_SUBSCRIBED_TO_TOPIC})
    assert raw_offset_delete(conn, versions, active, other_topic, [0]) == (NONE, {0: NONE})
    assert raw_offset_fetch(conn, versions, active, other_topic, [0])[0][0][0] == -1
    assert raw_offset_fetch(conn, versions, active, topic, [0])[0][0][0] == 5
    assert raw_offset_delete(conn, versions, unknown, topic, [0])[0] == GROUP_ID_NOT_FOUND

    assert raw_delete_groups(conn, versions, [active, simple, unknown]) == {
        active: NON_EMPTY_GROUP,
        simple: NONE,
        unknown: GROUP_ID_NOT_FOUND,
    }
    assert raw_offset_fetch(conn, versions, simple, topic, [0])[0][0][0] == -1
    assert raw_heartbeat(conn, versions, active, gen, me).error_code == NONE
    assert raw_leave(conn, versions, active, me).error_code == NONE
    assert raw_delete_groups(conn, versions, [active]) == {active: NONE}
    assert raw_offset_fetch(conn, versions, active, topic, [0])[0][0][0] == -1


@pytest.mark.parametrize("case", ["empty-protocol-type", "no-protocols"])
def test_join_group_inconsistent_protocol(module_broker, raw, case):
    """JoinGroup with an empty protocol type or no protocols: INCONSISTENT_GROUP_PROTOCOL
    (Kafka's supportsProtocols on an empty group)."""
    conn, versions = raw
    group = unique_topic(f"incons-{case}")
    kwargs = (
        {"protocol_type": "", "protocols": [("range", consumer_subscription(["t"]))]}
        if case == "empty-protocol-type"
        else {"protocols": []}
    )
    resp = raw_join(conn, versions, group, **kwargs)
    assert resp.error_code == INCONSISTENT_GROUP_PROTOCOL, resp


@pytest.mark.parametrize("session_timeout_ms", [0, SESSION_TIMEOUT_MS - 1, 1_800_001])
def test_join_group_session_timeout_out_of_range(module_broker, raw, session_timeout_ms):
    """Outside [group.min.session.timeout.ms, group.max.session.timeout.ms] = [6000, 1800000]
    (Kafka's defaults): INVALID_SESSION_TIMEOUT."""
    conn, versions = raw
    group = unique_topic("badsession")
    resp = raw_join(
        conn,
        versions,
        group,
        session_timeout_ms=session_timeout_ms,
        protocols=[("range", consumer_subscription(["t"]))],
    )
    assert resp.error_code == INVALID_SESSION_TIMEOUT, resp
