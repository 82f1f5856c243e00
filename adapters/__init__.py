"""The engine's edges: one package per protocol or process the engine talks to.

Each package turns one outside protocol into the engine's vocabulary and back: `a2a` and `agui`
(remote agents, and a parent served as an A2A agent), `mcp` (the run-scoped tool endpoint),
`inprocess` (async functions as agents), `parents` (what drives a run) and `listener` (what every
HTTP listener of ours shares). Protocol SDKs are imported here, never in `engine`; the
translation itself lives in sans-IO modules (`a2a._mapping`, `agui._encoder`, `mcp._tools`, ...)
and the modules around them only move bytes. Adapters import `engine`, never `web`, `cli` or
`demo`. The package itself offers `closing_abandoned_generators` (see `adapters._asyncgens`) to
every HTTP client of the project, the command line's included.
"""

from adapters._asyncgens import closing_abandoned_generators

__all__ = ["closing_abandoned_generators"]
