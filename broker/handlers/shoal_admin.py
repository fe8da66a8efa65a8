"""The Shoal admin API's commands (protocol/admin.py has the frames): what `shoal walfiles
status|gc`, `shoal tiering status|run`, `shoal cluster describe` and `shoal topics
describe|set-mode` (each partition's mode, from the cluster view) ask.

The WAL file manager runs on the controller; any other broker answers `walfiles.*` with
NOT_CONTROLLER and the controller's address, and the CLI asks there. Tiering runs on every
partition leader: `tiering.*` answers for the partitions this broker leads, plus the list of
data brokers, so the CLI asks each of them in turn.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..context import HandlerContext
from ..modes.status import partition_modes, switch_status
from ..objectstore.probe import store_problem
from ..protocol.admin import AdminRequest, AdminResponse
from ..protocol.errors import ErrorCode

COMMANDS = (
    "walfiles.status",
    "walfiles.gc",
    "tiering.status",
    "tiering.run",
    "cluster.brokers",
    "objects.check",
    "topics.modes",
)


async def handle(ctx: HandlerContext, request: AdminRequest) -> AdminResponse:
    def answer(result: Any, error: ErrorCode = ErrorCode.NONE, message: str | None = None) -> AdminResponse:
        return AdminResponse(request.correlation_id, int(error), message, result)

    if request.command not in COMMANDS:
        return answer(None, ErrorCode.INVALID_REQUEST, f"unknown command {request.command!r}; known: {list(COMMANDS)}")
    if request.command.startswith("tiering."):
        return await _tiering(ctx, request, answer)
    if request.command == "objects.check":  # `shoal cluster health`: can this broker use the store?
        problem = await store_problem(ctx.objects)
        return answer({"node_id": ctx.node_id, "reachable": problem is None, "error": problem})
    if request.command == "topics.modes":  # `shoal topics describe|set-mode`: each partition's mode
        return _modes(ctx, request, answer)
    if request.command == "cluster.brokers":  # what Kafka's DescribeCluster does not say
        return answer(
            [
                {"node_id": b.node_id, "az": b.az, "stateless": b.stateless, "version": b.software_version}
                for b in sorted(ctx.view.brokers.values(), key=lambda b: b.node_id)
            ]
        )
    manager = ctx.wal_files
    if not manager.status().active:
        controller = ctx.view.brokers.get(ctx.view.controller_id)
        where: dict[str, Any] = {"controller_id": ctx.view.controller_id}
        if controller is not None:
            where |= {"host": controller.host, "port": controller.port}
        return answer(where, ErrorCode.NOT_CONTROLLER, "the WAL file manager runs on the controller")
    if request.command == "walfiles.status":
        return answer(msgspec.to_builtins(manager.status()))
    dry_run = request.args.get("dry_run", False)
    if not isinstance(dry_run, bool):
        return answer(None, ErrorCode.INVALID_REQUEST, "dry_run must be true or false")
    return answer(msgspec.to_builtins(await manager.run_cycle(dry_run=dry_run)))


def _modes(ctx: HandlerContext, request: AdminRequest, answer: Any) -> AdminResponse:
    names = request.args.get("topics")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return answer(None, ErrorCode.INVALID_REQUEST, "topics must be a list of topic names")
    result = {}
    for name in names:
        topic = ctx.catalog.get(name)
        if topic is None:
            return answer(None, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no such topic: {name}")
        modes = partition_modes(topic, ctx.view)
        result[name] = {
            "status": switch_status(topic, modes),
            "partitions": [{"partition": m.partition, "mode": m.mode.value, "since": m.boundary} for m in modes],
        }
    return answer(result)


async def _tiering(ctx: HandlerContext, request: AdminRequest, answer: Any) -> AdminResponse:
    topic, index = request.args.get("topic"), request.args.get("partition")
    if topic is not None and not isinstance(topic, str) or index is not None and not isinstance(index, int):
        return answer(None, ErrorCode.INVALID_REQUEST, "topic must be a string and partition an integer")
    service = ctx.offload
    brokers = [
        {"node_id": b.node_id, "host": b.host, "port": b.port}
        for b in sorted(ctx.view.brokers.values(), key=lambda b: b.node_id)
        if not b.stateless
    ]
    if request.command == "tiering.run":
        if request.args.get("wait", True) is False:
            service.trigger(topic, index)
            return answer({"node_id": ctx.node_id, "brokers": brokers, "started": True})
        report = await service.run_once(topic, index)
        return answer({"node_id": ctx.node_id, "brokers": brokers, "run": msgspec.to_builtins(report)})
    last = service.last_run
    status = {
        "node_id": ctx.node_id,
        "brokers": brokers,
        "enabled": ctx.config.tiering_enable and not ctx.config.stateless,
        "partitions": [msgspec.to_builtins(s) for s in service.status() if topic in (None, s.topic)],
        "last_run": None if last is None else msgspec.to_builtins(last),
        "last_success_ms": service.last_success_ms,
    }
    return answer(status)
