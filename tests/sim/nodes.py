"""Which node a task belongs to, and kill -9 for a node: the pieces a cluster scenario uses
to crash and restart brokers (see SimLoop.kill for what a kill does).

    node = new_node(sim.loop, 1)
    with as_node(node):                       # synchronous set-up: tasks created here are node 1's
        broker = build_broker(...)
    started = spawn(node, broker.start())     # async code of node 1 runs in a task of node 1
    ...
    crash(sim.loop, node, network)            # kill -9: tasks frozen, listeners gone
    node = new_node(sim.loop, 1)              # the restarted process: a new incarnation

The scenario's own main task belongs to no node, so killing a node never freezes it. Do
not `await` inside `as_node`: the awaiting task would belong to the node while it waits.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from .loop import CURRENT_NODE, SimLoop, SimNode

if TYPE_CHECKING:
    from .network import SimNetwork

T = TypeVar("T")


def new_node(loop: SimLoop, node_id: int) -> SimNode:
    """The next incarnation of `node_id` on this loop (1 for the first)."""
    incarnation = loop.incarnations.get(node_id, 0) + 1
    loop.incarnations[node_id] = incarnation
    return SimNode(node_id, incarnation)


@contextmanager
def as_node(node: SimNode) -> Iterator[SimNode]:
    """Run the enclosed synchronous code as `node`: tasks and timers it creates are the node's."""
    token = CURRENT_NODE.set(node)
    try:
        yield node
    finally:
        CURRENT_NODE.reset(token)


def spawn(node: SimNode, coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
    """Start `coro` as a task of `node` (and so are the tasks it creates)."""
    context = contextvars.copy_context()
    context.run(CURRENT_NODE.set, node)
    return asyncio.get_running_loop().create_task(coro, name=name, context=context)


def crash(loop: SimLoop, node: SimNode, network: SimNetwork | None = None, *, black_hole: bool = False) -> None:
    """kill -9 the node: its tasks freeze where they are, and, with a network, its
    listeners close and its connections break (see SimNetwork.crash)."""
    loop.kill(node)
    if network is not None:
        network.crash(node.node_id, black_hole=black_hole)
