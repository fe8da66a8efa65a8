"""The topic-mode lifecycle: a partition's mode on the way between the two, and what each
mode tells the handlers."""

from __future__ import annotations

from broker.config import load_config
from broker.topic_config import effective
from broker.topic_mode import TopicMode, mode_of, partition_mode

C, D = TopicMode.CLASSIC, TopicMode.DISKLESS
C2D, D2C = TopicMode.CLASSIC_TO_DISKLESS, TopicMode.DISKLESS_TO_CLASSIC


def test_a_partition_is_settled_or_on_its_way_to_the_topics_mode() -> None:
    assert partition_mode(False, False) is C and partition_mode(True, True) is D
    assert partition_mode(False, True) is C2D and partition_mode(True, False) is D2C


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
