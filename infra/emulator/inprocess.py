"""The in-process path: this process's clients call moto without a socket.

`Emulator.attach(clients)` (server.py) hands each request of those clients straight to
moto: DynamoDB and SQS requests to moto's own handler for the service, as moto's own
botocore stub calls it (with botocore's request up to moto 5.2.3, with moto's normalized
Request from 5.2.4), DynamoDB's under the same lock as the HTTP path's
(dynamodb_lock.py); any other service through the server's WSGI app, as an environ
werkzeug's server would build. The `dev` process's workers and API skip the HTTP round
trip, while other processes (`orchestrator worker`, the CLI) still reach the emulator over
HTTP. The emulator's own process (child.py) answers its parent's requests through the same
path.

What that reaches inside moto and botocore is checked when it is first used
(capabilities.py): `in-process` (moto's handler for a service; a probe request proves
it), `in-process:wsgi` (other services through the server's app), and `unsigned`
(botocore's signer and User-Agent handlers, unhooked). A check that fails leaves that
piece out, with one log line: the clients then call the same emulator over HTTP, or sign
their requests as usual."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from dataclasses import fields
from typing import Any
from urllib.parse import urlsplit

from botocore import UNSIGNED
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.compat import HTTPHeaders
from botocore.exceptions import ClientError
from werkzeug.exceptions import HTTPException
from werkzeug.test import EnvironBuilder

from infra.emulator.capabilities import Capability, Reach, check, record, resolve
from infra.emulator.dynamodb_lock import DYNAMODB_LOCK, SerializeDynamoDB, WSGIApp

__all__ = ["CAPABILITIES", "DIRECT", "IN_PROCESS", "IN_PROCESS_WSGI", "UNSIGNED_CALLS", "Body",
           "InProcess", "body_of", "check_once", "clients_of", "hand_over", "recheck"]


class Body(io.BytesIO):
    """A response body as botocore reads it (moto's own stub does the same)."""

    def stream(self, **_: Any) -> Iterator[bytes]:
        chunk = self.read()
        while chunk:
            yield chunk
            chunk = self.read()


IN_PROCESS = Capability(
    "in-process", "this process's DynamoDB and SQS calls skip the socket",
    (Reach("moto.dynamodb.responses:DynamoHandler.dispatch"),
     Reach("moto.sqs.responses:SQSResponse.dispatch")))
IN_PROCESS_WSGI = Capability(
    "in-process:wsgi", "this process's S3 and CloudFormation calls skip the socket",
    (Reach("moto.moto_server.werkzeug_app:DomainDispatcherApplication.get_application"),))
# Checked on each client: what it unhooks are attributes of a botocore client object.
UNSIGNED_CALLS = Capability(
    "unsigned", "in-process requests are neither signed nor given a User-Agent", ())
CAPABILITIES = (IN_PROCESS, IN_PROCESS_WSGI, UNSIGNED_CALLS)

# A read-only request per service whose answer proves the direct path (target, body).
_PROBES = {
    "dynamodb": ("DynamoDB_20120810.ListTables", b'{"Limit": 1}'),
    "sqs": ("AmazonSQS.ListQueues", b'{"MaxResults": 1}'),
}
_checked: dict[str, str | None] = {}  # capability or service -> None (usable) or why not
_checked_lock = threading.Lock()


def recheck() -> None:
    """Forget what was checked of the in-process path (the next attach checks again)."""
    with _checked_lock:
        _checked.clear()


def _normalizer() -> Any:
    """How moto's handlers take a request. From moto 5.2.4 they take moto's own Request
    (moto.core.request.normalize_request makes one of botocore's, and its
    `from_wsgi_server` says which): that module, whose normalize_request is looked up at
    each call (a speed-up may replace it); up to 5.2.3, botocore's request as it is (None)."""
    try:
        request_class = resolve("moto.core.request:Request")
        resolve("moto.core.request:normalize_request")
    except LookupError:
        return None
    if not hasattr(request_class, "from_wsgi_server"):
        return None
    return resolve("moto.core.request")


class InProcess:
    """A botocore `before-send` handler that answers a request from moto in this process
    instead of sending it.

    DynamoDB and SQS requests go to moto's own handler for the service, as moto's in-process
    mode (`mock_aws`) calls it: botocore's prepared request (moto's normalized Request from
    5.2.4), no WSGI environ, no Flask app around it. DynamoDB's still run one at a time
    under the same lock as the HTTP path's. Any other service (S3, CloudFormation, ...)
    becomes a WSGI environ, exactly as werkzeug's server would build it, and goes through
    the same app as an HTTP request."""

    def __init__(self, dispatcher: Any, url: str, service: str,
                 region: str = "us-east-1") -> None:
        # moto's dispatcher works out the service of every request anew (it lists moto's
        # modules on disk, under a lock): a client's service is known, so its app is
        # looked up once and called directly, behind the same DynamoDB serialization.
        self.dispatcher = dispatcher
        self.url = url
        self.service = service
        self.app: WSGIApp | None = None
        direct = DIRECT.get(service)
        self.handler = None if direct is None else direct()
        self.requests = _normalizer()
        # moto checks no signature: it reads the account and the region from the
        # Authorization header's credential scope. Requests handed over directly are not
        # signed (a SigV4 signature is a good part of botocore's time per request), and
        # carry that scope alone.
        self.scope = (f"AWS4-HMAC-SHA256 Credential=local/20000101/{region}/{service}"
                      "/aws4_request, SignedHeaders=host, Signature=unsigned")

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        if not str(request.url).startswith(self.url):
            return None  # another endpoint: send it as usual
        if self.handler is not None:
            return self._direct(request, self.handler)
        parts = urlsplit(request.url)
        body = body_of(request)
        environ = EnvironBuilder(
            path=parts.path or "/", query_string=parts.query, method=request.method,
            headers=[(k, v.decode() if isinstance(v, bytes) else v)
                     for k, v in request.headers.items()],
            data=body,
            base_url=f"{parts.scheme}://{parts.netloc}",
        ).get_environ()
        status: list[str] = []
        headers: list[tuple[str, str]] = []

        def start_response(st: str, hd: list[tuple[str, str]], exc: Any = None) -> None:
            status.append(st)
            headers[:] = hd

        if self.app is None:
            self.app = SerializeDynamoDB(self.dispatcher.get_application(environ))
        out = self.app(environ, start_response)
        try:
            data = b"".join(out)
        finally:
            close = getattr(out, "close", None)
            if close is not None:
                close()
        return AWSResponse(request.url, int(status[0].split()[0]), dict(headers), Body(data))

    def _direct(self, request: Any, handler: Callable[..., Any]) -> AWSResponse:
        # As moto's own botocore stub does: headers as text, the body read whole (before
        # the lock, like the HTTP path), moto's HTTP errors and ClientErrors as answers.
        for name, value in list(request.headers.items()):
            if isinstance(value, bytes):
                request.headers[name] = value.decode("utf-8")
        request.body = body_of(request)
        if "Authorization" not in request.headers:
            request.headers["Authorization"] = self.scope
        url, headers = request.url, request.headers
        if self.requests is not None:
            request = self.requests.normalize_request(request)
            url, headers = request.raw_url, request.headers
        try:
            if self.service == "dynamodb":
                with DYNAMODB_LOCK:
                    status, headers, body = handler(request, url, headers)
            else:
                status, headers, body = handler(request, url, headers)
        except HTTPException as exc:
            status, headers, body = exc.code, exc.get_headers(), exc.get_body()
        except ClientError as exc:  # what moto's Flask wrapper answers for one
            status, headers, body = 400, {}, exc.response["Error"]["Message"]
        if isinstance(body, str):
            body = body.encode("utf-8")
        return AWSResponse(str(url), int(status), _text_headers(headers), Body(body))

    def probe(self) -> str | None:
        """Send one read-only request the direct way: None if moto answered it as it
        should, else why not (this moto takes its requests in another shape)."""
        if self.handler is None or self.service not in _PROBES:
            return None
        target, body = _PROBES[self.service]
        request = AWSPreparedRequest(
            "POST", f"{self.url}/",
            HTTPHeaders.from_dict({"X-Amz-Target": target,
                                   "Content-Type": "application/x-amz-json-1.0"}),
            body, stream_output=False)
        try:
            answer = self(request)
        except Exception as exc:  # any failure: this path is not for this moto
            return f"a {self.service} request failed in moto ({type(exc).__name__}: {exc})"
        if answer is None or answer.status_code != 200:
            status = None if answer is None else answer.status_code
            return f"a {self.service} request was answered {status}, not 200"
        return None


def hand_over(client: Any, handler: Callable[..., Any], *, unsigned: bool) -> None:
    """Have `handler` answer the client's requests (`before-send`, first); `unsigned`:
    its requests are neither signed nor given a User-Agent (moto's handlers read only
    the credential scope, which the answering side adds)."""
    client.meta.events.register_first("before-send", handler)
    if unsigned:
        hyphenized = client.meta.service_model.service_id.hyphenize()
        client.meta.events.register(f"choose-signer.{hyphenized}", _unsigned)
        _unhook(client, f"request-created.{hyphenized}")


def _unsigned(**_: Any) -> Any:
    return UNSIGNED


def check_once(capability: Capability, key: str, probe: Callable[[], str | None]) -> str | None:
    """The capability's check, then `probe`, once per process for each key; its verdict
    (off if any key's check failed) is recorded for capabilities.report()."""
    with _checked_lock:
        if key not in _checked:
            _checked[key] = check(capability) or probe()
            reasons = [r for k in _checked_keys(capability) if (r := _checked.get(k))]
            record(capability, (reasons[0] + " (calls go over HTTP)") if reasons else None)
        return _checked[key]


def _checked_keys(capability: Capability) -> list[str]:
    return list(_PROBES) if capability is IN_PROCESS else ["wsgi"]


def _unhook(client: Any, created: str) -> None:
    """Nor is anything done to a request that only its trip over the wire needs: its
    signature (moto reads the credential scope InProcess adds; `choose-signer` already
    makes it UNSIGNED, this saves the signer's own work) and its User-Agent, rebuilt by
    botocore for every request. Both handlers are private attributes of the client."""
    signer = getattr(getattr(client, "_request_signer", None), "handler", None)
    agent = getattr(getattr(client, "_user_agent_creator", None),
                    "rebuild_and_replace_user_agent_handler", None)
    missing = [name for name, h in (("_request_signer.handler", signer),
                                    ("_user_agent_creator.rebuild_and_replace_user_agent_"
                                     "handler", agent)) if h is None]
    with _checked_lock:
        if missing:
            reason = (f"botocore's client has no {', '.join(missing)} "
                      "(requests are still unsigned, through choose-signer)")
            _checked["unsigned"] = reason
        else:
            _checked.setdefault("unsigned", None)
        record(UNSIGNED_CALLS, _checked["unsigned"])
    for handler in (signer, agent):
        if handler is not None:
            client.meta.events.unregister(created, handler)


def _dynamodb_handler() -> Callable[..., Any]:
    return resolve("moto.dynamodb.responses:DynamoHandler").dispatch  # type: ignore[no-any-return]


def _sqs_handler() -> Callable[..., Any]:
    return resolve("moto.sqs.responses:SQSResponse").dispatch  # type: ignore[no-any-return]


# The services whose every request moto answers with one handler, whatever the path.
DIRECT: dict[str, Callable[[], Callable[..., Any]]] = {
    "dynamodb": _dynamodb_handler,
    "sqs": _sqs_handler,
}


def body_of(request: Any) -> bytes:
    body = request.body or b""
    if isinstance(body, str):
        return body.encode()
    if not isinstance(body, bytes):
        return bytes(body.read())
    return body


def _text_headers(headers: Any) -> dict[str, str]:
    items = headers.items() if hasattr(headers, "items") else headers
    return {str(k): str(v) for k, v in items}


def clients_of(clients: Any) -> list[Any]:
    if hasattr(clients, "meta"):
        return [clients]
    return [getattr(clients, f.name) for f in fields(clients)]
