"""The Shoal admin API's commands (protocol/admin.py has the frames): what `shoal walfiles
status|gc` ask. The WAL file manager runs on the controller; any other broker answers
NOT_CONTROLLER with the controller's address, and the CLI asks there."""

from __future__ import annotations

from typing import Any

import msgspec

from ..context import HandlerContext
from ..protocol.admin import AdminRequest, AdminResponse
from ..protocol.errors import ErrorCode

COMMANDS = ("walfiles.status", "walfiles.gc")


async def handle(broker: HandlerContext, request: AdminRequest) -> AdminResponse:
    def answer(result: Any, error: ErrorCode = ErrorCode.NONE, message: str | None = None) -> AdminResponse:
        return AdminResponse(request.correlation_id, int(error), message, result)

    if request.command not in COMMANDS:
        return answer(None, ErrorCode.INVALID_REQUEST, f"unknown command {request.command!r}; known: {list(COMMANDS)}")
    manager = broker.wal_files
    if not manager.status().active:
        controller = broker.view.brokers.get(broker.view.controller_id)
        where: dict[str, Any] = {"controller_id": broker.view.controller_id}
        if controller is not None:
            where |= {"host": controller.host, "port": controller.port}
        return answer(where, ErrorCode.NOT_CONTROLLER, "the WAL file manager runs on the controller")
    if request.command == "walfiles.status":
        return answer(msgspec.to_builtins(manager.status()))
    dry_run = request.args.get("dry_run", False)
    if not isinstance(dry_run, bool):
        return answer(None, ErrorCode.INVALID_REQUEST, "dry_run must be true or false")
    return answer(msgspec.to_builtins(await manager.run_cycle(dry_run=dry_run)))
