"""The AG-UI output adapter: engine journal entries as an AG-UI 1.0 event stream, and its checker.

`AguiStreamEncoder(thread_id, run_id, mode)` turns one viewer's journal entries into AG-UI events
in one of the visibility modes `MODES` (`attributed`, the default, `custom`, `inline`, `hidden`;
declared here only): frames, each event's JSON with the cursor it carries, which `sse_bytes`
writes as SSE and `websocket_messages` as WebSocket messages (`_framing`);
`parse_sse` reads captured SSE back into events and `check_events` / `check_frames` hold them
to the AG-UI verifier rules (`Rule`, `Violation`); `stream_mode` picks `attributed` or `custom`
for a client by what it declares (`_capabilities`). Everything here is sans-IO: the server
(`web.server`) and the `check-stream` command do the I/O.

Remote AG-UI agents as delegation targets: `AguiTarget(AguiAgentConfig(url=...))` is what a host
registers under an agent key (`AgentSpec(key=..., protocol="agui", target=...)`); the
translation of the remote's stream is `AguiRemoteMapper` (sans-IO, `_remote`), the I/O `_target`.
"""

from adapters.agui._capabilities import CapabilityError, stream_mode
from adapters.agui._checker import Rule, StreamChecker, Violation, check_events, check_frames
from adapters.agui._chunks import ChunkError, ChunkExpander
from adapters.agui._encoder import (
    DEFAULT_MODE,
    MODES,
    AguiStreamEncoder,
    SharedEncoding,
    frame_events,
)
from adapters.agui._framing import KEEPALIVE, Frame, sse_bytes, websocket_messages
from adapters.agui._remote import AguiRemoteMapper, RemoteSseDecoder
from adapters.agui._sse import SseError, parse_sse
from adapters.agui._target import AGENT_PROTOCOL, AguiAgentConfig, AguiTarget

__all__ = [
    "AGENT_PROTOCOL",
    "DEFAULT_MODE",
    "KEEPALIVE",
    "MODES",
    "AguiAgentConfig",
    "AguiRemoteMapper",
    "AguiStreamEncoder",
    "AguiTarget",
    "CapabilityError",
    "ChunkError",
    "ChunkExpander",
    "Frame",
    "RemoteSseDecoder",
    "Rule",
    "SharedEncoding",
    "SseError",
    "StreamChecker",
    "Violation",
    "check_events",
    "check_frames",
    "frame_events",
    "parse_sse",
    "sse_bytes",
    "stream_mode",
    "websocket_messages",
]
