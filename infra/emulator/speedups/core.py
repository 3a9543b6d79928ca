"""The request and answer path of moto (moto.core: its requests, its response serializer,
its response classes), done once where moto repeats it (the speed-ups' registry,
`__init__.py`, applies these, each behind its capability check; DynamoDB's own part of
that path is dynamodb_wire.py).

Answers: moto's response serializer works out, for every member of every attribute value
of every item, which spellings to look the member up under. For plain dicts (what
DynamoDB answers are made of) those spellings are a pure function of the member's name and
its shape in the service's model, which moto keeps for the life of the process: they are
memoized, and a member is then looked up in the dict directly.

Requests (moto 5.2.1 to 5.2.3): before a handler runs, moto turns botocore's request into a
werkzeug Request (a WSGI environ, headers, a form parser) only to hand its body to the JSON
parser, which reads nothing else: a request of the JSON protocols (DynamoDB, SQS) is handed
over as what that parser reads. From 5.2.4 moto builds its Request once, before the
handler, and every part of moto reads it: werkzeug's EnvironBuilder made its environ (some
80 us of the ~100 us a request's Request cost). For a JSON request to `/` (every DynamoDB and
SQS request), the same environ is written out directly, key for key, and moto's own Request
class wraps it.

Every request: moto lists the methods of its response class (`inspect.getmembers`) to
find the action's; a class's methods do not change while it serves, so the list is
memoized per class."""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse, urlsplit

from botocore.awsrequest import AWSPreparedRequest

from infra.emulator.capabilities import resolve

__all__ = ["XFORMED", "build_request", "clear", "get_possible_keys", "get_value",
           "method_names", "normalize_request"]

_lock = threading.Lock()
_models: dict[str, Any] = {}  # service name -> moto's one ServiceModel of it
_spellings: dict[tuple[Any, ...], tuple[str, ...]] = {}
_methods: dict[type, list[str]] = {}
XFORMED = "moto.core.serialize:XFormedAttributePicker"


def clear() -> None:
    with _lock:
        for memo in (_models, _spellings, _methods):
            memo.clear()


def _kept(service_model: Any) -> bool:
    """Is this the model moto keeps for its service (so its shapes live on)?"""
    name = service_model.service_name
    kept = _models.get(name)
    if kept is None:
        kept = _models.setdefault(name, resolve("moto.core.utils:get_service_model")(name))
    return kept is service_model


def get_possible_keys(owner: str) -> Callable[[Any], Any]:
    """AttributePicker.get_possible_keys (and XFormedAttributePicker's), memoized."""
    def build(stock: Any) -> Any:
        cls = resolve(owner)

        def get_possible_keys(self: Any, context: Any) -> Any:
            # Only for dicts (no Meta aliases, one class name) and shapes of a kept model
            # (shape objects live as long as it does, so their identity is a stable key).
            if type(context.obj) is not dict or context.service_model is None or \
                    not _kept(context.service_model):
                return stock(self, context)
            key = (cls, id(self.alias_providers), context.key, id(context.shape))
            hit = _spellings.get(key)
            if hit is None:
                hit = _spellings.setdefault(key, tuple(stock(self, context)))
            return hit

        return get_possible_keys

    return build


def get_value(stock: Any) -> Any:
    xformed = resolve(XFORMED)

    def get_value(self: Any, value: Any, key: str, shape: Any) -> Any:
        # ResponseSerializer.get_value for a dict whose member spellings are memoized: the
        # first spelling present, as the picker would find it (moto's get_value of a dict
        # is a key lookup, for names without a dot), without building a picking context.
        picker = self._value_picker
        if type(value) is dict and type(picker) is xformed \
                and not picker.response_transformers:
            hit = _spellings.get((xformed, id(picker.alias_providers), key, id(shape)))
            if hit is not None and _kept(self.operation_model.service_model) \
                    and not any("." in spelling for spelling in hit):
                for spelling in hit:
                    if spelling in value:
                        return value[spelling]
                return None
        return stock(self, value, key, shape)

    return get_value


class _JSONRequest:
    """What moto's parameter parsing reads of a request (its JSON parser: the body)."""

    def __init__(self, request: Any, content_type: str) -> None:
        body = request.body or b""
        self.data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        self.method = request.method
        self.headers = request.headers
        self.content_type = content_type
        self.path = urlparse(request.url).path
        self.values: dict[str, Any] = {}


def normalize_request(stock: Any) -> Any:
    def normalize_request(request: Any) -> Any:
        # moto.core.request.normalize_request, for moto.core.responses.parse_parameters.
        if isinstance(request, AWSPreparedRequest) and \
                "Content-Encoding" not in request.headers:
            content_type = request.headers.get("Content-Type", "")
            if isinstance(content_type, bytes):
                content_type = content_type.decode()
            if content_type in ("application/x-amz-json-1.0", "application/x-amz-json-1.1"):
                return _JSONRequest(request, content_type)
        return stock(request)

    return normalize_request


_JSON_TYPES = ("application/x-amz-json-1.0", "application/x-amz-json-1.1")


def _json_environ(request: Any, preserved: str | None) -> dict[str, Any] | None:
    """The WSGI environ moto's Request.from_primitives builds (through werkzeug's
    EnvironBuilder) for a JSON request to `/` without a query; None for any other."""
    parts = urlsplit(request.url)
    body = request.body or b""
    if parts.path != "/" or parts.query or not isinstance(body, (bytes, str)):
        return None
    if isinstance(body, str):
        body = body.encode("utf-8")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method, "SCRIPT_NAME": "", "PATH_INFO": "/",
        "QUERY_STRING": "", "RAW_URI": "/", "REQUEST_URI": "/",
        "SERVER_NAME": parts.hostname or "", "SERVER_PORT": str(parts.port or
                                                              (443 if parts.scheme == "https"
                                                               else 80)),
        "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_HOST": parts.netloc,
        "wsgi.version": (1, 0), "wsgi.url_scheme": parts.scheme, "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr, "wsgi.multithread": False, "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    for name, value in request.headers.items():
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        key = name.upper().replace("-", "_")
        if key in ("CONTENT_ENCODING", "TRANSFER_ENCODING"):
            return None
        environ[key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"] = value
    if environ.get("CONTENT_TYPE") not in _JSON_TYPES:
        return None
    environ["CONTENT_LENGTH"] = str(len(body))
    if preserved is not None:
        environ[preserved] = {}  # only x-amz-meta-* headers are preserved, none here
    return environ


def build_request(stock: Any) -> Any:
    request_class = resolve("moto.core.request:Request")
    preserved = getattr(resolve("moto.core.request"), "PRESERVED_HEADER_NAMES_ENVIRON_KEY",
                        None)

    def normalize_request(request: Any) -> Any:
        # moto.core.request.normalize_request (5.2.4 on), for botocore's request.
        if isinstance(request, AWSPreparedRequest):
            environ = _json_environ(request, preserved)
            if environ is not None:
                built = request_class(environ)
                environ["werkzeug.request"] = built
                return built
        return stock(request)

    return normalize_request


def method_names(stock: Any) -> Any:
    def method_names_from_class(clazz: Any) -> list[str]:
        # moto.core.utils.method_names_from_class, once per class (callers only test `in`).
        names = _methods.get(clazz)
        if names is None:
            names = _methods.setdefault(clazz, stock(clazz))
        return names

    return method_names_from_class
