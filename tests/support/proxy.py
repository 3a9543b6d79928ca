"""A real HTTP proxy in front of a durable workflow's app, for fault tests: it forwards
each call and passes the answer's NDJSON lines through, with a fault of its choosing
on the way (a connection cut after k checkpoints, every line sent twice)."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

__all__ = ["CheckpointProxy", "ProxyCut"]

HOP = {"host", "content-length", "transfer-encoding", "connection"}


class ProxyCut(Exception):
    """Raised inside the answer's body: uvicorn drops the connection mid-answer."""


@dataclass
class CheckpointProxy:
    """`cut_after`: on the first `cuts` streamed calls, drop the connection once that
    many checkpoints went through. `twice`: send every line twice."""

    upstream: str
    cut_after: int | None = None
    cuts: int = 1
    twice: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    passed: list[dict[str, Any]] = field(default_factory=list)  # checkpoints through
    cut_at: list[int] = field(default_factory=list)  # checkpoints through at each cut

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/{path:path}", self._forward,
                                       methods=["GET", "POST"])])

    async def _forward(self, request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        client = httpx.AsyncClient(timeout=None)
        upstream = await client.send(client.build_request(
            request.method, self.upstream + request.url.path, content=body,
            headers=headers, params=request.query_params), stream=True)
        out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP}
        if "x-ndjson" not in upstream.headers.get("content-type", ""):
            raw = await upstream.aread()
            await upstream.aclose()
            await client.aclose()
            return Response(raw, status_code=upstream.status_code, headers=out_headers)
        with self.lock:
            cut = self.cut_after is not None and len(self.cut_at) < self.cuts
        return StreamingResponse(self._lines(client, upstream, cut),
                                 status_code=upstream.status_code, headers=out_headers)

    async def _lines(self, client: httpx.AsyncClient, upstream: httpx.Response,
                     cut: bool) -> AsyncIterator[bytes]:
        through = 0
        try:
            async for line in upstream.aiter_lines():
                if not line.strip():
                    continue
                doc = json.loads(line)
                if doc.get("op") == "record":
                    if cut and through >= (self.cut_after or 0):
                        with self.lock:
                            self.cut_at.append(through)
                        raise ProxyCut(f"connection cut after {through} checkpoints")
                    through += 1
                    with self.lock:
                        self.passed.append(doc["entry"])
                data = (line + "\n").encode()
                yield data + data if self.twice else data
        finally:
            await upstream.aclose()
            await client.aclose()
