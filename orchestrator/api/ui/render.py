"""The dashboard's templates (Jinja2, autoescaped, shipped in the package) and the filters
they format values with."""

from __future__ import annotations

import json
import time
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from orchestrator import __version__
from orchestrator.api.ui.layout import REUSED, detail, seconds
from orchestrator.api.ui.reads import ENDED
from orchestrator.presentation.backend_waits import backend_wait_text
from orchestrator.presentation.glyphs import DURABLE_GLYPHS
from orchestrator.presentation.glyphs import GLYPHS as TERMINAL_GLYPHS
from orchestrator.presentation.script_log import script_log

__all__ = ["GLYPHS", "fragment", "macros", "page"]

# A status's glyph, as the terminal diagram draws it.
GLYPHS = {status: pair[0] for status, pair in {**TERMINAL_GLYPHS, **DURABLE_GLYPHS}.items()}


def _when(t: Any) -> str:
    if not isinstance(t, (int, float)):
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}"


def _took(a: Any, b: Any = None) -> str:
    if not isinstance(a, (int, float)):
        return "—"
    end = b if isinstance(b, (int, float)) else time.time()
    s = max(0.0, end - a)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.2f} s"
    return f"{int(s // 60)} min {int(s % 60)} s"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)


def _error_message(error: Any) -> str:
    """An error's human message: its `message`, else the error itself as text."""
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return json.dumps(error, ensure_ascii=False, default=str)


def _dollars(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "—"
    return f"${value:.6f}" if value < 0.01 else f"${value:.4f}"


_env = Environment(loader=PackageLoader("orchestrator.api.ui", "templates"),
                   autoescape=select_autoescape(default=True), trim_blocks=True,
                   lstrip_blocks=True)
_env.filters.update(script_log=script_log, when=_when, pretty=_pretty, dollars=_dollars,
                    glyph=lambda s: GLYPHS.get(str(s), "?"), detail=detail,
                    backend_wait=backend_wait_text, error_message=_error_message,
                    span=seconds)
_env.globals.update(took=_took, ended=lambda status: status in ENDED, version=__version__,
                    reused_glyph=REUSED)


def fragment(template: str, **context: Any) -> str:
    return _env.get_template(template).render(**context)


def macros(template: str) -> Any:
    """`template`'s macros, each callable with its arguments (a part of a page drawn
    alone, as its live stream sends it)."""
    return _env.get_template(template).module


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """A whole page, with the layout's badge and navigation."""
    ui = request.app.state.ui
    html = fragment(template, request=request, badge=ui.badge, auth=ui.auth_on, **context)
    response = HTMLResponse(html, status_code=status_code)
    response.headers["Cache-Control"] = "no-store"
    return response
