"""A pytest plugin `run.sh` loads into the A2A TCK (`-p tck_loopback`): keeps it on loopback.

The a2a-tck 1.0 line starts a webhook receiver for its push-notification tests that binds
0.0.0.0; this rebinds it to 127.0.0.1. It changes no test logic. The TCK's module is looked up by
name, since this file is only ever loaded inside the TCK's own environment.
"""

from __future__ import annotations

import importlib
from typing import Any


def _rebind_webhook_receiver() -> None:
    try:
        server: Any = importlib.import_module("tck.webhook.server")
    except ImportError:  # other TCK lines have no webhook receiver
        return
    receiver = getattr(server, "WebhookReceiver", None)
    if receiver is None:
        return
    original = receiver.start

    def start(self: Any) -> Any:
        self.host = "127.0.0.1"
        return original(self)

    receiver.start = start


_rebind_webhook_receiver()
