"""How a partition is named: Kafka's two partition identities, as value types.

`TopicPartition` (topic name, index) is what clients send, and how the partitions a broker
hosts, replica fetches and committed offsets are keyed. `TopicIdPartition` (topic id,
index) is how the metadata store, the cluster view and the controller key a partition: a
topic deleted and re-created under the same name gets a new id, so the old topic's state
can never be taken for the new one's. The id is kept as the text of the UUID, the form the
metadata store's keys and the inter-broker messages carry, so it is converted once, here.

Both are NamedTuples: equal to, and hashed like, the plain tuples they replace.
"""

from __future__ import annotations

import uuid
from typing import NamedTuple


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class TopicIdPartition(NamedTuple):
    topic_id: str  # str(uuid.UUID)
    partition: int

    @classmethod
    def of(cls, topic_id: uuid.UUID, partition: int) -> TopicIdPartition:
        return cls(str(topic_id), partition)
