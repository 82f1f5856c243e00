"""The bundled page: `web/static/index.html`, one file with no build step, read from the
installed package (a server started without it serves the API alone)."""

from __future__ import annotations

from importlib.resources import files

__all__ = ["bundled_page"]


def bundled_page() -> bytes | None:
    """The page's bytes, or None when the package was installed without its static files."""
    try:
        return files("web").joinpath("static/index.html").read_bytes()
    except (FileNotFoundError, OSError):
        return None
