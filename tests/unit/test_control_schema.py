"""The control table's schema has one home, orchestrator/adapters/store/control_keys.py.

Outside `orchestrator/adapters/`, no code spells DynamoDB's attribute encoding (`{"S": ...}`,
`item["sk"]["S"]`, `.get("N")`) or a key prefix (`f"lock#{...}"`, `"secret#hooks"`): services
build keys with the builders of `control_keys.py` and read typed values. The scan below keeps it
so; its own test plants each kind of violation and checks that every one is found. The key
builders are pinned byte for byte: deployed tables hold these items."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.adapters.store import control_keys as c
from orchestrator.adapters.store.codec import is_key

ROOT = Path(__file__).resolve().parents[2]

TYPES = r"(?:S|N|B|BOOL|NULL|L|M|SS|NS|BS)"
PATTERNS = {
    "an attribute value": re.compile(r'\{\s*"' + TYPES + r'"\s*[:,}]'),
    "an attribute read": re.compile(r'\[\s*"' + TYPES + r'"\s*\]'),
    "an attribute get": re.compile(r'\.get\(\s*"' + TYPES + r'"'),
    "a key prefix": re.compile(r'["\'][a-z_-]+#'),
}

# Lines allowed to stay, each with the reason (none today: the status moves' conditions
# live in adapters/store/tables.py).
ALLOWED: set[tuple[str, str]] = set()


def violations(root: Path) -> list[str]:
    """Every line of `root`/orchestrator outside its adapters that spells DynamoDB's
    encoding or a key prefix, as `path:line: what: text`."""
    found = []
    for path in sorted((root / "orchestrator").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("orchestrator/adapters/"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            text = line.strip()
            if (rel, text) in ALLOWED:
                continue
            found.extend(f"{rel}:{n}: {what}: {text}"
                         for what, rx in PATTERNS.items() if rx.search(line))
    return found


def test_no_dynamodb_encoding_or_key_prefix_outside_the_adapters() -> None:
    assert violations(ROOT) == []


def test_each_allowed_line_is_still_there() -> None:
    """An allowance whose line is gone is dropped, not kept for a later violation."""
    for rel, text in ALLOWED:
        lines = {line.strip() for line in (ROOT / rel).read_text().splitlines()}
        assert text in lines, (rel, text)


def test_the_scan_finds_each_kind_of_planted_violation(tmp_path: Path) -> None:
    planted = {
        "orchestrator/services/planted.py": [
            'attrs = {"run_id": {"S": run_id}}',
            'holder = item["holder"]["S"]',
            'paused = item.get("paused", {}).get("BOOL", False)',
            'pk = f"lock#{gid}"',
            'KEY = "secret#hooks"',
            "ok = set(v) <= {\"S\", \"N\"}",
            'items = [i for i in rows if i["pk"]["S"].startswith(\'delivery#github#\')]',
        ],
        # The same lines inside the adapters are their business.
        "orchestrator/adapters/store/planted.py": ['pk = f"lock#{gid}"', 'x = {"S": "a"}'],
        # Code that only looks alike.
        "orchestrator/services/innocent.py": [
            'cond = "#s = :to"', 'key = f"hook:{sha}"', 'S = {"s": 1}', "n = d['N2']",
        ],
    }
    for rel, lines in planted.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
    found = violations(tmp_path)
    assert all(f.startswith("orchestrator/services/planted.py:") for f in found), found
    assert {int(f.split(":")[1]) for f in found} == set(range(1, 8)), found
    kinds = {f.split(": ")[1] for f in found}
    assert kinds == set(PATTERNS), kinds


def test_the_keys_are_the_ones_deployed_tables_hold() -> None:
    assert c.idempotency_key("k-1") == "idem#k-1"
    assert c.delivery_key("github", "d1") == (  # the id's SHA-256
        "delivery#github#8b53639f152c8fc6ef30802fde462ba0be9cf085f7580dc69efd72e002abbb35")
    assert c.event_key("order.paid") == "event#order.paid"
    assert c.event_sk(1.5, "e1") == "000000000001500#e1"
    assert c.event_id_key("order.paid", "e1") == "eventid#order.paid#e1"
    assert c.schedule_key("nightly") == "schedule#nightly"
    assert c.holder_key("g#k") == "lock#g#k"
    assert c.waiting_key("g#k") == "waiting#g#k"
    assert c.waiting_sk(2.0, "r1") == "000000000002000#r1"
    assert c.throttle_key("wf", "k") == "throttle#wf#k"
    assert c.apikey_key("ab12") == "apikey#ab12"
    assert c.hook_key("ab12") == "hook#ab12"
    assert c.HOOK_SECRET == "secret#hooks"
    assert c.children_key("p") == "children#p" and c.child_sk("p-c1") == "p-c1"
    assert c.event_wait_keys("n", "k") == ["evw#n#k", "evw#n#*"]
    assert c.event_wait_keys("n", None) == ["evw#n#", "evw#n#*"]
    assert c.wait_event_keys("n", "k") == ["evw#n#k", "evw#n#"]
    assert c.wait_event_keys("n", "") == ["evw#n#"]
    assert c.wait_event_keys("n", None) == ["evw#n#*"]
    assert c.event_wait_event_sk(1.0, "e1") == "e#000000000001000#e1"
    assert c.event_wait_events_after(1.0) == "e#000000000001000"
    assert c.event_wait_sk("r", "s", 3) == "w#r#s#3"
    assert c.EVENT_WAITS_FROM == "w#" and c.NO_SK == "-"
    assert c.hourly_counts_key("wf") == "counts#wf" and c.hour_sk(493_000) == "h#0000493000"


def test_the_codecs_read_items_as_typed_values() -> None:
    assert c.sk_of({"pk": {"S": "children#p"}, "sk": {"S": "p-c1"}}) == "p-c1"
    event = {"sk": {"S": "e#000000000001000#e1"}, "doc": {"S": '{"id": "e1"}'}}
    wait = {"sk": {"S": "w#r#s#3"}, "doc": {"S": '{"run_id": "r"}'}}
    assert c.event_wait_event(event) == {"id": "e1"} and c.event_wait_event(wait) is None
    assert is_key({"run_id": {"S": "r"}, "created_at": {"N": "1"}}, {"run_id", "created_at"})
    assert not is_key({"run_id": {"S": "r"}, "x": {"S": "1"}}, {"run_id"})
    assert not is_key({"run_id": {"BOOL": True}}, {"run_id"})
    assert not is_key(["run_id"], {"run_id"})
