"""The topic-mode lifecycle: which moves are legal, and what each mode tells the handlers."""

from __future__ import annotations

import pytest

from broker.config import load_config
from broker.topic_config import effective
from broker.topic_mode import TRANSITIONS, IllegalModeTransition, TopicMode, mode_of, transition

C, D = TopicMode.CLASSIC, TopicMode.DISKLESS
C2D, D2C = TopicMode.CLASSIC_TO_DISKLESS, TopicMode.DISKLESS_TO_CLASSIC
LEGAL = {(C, C2D), (C2D, D), (C2D, C), (D, D2C), (D2C, C), (D2C, D)}


@pytest.mark.parametrize("current", list(TopicMode))
@pytest.mark.parametrize("target", list(TopicMode))
def test_only_the_table_s_moves_are_legal(current: TopicMode, target: TopicMode) -> None:
    if (current, target) in LEGAL:
        assert transition(current, target) is target
    else:
        with pytest.raises(IllegalModeTransition):
            transition(current, target)


def test_every_mode_has_a_way_out_and_a_switch_passes_through_a_transitional_state() -> None:
    assert set(TRANSITIONS) == set(TopicMode) and all(TRANSITIONS[mode] for mode in TopicMode)
    assert D not in TRANSITIONS[C] and C not in TRANSITIONS[D]


def test_a_transitional_state_is_served_as_its_source_mode() -> None:
    assert [(m.appends_to_wal, m.serves_by_az) for m in (C, C2D, D, D2C)] == [
        (False, False),
        (False, False),
        (True, True),
        (True, True),
    ]


def test_the_mode_comes_from_diskless_enable() -> None:
    config = load_config(environ={})
    assert mode_of(effective({"diskless.enable": "true"}, config)) is D
    assert mode_of(effective({"diskless.enable": "false"}, config)) is C
