"""The visibility modes are declared once, `adapters.agui.MODES`: the host configuration, the
server's `?mode=` and the bundled page's choices are all that list, in that order."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from adapters.agui import DEFAULT_MODE, MODES, AguiStreamEncoder
from web.config import ConfigError, ServerEntry, parse_config
from web.page import bundled_page
from web.server import HttpError, _mode


class _ModeChoices(HTMLParser):
    """The values of the `<option>`s of the page's `<select id="mode">`."""

    def __init__(self) -> None:
        super().__init__()
        self.values: list[str] = []
        self._inside = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "select":
            self._inside = dict(attrs).get("id") == "mode"
        elif tag == "option" and self._inside:
            self.values.append(dict(attrs).get("value") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._inside = False


def test_the_pages_choices_are_the_server_default_then_every_mode() -> None:
    page = bundled_page()
    assert page is not None
    choices = _ModeChoices()
    choices.feed(page.decode())
    assert choices.values == ["", *MODES]


def test_the_default_mode_is_the_first() -> None:
    assert DEFAULT_MODE == MODES[0] == "attributed"
    assert ServerEntry().visibility == DEFAULT_MODE
    assert parse_config("", "host.toml").server.visibility == DEFAULT_MODE
    assert AguiStreamEncoder().mode == DEFAULT_MODE


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_is_taken_everywhere(mode: str) -> None:
    assert parse_config(f'[server]\nvisibility = "{mode}"\n', "h.toml").server.visibility == mode
    assert _mode(mode, DEFAULT_MODE) == mode
    assert AguiStreamEncoder(mode=mode).mode == mode


def test_anything_else_is_refused_everywhere_with_the_same_list() -> None:
    listed = ", ".join(MODES)
    with pytest.raises(ConfigError, match=f"server.visibility: must be one of {listed}"):
        parse_config('[server]\nvisibility = "loud"\n', "h.toml")
    with pytest.raises(HttpError) as refused:
        _mode("loud", DEFAULT_MODE)
    assert refused.value.error == "bad_mode" and listed in refused.value.message
    with pytest.raises(ValueError, match=listed):
        AguiStreamEncoder(mode="loud")
