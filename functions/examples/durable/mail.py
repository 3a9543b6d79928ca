"""The examples' mail server: every message sent is an RFC 5322 file (`.eml`) in an
outbox folder, named after the idempotency key that sent it, so a step that runs again
finds its message already there and sends nothing twice."""

from __future__ import annotations

import hashlib
import os
import uuid
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from pathlib import Path
from typing import Any

__all__ = ["SENDER", "Outbox"]

SENDER = "Example Shop <no-reply@shop.example>"
KEY_HEADER = "X-Idempotency-Key"
# Headers kept on one line (up to RFC 5322's hard limit), so `grep '^X-Hook:'` finds a
# whole URL; LF line ends, for the same reason.
ONE_LINE_HEADERS = policy.default.clone(max_line_length=998)


class Outbox:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def send(self, to: str, subject: str, body: str, *, key: str,
             **headers: str) -> dict[str, Any]:
        """Send once per `key`: the stored message's summary, the first time as on every
        repeat (the first message wins, even if a repeat would word it differently)."""
        name = hashlib.sha256(key.encode()).hexdigest()[:24] + ".eml"
        path = self.folder / name
        if not path.exists():
            msg = EmailMessage()
            msg["From"] = SENDER
            msg["To"] = to
            msg["Subject"] = subject
            msg["Message-ID"] = f"<{path.stem}@shop.example>"
            msg[KEY_HEADER] = key
            for header, value in headers.items():
                msg["X-" + header.replace("_", "-").title()] = value
            # Plain 8-bit text (not quoted-printable) with LF line ends: an outbox that
            # reads well with cat and grep. Lines over 998 characters need an encoding.
            long_lines = any(len(line) > 900 for line in body.splitlines())
            msg.set_content(body, cte=None if long_lines else "8bit")
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f".{name}.{uuid.uuid4().hex}.tmp"
            tmp.write_bytes(msg.as_bytes(policy=ONE_LINE_HEADERS))
            try:
                os.link(tmp, path)  # creates `path` only if nobody did: first send wins
            except FileExistsError:
                pass
            finally:
                tmp.unlink()
        return _summary(path)

    def messages(self, to: str | None = None) -> list[dict[str, Any]]:
        """Every message sent (to `to`), by file name."""
        if not self.folder.is_dir():
            return []
        found = [_summary(p) for p in sorted(self.folder.glob("*.eml"))]
        return [m for m in found if to is None or m["to"] == to]


def _summary(path: Path) -> dict[str, Any]:
    msg = BytesParser(policy=policy.default).parsebytes(path.read_bytes())
    body = msg.get_body(("plain",))
    # A value folded onto a line of its own keeps the fold's space: strip it.
    headers = {k: str(v).strip() for k, v in msg.items()}
    return {
        "id": headers["Message-ID"],
        "to": headers["To"],
        "subject": headers["Subject"],
        "body": body.get_content() if body is not None else "",
        "key": headers[KEY_HEADER],
        "path": str(path),
        "headers": {k: v for k, v in headers.items() if k.startswith("X-") and k != KEY_HEADER},
    }
