"""One DynamoDB request at a time: what makes moto linearizable.

Stock moto is not linearizable under a threaded server: moto's DynamoDB backend evaluates a
condition and applies the write without a lock, so two racing conditional writes can both
succeed (with 32 racers, two winners in 5 to 9 rounds out of 50). Every invariant of the
orchestrator rests on conditional writes, so the emulator runs DynamoDB requests one at a
time, under `DYNAMODB_LOCK`: those over HTTP (`SerializeDynamoDB`, the server's WSGI
middleware) and those handed over in-process (inprocess.py) alike. SQS and S3 requests run
concurrently: an SQS long-poll (up to 20 s) holds its own server thread and never delays
anyone else."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["DYNAMODB_LOCK", "SerializeDynamoDB", "WSGIApp"]

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

# One lock per process, not per Emulator: what it protects (moto's DynamoDB backends) is
# process-wide, so two Emulators in one process must not race each other either.
DYNAMODB_LOCK = threading.Lock()


class SerializeDynamoDB:
    """WSGI middleware: one request at a time among those that touch moto's DynamoDB state,
    every other request straight through.

    Serialized: DynamoDB and DynamoDB Streams (X-Amz-Target "DynamoDB..."), and CloudFormation,
    whose stacks create and delete tables inside the DynamoDB backend. Not serialized: SQS
    (a long-poll may wait 20 s), S3 and the rest. The response body is read inside the lock,
    since a WSGI app may do its work lazily while the body is iterated."""

    def __init__(self, app: WSGIApp, lock: threading.Lock = DYNAMODB_LOCK) -> None:
        self.app = app
        self.lock = lock

    @staticmethod
    def serializes(environ: dict[str, Any]) -> bool:
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB"):
            return True
        # SigV4: "AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/<service>/aws4_request, ..."
        return "/cloudformation/aws4_request" in environ.get("HTTP_AUTHORIZATION", "")

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if not self.serializes(environ):
            return self.app(environ, start_response)
        # The whole request is read before the lock is taken: a client that stalls half-way
        # through sending its body holds only its own thread, never everyone's DynamoDB.
        # Inside the lock moto only computes (the answer is sent after it is released), so
        # one request holds the lock for as long as moto takes to handle it, no longer.
        environ["wsgi.input"] = io.BytesIO(_read_body(environ))
        with self.lock:
            body = self.app(environ, start_response)
            try:
                return [b"".join(body)]
            finally:
                close = getattr(body, "close", None)
                if close is not None:
                    close()


def _read_body(environ: dict[str, Any]) -> bytes:
    stream = environ["wsgi.input"]
    if not environ.get("CONTENT_LENGTH") and environ.get("wsgi.input_terminated"):
        return bytes(stream.read())  # chunked: werkzeug ends the stream at the last chunk
    length = int(environ.get("CONTENT_LENGTH") or 0)
    chunks, left = [], length
    while left > 0:
        chunk = stream.read(min(left, 1 << 16))
        if not chunk:
            break  # the client went away: moto answers the short body as malformed
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
