"""The one piece of the (otherwise opaque) consumer protocol the coordinator reads: the
topics in a member's subscription, which OffsetDelete must protect (GROUP_SUBSCRIBED_TO_TOPIC).

ConsumerProtocolSubscription: int16 version, then an array (int32 count) of int16-length
topic names; later versions append fields after the topics, which are ignored here.
"""

from __future__ import annotations

import struct


def subscribed_topics(metadata: bytes) -> set[str]:
    """Topic names in a subscription; an unreadable subscription subscribes to nothing."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        pos = 6
        topics = set()
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            if size < 0 or pos + size > len(metadata):
                return set()
            topics.add(metadata[pos : pos + size].decode("utf-8"))
            pos += size
        return topics
    except (struct.error, UnicodeDecodeError):
        return set()
