"""PartitionLog.maintenance_due_ms (issue 28): the broker's one-second flush and roll pass
skips a log until that time, so it must never be later than the first moment maybe_roll or
needs_flush would say yes. Random appends, clock moves, flushes, rolls, truncations and new
settings; after each step with the due time in the future, neither may say yes."""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, given, settings, strategies as st

from broker.clock import ManualClock
from tests.unit.test_log_support import T0, append_batch, open_log, small_config

STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("advance"), st.integers(1, 1500)),
        st.tuples(st.just("flush"), st.just(0)),
        st.tuples(st.just("roll"), st.just(0)),
        st.tuples(st.just("truncate"), st.integers(0, 30)),
        st.tuples(st.just("config"), st.integers(200, 2000)),
        st.tuples(st.just("plan"), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_nothing_is_due_before_the_due_time(tmp_path_factory, steps) -> None:  # type: ignore[no-untyped-def]
    clock = ManualClock(T0)
    config = small_config(segment_bytes=1 << 20, segment_ms=1000, flush_ms=700, flush_messages=6)
    log = open_log(tmp_path_factory.mktemp("log"), clock, config)
    bases: list[int] = []  # entries' base offsets: where a truncation may cut
    try:
        for op, value in steps:
            if op == "append":
                bases.append(append_batch(log, value, 10, clock.now_ms()).base_offset)
            elif op == "advance":
                clock.advance(value)
            elif op == "flush":
                log.flush()
            elif op == "roll":
                log.roll()
            elif op == "truncate" and bases:
                cut = bases[value % len(bases)]
                log.truncate_to(cut)
                bases = [b for b in bases if b < cut]
            elif op == "config":
                config = dataclasses.replace(config, segment_ms=value, flush_ms=value // 2, flush_messages=value // 200)
                log.update_config(config)
            elif op == "plan":
                log.plan_maintenance()
            now = clock.now_ms()
            if log.maintenance_due_ms > now:
                assert not log.needs_flush(now), (op, value)
                assert not log.maybe_roll(now), (op, value)
    finally:
        log.close()


def test_an_idle_log_is_due_at_its_next_roll_or_flush_and_never_when_empty(tmp_path) -> None:  # type: ignore[no-untyped-def]
    clock = ManualClock(T0)
    log = open_log(
        tmp_path, clock, small_config(segment_bytes=1 << 20, segment_ms=1000, flush_ms=700, flush_messages=100)
    )
    log.plan_maintenance()
    assert log.maintenance_due_ms > T0 + 10**9  # empty: nothing to roll or flush, ever
    append_batch(log, 2, 10, clock.now_ms())
    assert log.maintenance_due_ms == 0  # an append: look now
    log.plan_maintenance()
    assert log.maintenance_due_ms == T0 + 700  # the flush by flush.ms
    log.flush()
    log.plan_maintenance()
    assert log.maintenance_due_ms == T0 + 1001  # then the roll by segment.ms
    log.close()
