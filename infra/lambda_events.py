"""The events and the context AWS Lambda hands the handlers, built locally: what the
emulated Lambda mode (and the tests) invoke `orchestrator.lambda_handlers` with.

- `http_event`: an API Gateway HTTP API request (payload format 2.0), or a Lambda Function
  URL request (the same format, with the URL's own request context);
- `sqs_event`: a batch of messages as an SQS event source mapping delivers them;
- `Context`: the invocation's context, counting down from its timeout."""

from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

__all__ = ["Context", "http_event", "sqs_event"]


@dataclass
class Context:
    """`context` of one invocation: `get_remaining_time_in_millis` counts down from
    `timeout` seconds after it was made."""

    timeout: float = 60.0
    function_name: str = "local"
    memory_limit_in_mb: int = 512
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.started + self.timeout - time.monotonic()) * 1000))


def http_event(
    method: str,
    path: str,
    *,
    query: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
    base64_body: bool = False,
    function_url: bool = False,
    source_ip: str = "127.0.0.1",
) -> dict[str, Any]:
    """One request as payload format 2.0. Header names are lower-cased as API Gateway
    and Function URLs send them; `base64_body` sends the body base64-encoded (as both
    do for binary media types), otherwise as text."""
    now = time.time()
    hdrs = {k.lower(): v for k, v in (headers or {}).items()}
    domain = "abc123.lambda-url.us-east-1.on.aws" if function_url else \
        "abc123.execute-api.us-east-1.amazonaws.com"
    hdrs.setdefault("host", domain)
    context: dict[str, Any] = {
        "accountId": "anonymous" if function_url else "123456789012",
        "apiId": "abc123",
        "domainName": domain,
        "domainPrefix": "abc123",
        "http": {"method": method.upper(), "path": path, "protocol": "HTTP/1.1",
                 "sourceIp": source_ip, "userAgent": hdrs.get("user-agent", "local")},
        "requestId": str(uuid.uuid4()),
        "routeKey": "$default",
        "stage": "$default",
        "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
        "timeEpoch": int(now * 1000),
    }
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": urlencode(query or {}),
        "headers": hdrs,
        "requestContext": context,
        "isBase64Encoded": base64_body,
    }
    if query:
        event["queryStringParameters"] = dict(query)
    if body:
        event["body"] = base64.b64encode(body).decode() if base64_body else body.decode()
    return event


def sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """Messages as `ReceiveMessage` returned them, as an event source mapping's batch."""
    region = queue_arn.split(":")[3] if queue_arn.count(":") >= 5 else "us-east-1"
    records = []
    for m in messages:
        attrs = dict(m.get("Attributes", {}))
        attrs.setdefault("ApproximateReceiveCount", "1")
        records.append({
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": attrs,
            "messageAttributes": m.get("MessageAttributes", {}),
            "md5OfBody": m.get("MD5OfBody", ""),
            "eventSource": "aws:sqs",
            "eventSourceARN": queue_arn,
            "awsRegion": region,
        })
    return {"Records": records}
