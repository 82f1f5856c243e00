"""The bundled server: runs over AG-UI SSE and WebSocket, its host configuration and its page.

`server` serves runs to viewers (reconnect by cursor, stop, answer, viewer and host tokens),
`config` reads the host's TOML file into agents, parent, limits and server settings, and `page`
loads `static/index.html`. It hosts the engine like any other host would, through `engine` and
`adapters`; command lines are parsed in `cli`, never here.
"""
