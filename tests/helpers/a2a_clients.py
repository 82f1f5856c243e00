"""The official a2a-sdk client as the tests of `a2a-serve` use it, and how they name a state.

`sdk_client` opens the client on one protocol binding of a served agent's card, its streams
closed with it (the SDK closes no inner generator when a stream raises, as a refused message's
or a refused SubscribeToTask's does); `state_of` names what one stream item says: `task:<STATE>`
for a Task, the state for a status update, else the item's kind.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import StreamResponse, TaskState

from adapters._asyncgens import closing_abandoned_generators
from tests.helpers.peers import ServedAgent

JSONRPC = "JSONRPC"


@asynccontextmanager
async def sdk_client(served: ServedAgent, binding: str = JSONRPC) -> AsyncIterator[Client]:
    """The a2a-sdk client of `served` on one binding, closed (with its streams) on exit."""
    async with closing_abandoned_generators(), httpx.AsyncClient(timeout=10.0) as http:
        card = await A2ACardResolver(http, served.base_url).get_agent_card()
        config = ClientConfig(httpx_client=http, supported_protocol_bindings=[binding])
        client = ClientFactory(config).create(card)
        try:
            yield client
        finally:
            await client.close()


def state_of(event: StreamResponse) -> str:
    kind = event.WhichOneof("payload")
    if kind == "task":
        return "task:" + TaskState.Name(event.task.status.state)
    if kind == "status_update":
        return TaskState.Name(event.status_update.status.state)
    return str(kind)
