"""DynamoDB's part of moto's request and answer path (moto.dynamodb.responses, and the
serializer's walk of an AttributeValue), done once where moto repeats it (the speed-ups'
registry, `__init__.py`, applies these, each behind its capability check).

Parsing: moto hands a DynamoDB request's body to botocore's parser, which walks the
operation's shapes to copy it out member by member; what it changes is only binary
values (decoded from base64) and timestamps. A request of an item operation (none has a
timestamp member) with no binary value is read as the JSON it is.

Attribute values: an answer's items are maps of attribute values, each of which the
serializer walks member by member (ten members, each looked up under two spellings, for a
value that holds one). A value of plain types (a string, a number, a set of either, a
boolean, null, a list or map of such values) is already the JSON its shape serializes to:
it is copied out as it is. Anything else (binary, an alias spelling, a None) goes through
moto's serializer."""

from __future__ import annotations

import json
from typing import Any

from botocore.awsrequest import AWSPreparedRequest

from infra.emulator.capabilities import resolve
from infra.emulator.speedups.core import XFORMED

__all__ = ["attribute_values", "parse_parameters"]


# DynamoDB operations whose requests hold no timestamp member: without a binary value
# either, botocore's parser gives back the JSON body as it is.
_PLAIN_OPS = frozenset({
    "GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem",
    "BatchWriteItem", "TransactGetItems", "TransactWriteItems",
})


def _raw_body(request: Any) -> bytes | None:
    """The request's body as sent: botocore's prepared request (moto 5.2.1 to 5.2.3) or
    moto's own Request (5.2.4 on, a werkzeug Request); None for a compressed one."""
    if "Content-Encoding" in request.headers:
        return None
    if isinstance(request, AWSPreparedRequest):
        body = request.body or b""
        return body.encode("utf-8") if isinstance(body, str) else bytes(body)
    get_data = getattr(request, "get_data", None)
    return bytes(get_data()) if get_data is not None else None


def parse_parameters(stock: Any) -> Any:
    def parse_parameters(self: Any, request: Any) -> None:
        # BaseResponse.parse_parameters, for DynamoHandler: the JSON body itself where the
        # parser would only copy it out member by member.
        if self._get_action() in _PLAIN_OPS:
            raw = _raw_body(request)
            if raw is not None and b'"B":' not in raw and b'"BS":' not in raw:
                self.params = json.loads(raw)
                return
        stock(self, request)

    return parse_parameters


class _Stock(Exception):
    """A value the plain copy does not cover: moto's serializer takes it."""


_SCALARS = {"S": str, "N": str, "BOOL": bool, "NULL": bool}


def _plain(value: Any) -> dict[str, Any]:
    """One attribute value as moto's JSON serializer writes it, for the plain types."""
    if type(value) is not dict or len(value) != 1:
        raise _Stock
    ((kind, inner),) = value.items()
    scalar = _SCALARS.get(kind)
    if scalar is not None:
        if type(inner) is not scalar:
            raise _Stock
        return {kind: inner}
    if kind in ("SS", "NS"):
        if type(inner) is not list or any(type(e) is not str or e == "" for e in inner):
            raise _Stock
        return {kind: list(inner)}
    if kind == "L":
        if type(inner) is not list:
            raise _Stock
        return {"L": [_plain(e) for e in inner]}
    if kind == "M":
        if type(inner) is not dict or any(type(k) is not str or not k for k in inner):
            raise _Stock
        return {"M": {k: _plain(v) for k, v in inner.items()}}
    raise _Stock


def attribute_values(stock: Any) -> Any:
    xformed = resolve(XFORMED)

    def _serialize_type_structure(self: Any, serialized: Any, value: Any, shape: Any,
                                  key: str) -> None:
        # BaseJSONSerializer._serialize_type_structure, for DynamoDB's AttributeValue under
        # a key (a map's or a list's member): the value copied, where it is plain.
        picker = self._value_picker
        if key and shape.name == "AttributeValue" and type(picker) is xformed \
                and not picker.response_transformers \
                and self.operation_model.service_model.service_name == "dynamodb":
            try:
                out = _plain(value)
            except _Stock:
                pass
            else:
                self._default_serialize(serialized, out, shape, key)
                return
        stock(self, serialized, value, shape, key)

    return _serialize_type_structure
