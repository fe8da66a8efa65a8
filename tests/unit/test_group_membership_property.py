"""Property test: random client behaviour against one classic group, with a random clock.

Invariants: no parked request is lost or answered twice (every Pending is answered once the
clock runs past all deadlines and clients stop), the generation never decreases, a Stable group
has an assignment for every member, there is at most one leader and it is a member.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from broker.groups import GroupState, JoinResult, Pending, SyncResult
from broker.protocol.errors import ErrorCode
from tests.unit.group_membership_support import make_group

E = ErrorCode
PROTOCOL_SETS = [("range",), ("roundrobin", "range"), ("range", "sticky"), ("sticky",)]


@dataclass
class Client:
    name: str
    instance: str | None
    member_id: str = ""
    generation: int = -1
    leader: bool = False
    known_members: list[str] = field(default_factory=list)
    protocols: tuple[str, ...] = ("range",)


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.group, self.clock = make_group(max_size=4)
        self.clients = [Client(f"c{i}", f"i{i}" if i % 2 else None) for i in range(5)]
        self.outstanding: dict[Pending, Client] = {}
        self.answered: set[int] = set()
        self.max_generation = 0

    # ---- bookkeeping ----------------------------------------------------------------------

    def _apply(self, client: Client, res) -> None:
        if isinstance(res, Pending):
            assert res not in self.outstanding
            self.outstanding[res] = client
            return
        if isinstance(res, JoinResult):
            if res.error_code == E.NONE:
                client.member_id, client.generation = res.member_id, res.generation_id
                client.leader = res.leader == res.member_id
                client.known_members = [m.member_id for m in res.members]
                assert res.generation_id <= self.group.generation_id
            elif res.error_code == E.MEMBER_ID_REQUIRED:
                client.member_id = res.member_id
            elif res.error_code in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                client.member_id, client.generation = "", -1
        elif isinstance(res, SyncResult):
            if res.error_code in (E.UNKNOWN_MEMBER_ID, E.FENCED_INSTANCE_ID):
                client.member_id, client.generation = "", -1

    def _drain(self) -> None:
        for pending, res in self.group.take_completions():
            assert pending.request_id not in self.answered, "answered twice"
            self.answered.add(pending.request_id)
            client = self.outstanding.pop(pending)
            assert (pending.kind == "join") == isinstance(res, JoinResult)
            self._apply(client, res)

    def _direct(self, client: Client, res) -> None:
        self._drain()
        self._apply(client, res)

    # ---- rules ------------------------------------------------------------------------------

    @rule(
        i=st.integers(0, 4),
        fresh=st.booleans(),
        require_known=st.booleans(),
        protos=st.sampled_from(PROTOCOL_SETS),
        ptype=st.sampled_from(["consumer", "consumer", "x"]),
        session=st.sampled_from([10_000, 10_000, 6_000, 5_000]),
        rebalance=st.sampled_from([30_000, 30_000, 5_000, 0]),
    )
    def join(self, i, fresh, require_known, protos, ptype, session, rebalance):
        c = self.clients[i]
        if fresh:
            c.member_id = ""
        c.protocols = protos
        res = self.group.join(
            self.clock.now_ms(),
            member_id=c.member_id,
            group_instance_id=c.instance,
            client_id=c.name,
            client_host="h",
            session_timeout_ms=session,
            rebalance_timeout_ms=rebalance,
            protocol_type=ptype,
            protocols=[(p, f"{p}:{c.name}".encode()) for p in protos],
            require_known_member_id=require_known,
            supports_skip_assignment=bool(i % 2),
        )
        self._direct(c, res)

    @rule(i=st.integers(0, 4), stale=st.booleans())
    def sync(self, i, stale):
        c = self.clients[i]
        assignments = {m: f"a:{m}".encode() for m in c.known_members} if c.leader else {}
        res = self.group.sync(
            self.clock.now_ms(),
            member_id=c.member_id,
            group_instance_id=c.instance,
            generation_id=c.generation - (1 if stale else 0),
            assignments=assignments,
        )
        self._direct(c, res)

    @rule(i=st.integers(0, 4))
    def heartbeat(self, i):
        c = self.clients[i]
        err = self.group.heartbeat(
            self.clock.now_ms(), member_id=c.member_id, group_instance_id=c.instance, generation_id=c.generation
        )
        self._drain()
        assert err in (E.NONE, E.REBALANCE_IN_PROGRESS, E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.FENCED_INSTANCE_ID)

    @rule(ids=st.lists(st.integers(0, 4), min_size=1, max_size=3), by_instance=st.booleans())
    def leave(self, ids, by_instance):
        batch = []
        for i in ids:
            c = self.clients[i]
            batch.append(("" if by_instance and c.instance else c.member_id, c.instance))
        res = self.group.leave(self.clock.now_ms(), batch)
        assert len(res.member_errors) == len(batch)
        self._drain()

    def _cooperate(self, i: int) -> None:
        """Client i does what a well-behaved consumer would do in the current state."""
        c = self.clients[i]
        g = self.group
        member = g.member(c.member_id) if c.member_id else None
        if member is not None and (member.awaiting_join or member.awaiting_sync):
            return  # already waiting for an answer
        if member is not None and g.state is GroupState.COMPLETING_REBALANCE and c.generation == g.generation_id:
            self.sync(i, False)
        elif member is not None and g.state is GroupState.STABLE and c.generation == g.generation_id:
            self.heartbeat(i)
        else:
            self.join(i, member is None, False, c.protocols, "consumer", 10_000, 30_000)

    @rule(i=st.integers(0, 4))
    def cooperate(self, i):
        self._cooperate(i)

    @rule(i=st.integers(0, 4))
    def cooperate_again(self, i):
        self._cooperate(i)

    @rule(i=st.integers(0, 4))
    def cooperate_more(self, i):
        self._cooperate(i)

    @rule(i=st.sampled_from([1, 3]), skip=st.booleans())
    def static_restart(self, i, skip):
        """A static member restarts: unknown member id, same group.instance.id."""
        c = self.clients[i]
        res = self.group.join(
            self.clock.now_ms(),
            member_id="",
            group_instance_id=c.instance,
            client_id=c.name,
            client_host="h",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=30_000,
            protocol_type="consumer",
            protocols=[(p, f"{p}:{c.name}".encode()) for p in c.protocols],
            supports_skip_assignment=skip,
        )
        self._direct(c, res)

    @rule(ms=st.integers(0, 3_000))
    def small_advance(self, ms):
        self.advance(ms)

    @rule(ms=st.one_of(st.integers(0, 4_000), st.integers(0, 4_000), st.integers(4_000, 400_000)))
    def advance(self, ms):
        self.clock.advance(ms)
        self.group.tick(self.clock.now_ms())
        self._drain()

    @rule()
    def snapshot_round_trip(self):
        from broker.groups.offsets_records import decode_group, group_value

        snap = self.group.to_snapshot()
        assert decode_group(snap.group_id, group_value(snap)) == snap

    # ---- invariants -----------------------------------------------------------------------

    @invariant()
    def group_invariants(self):
        g = self.group
        event(f"state={g.state.value} parked_syncs={sum(m.awaiting_sync for m in g.members) > 0}")
        g.check_invariants()
        assert g.generation_id >= self.max_generation
        self.max_generation = g.generation_id
        if g.state is GroupState.STABLE:
            assert all(m.assignment is not None for m in g.members)
        assert g.leader_id is None or g.member(g.leader_id) is not None
        deadline = g.next_deadline_ms()
        assert deadline is None or deadline > self.clock.now_ms()
        # every outstanding request belongs to a member that is still waiting for an answer
        waiting = sum(m.awaiting_join + m.awaiting_sync for m in g.members)
        assert waiting == len(self.outstanding)

    def teardown(self):
        # clients stop; run the clock past every deadline until the group settles
        for _ in range(10_000):
            deadline = self.group.next_deadline_ms()
            if deadline is None:
                break
            self.clock.advance(max(deadline - self.clock.now_ms(), 0))
            self.group.tick(self.clock.now_ms())
            self._drain()
            self.group.check_invariants()
        assert self.group.next_deadline_ms() is None, "group never settled"
        assert not self.outstanding, f"lost parked requests: {self.outstanding}"
        assert self.group.state is GroupState.EMPTY


TestGroupMachine = GroupMachine.TestCase
TestGroupMachine.settings = settings(
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
