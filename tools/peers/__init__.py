"""Peer servers the tests, benchmarks and soak talk to: remote agents and a model stand-in.

Remote A2A agents (`a2a_faulty` on the official a2a-sdk server with injected faults, `raw_a2a`
for wire cases no SDK server produces, `a2a_js/` on @a2a-js/sdk), a remote AG-UI agent
(`agui_app`) and a scripted model endpoint for the real agent CLIs (`scripted_model`). The
Python servers run as processes print `READY <port>` once listening and, with `--watch-stdin`,
stop when their stdin closes; `children` reads that line and stops them. None of them is product
code.
"""
