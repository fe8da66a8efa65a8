"""The topic catalog: names, ids, partition counts and config overrides, kept in the
metadata store and cached in memory. Listeners (the replica manager) are told of every
change so partition logs follow the catalog.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Mapping, Sequence

from .config import BrokerConfig
from .metadata import KeyValue, MetadataStore, RevisionConflict
from .metadata import records
from .protocol.errors import ApiError, ErrorCode
from .topic_config import DISKLESS_ENABLE, TopicSettings, effective, validate_overrides
from .topic_mode import TopicMode, mode_of

MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_PARTITIONS = 10_000


def check_topic_name(name: str | None) -> str:
    """Kafka's rules: 1-249 chars of [a-zA-Z0-9._-], not '.' or '..'."""
    if not name:
        raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME:
        raise ApiError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters",
        )
    if not _LEGAL.match(name):
        raise ApiError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'",
        )
    return name


@dataclass(slots=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str]
    settings: TopicSettings
    internal: bool = False
    created_diskless: bool | None = None  # None: as `settings` say (never switched)

    @property
    def mode(self) -> TopicMode:
        """How the topic's partitions are appended to and served (topic_mode.py)."""
        return mode_of(self.settings)

    @property
    def born_diskless(self) -> bool:
        """The mode of a partition whose log holds no mode marker (log/modes.py)."""
        return self.settings.diskless if self.created_diskless is None else self.created_diskless

    def record(self) -> records.TopicRecord:
        return records.TopicRecord(
            records.RECORD_VERSION,
            self.name,
            str(self.topic_id),
            self.partitions,
            self.configs,
            self.internal,
            self.born_diskless,
        )


Listener = Callable[[str, "Topic | None"], Awaitable[None]]
Assignment = Mapping[int, Sequence[int]]  # partition index -> replicas, preferred leader first
STATE_WRITE_CHUNK = 100  # partition states per store transaction (etcd allows 128 writes)


@dataclass
class TopicCatalog:
    store: MetadataStore
    broker: BrokerConfig
    new_uuid: Callable[[], uuid.UUID]  # topic ids (the broker's Environment.new_uuid)
    _by_name: dict[str, Topic] = field(default_factory=dict)
    _by_id: dict[uuid.UUID, Topic] = field(default_factory=dict)
    _listeners: list[Listener] = field(default_factory=list)
    # the cluster view applies partition states this broker wrote before their watch events
    on_states_written: Callable[[list[KeyValue]], Awaitable[None]] | None = None

    async def load(self) -> None:
        for kv in await self.store.list(records.TOPIC_PREFIX):
            self._cache(self._from_record(records.decode(kv.value, records.TopicRecord)))

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def get(self, name: str) -> Topic | None:
        return self._by_name.get(name)

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def all(self) -> list[Topic]:
        return list(self._by_name.values())

    def prepare(self, name: str, partitions: int, configs: dict[str, str | None]) -> Topic:
        """Validate a creation without doing it (CreateTopics validate_only shares this)."""
        check_topic_name(name)
        if name in self._by_name:
            raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if partitions == -1:
            partitions = self.broker.num_partitions
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise ApiError(
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions must be between 1 and {MAX_PARTITIONS}, got {partitions}.",
            )
        overrides = validate_overrides(configs)
        settings = effective(overrides, self.broker)
        # The mode is fixed at creation: a later change of diskless.default must not flip it.
        overrides[DISKLESS_ENABLE] = "true" if settings.diskless else "false"
        return Topic(name, self.new_uuid(), partitions, overrides, settings)

    async def create(self, topic: Topic, assignment: Assignment) -> Topic:
        """Write the partition states, then the topic record (create-if-absent): a topic is
        visible only once every partition has a state. States are keyed by topic id, so a
        creation that loses a race leaves nothing but its own keys, which it deletes."""
        written = await self._write_states(topic, assignment)
        try:
            await self.store.put(records.topic_key(topic.name), records.encode(topic.record()), expected_revision=0)
        except RevisionConflict:
            await self._delete_keys([kv.key for kv in written])
            raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists.") from None
        self._cache(topic)
        await self._notify(topic.name, topic)
        await self._announce(written)
        return topic

    async def delete(self, name: str) -> Topic:
        topic = self._require(name)
        await self.store.delete(records.topic_key(name))
        await self._delete_keys([records.partition_key(str(topic.topic_id), i) for i in range(topic.partitions)])
        await self.apply_delete(name)
        return topic

    async def apply_record(self, record: records.TopicRecord) -> None:
        """A topic record seen in the store (maybe written by another broker)."""
        topic = self._from_record(record)
        known = self._by_name.get(topic.name)
        if known is not None and (
            known.topic_id,
            known.partitions,
            known.configs,
            known.internal,
            known.born_diskless,
        ) == (topic.topic_id, topic.partitions, topic.configs, topic.internal, topic.born_diskless):
            return
        if known is not None and known.topic_id != topic.topic_id:
            await self.apply_delete(known.name)  # deleted and created again meanwhile
        self._cache(topic)
        await self._notify(topic.name, topic)

    async def apply_delete(self, name: str) -> None:
        topic = self._by_name.pop(name, None)
        if topic is None:
            return
        self._by_id.pop(topic.topic_id, None)
        await self._notify(name, None)

    async def _write_states(self, topic: Topic, assignment: Assignment) -> list[KeyValue]:
        states = {
            records.partition_key(str(topic.topic_id), index): records.encode(
                records.PartitionStateRecord(records.RECORD_VERSION, list(replicas), replicas[0], 0, list(replicas))
            )
            for index, replicas in sorted(assignment.items())
        }
        written: list[KeyValue] = []
        items = list(states.items())
        for start in range(0, len(items), STATE_WRITE_CHUNK):
            chunk = dict(items[start : start + STATE_WRITE_CHUNK])
            revision = await self.store.txn({}, puts=chunk)
            written.extend(KeyValue(key, value, revision) for key, value in chunk.items())
        return written

    async def _delete_keys(self, keys: list[str]) -> None:
        for start in range(0, len(keys), STATE_WRITE_CHUNK):
            await self.store.txn({}, deletes=keys[start : start + STATE_WRITE_CHUNK])

    async def _announce(self, written: list[KeyValue]) -> None:
        if self.on_states_written is not None and written:
            await self.on_states_written(written)

    def check_new_partition_count(self, name: str, count: int) -> Topic:
        topic = self._require(name)
        if count <= topic.partitions:
            raise ApiError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {topic.partitions} partitions, which is higher than or "
                f"equal to the requested {count}.",
            )
        if count > MAX_PARTITIONS:
            raise ApiError(ErrorCode.INVALID_PARTITIONS, f"At most {MAX_PARTITIONS} partitions per topic.")
        return topic

    async def set_partition_count(self, name: str, count: int, assignment: Assignment) -> Topic:
        """Grow the topic: states of the new partitions first, then the topic record."""
        topic = self.check_new_partition_count(name, count)
        written = await self._write_states(topic, assignment)
        updated = await self._update(topic, partitions=count)
        await self._announce(written)
        return updated

    async def set_configs(self, name: str, overrides: dict[str, str | None]) -> Topic:
        """Replace the topic's overrides (callers merge for incremental changes)."""
        return await self._update(self._require(name), configs=self.check_configs(name, overrides))

    def check_configs(self, name: str, overrides: Mapping[str, str | None]) -> dict[str, str]:
        """Validate a replacement of the topic's overrides. Leaving diskless.enable out keeps
        the mode (a later diskless.default must not flip it); changing it switches the topic
        online (modes/switch.py), except for internal topics."""
        topic = self._require(name)
        clean = validate_overrides(overrides)
        clean.setdefault(DISKLESS_ENABLE, topic.configs[DISKLESS_ENABLE])
        if clean[DISKLESS_ENABLE] != topic.configs[DISKLESS_ENABLE] and topic.internal:
            raise ApiError(ErrorCode.INVALID_CONFIG, f"internal topic {name} is always classic")
        return clean

    def _require(self, name: str) -> Topic:
        topic = self._by_name.get(name)
        if topic is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"This server does not host this topic: {name}")
        return topic

    async def _update(
        self, topic: Topic, partitions: int | None = None, configs: dict[str, str] | None = None
    ) -> Topic:
        configs = topic.configs if configs is None else configs
        updated = Topic(
            topic.name,
            topic.topic_id,
            partitions or topic.partitions,
            configs,
            effective(configs, self.broker),
            topic.internal,
            topic.born_diskless,
        )
        await self.store.put(records.topic_key(topic.name), records.encode(updated.record()))
        self._cache(updated)
        await self._notify(updated.name, updated)
        return updated

    def _from_record(self, record: records.TopicRecord) -> Topic:
        configs = dict(record.configs)
        configs.setdefault(DISKLESS_ENABLE, "false")  # written before diskless topics existed: classic
        return Topic(
            record.name,
            uuid.UUID(record.topic_id),
            record.partitions,
            configs,
            effective(configs, self.broker),
            record.internal,
            record.created_diskless,
        )

    def _cache(self, topic: Topic) -> None:
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    async def _notify(self, name: str, topic: Topic | None) -> None:
        for listener in self._listeners:
            await listener(name, topic)
