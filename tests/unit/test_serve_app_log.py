"""`serve_app` leaves Hypercorn's "Running on" line to its caller (serve, demo, the benches and
the soak each say where they listen, and the in-process servers of benches and soak printed one
such line each), while Hypercorn's warnings still get through."""

from __future__ import annotations

import logging

import httpx
import pytest
from quart_trio import QuartTrio

from web.server import serve_app


async def test_serve_app_prints_no_running_on_line(caplog: pytest.LogCaptureFixture) -> None:
    app = QuartTrio("probe")

    @app.route("/")
    async def index() -> str:
        return "ok"

    caplog.set_level(logging.DEBUG)
    async with serve_app(app) as url, httpx.AsyncClient() as http:
        assert (await http.get(url + "/")).text == "ok"
    hypercorn = [r for r in caplog.records if r.name.startswith("hypercorn")]
    assert not [r for r in hypercorn if "Running on" in r.getMessage()]
    assert logging.getLogger("hypercorn.error").getEffectiveLevel() <= logging.WARNING
