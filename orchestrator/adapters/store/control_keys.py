"""The control table's schema: every item around runs that is neither a run nor a step.

This module and the store's control parts are the only code that spells the table's keys
(the builders below, one per item kind) or reads its attributes (the codecs below, and
the named reads of `control.Control` and of the parts built on it). Services pass keys
made here and get typed values back; a test
(tests/unit/test_control_schema.py) keeps DynamoDB's encoding out of the rest of
`orchestrator/`. Deployed tables hold these items: the strings never change.

One table, one item kind per key prefix, each changed only by conditional writes:

| pk                          | sk                      | what                                |
|-----------------------------|-------------------------|-------------------------------------|
| `idem#<key>`                | `-`                     | an Idempotency-Key and its run      |
| `delivery#<hook>#<sha256>`  | `-`                     | a webhook delivery id already taken |
| `event#<name>`              | `<ms>#<id>`             | an event, kept for its retention    |
| `eventid#<name>#<id>`       | `-`                     | an event id already taken           |
| `evw#<name>#<subject>`      | `e#<ms>#<id>`           | an event, where waits look for it   |
| `evw#<name>#<subject>`      | `w#<run>#<scope>#<pos>` | a durable run waiting for an event  |
| `schedule#<workflow>`       | `-`                     | a schedule's cursor and pause flag  |
| `lock#<group>#<key>`        | `-`                     | the runs holding a concurrency limit |
| `waiting#<group>#<key>`     | `<ms>#<run id>`         | runs queued (as before limits of N) |
| `queue#<n>#<line>#<turns>`  | `<ms>#<run id>`         | a limit's waiting runs of one key  |
| `turns#<line>`              | `k#<turns>`             | a waiting key's round (its turns)  |
| `turns#<line>`              | `r#<round>#<turns>`     | the same, in turn order             |
| `throttle#<workflow>#<key>` | `-`                     | a throttle budget (its next slot)   |
| `apikey#<sha256>`           | `-`                     | an API key, stored hashed           |
| `hook#<sha256>`             | `-`                     | a hook, by token hash (`used`: spent) |
| `secret#hooks`              | `-`                     | the key hook tokens are made with   |
| `children#<parent run>`     | `<child run id>`        | a child run of a run                |
| `approval#<run>`            | `<step>`                | an approval gate and its answer     |
| `approvals#pending`         | `<ms>#<run>#<step>`     | the inbox: one item per open gate   |
| `approvallink#<sha256>`     | `-`                     | a gate's single-use answer link     |
| `state#<entity>`            | `<key>`                 | a durable state cell (`ctx.state`)  |
| `mutex#<key>`               | `-`                     | a lock's holder (`ctx.lock`, `lock:`) |
| `mutexq#<key>`              | `<ms>#<holder>`         | what waits for a lock, in arrival order |
| `mutexheld#<run>`           | `<key>`                 | a lock a run holds (released at its end) |
| `debounce#<workflow>#<key>` | `-`                     | a debounced burst: its queued run   |
| `batch#<workflow>#<key>`    | `-`                     | an open batch of events: its run    |
| `batched#<workflow>#<id>`   | `-`                     | an event a batch took: its run      |
| `fanout#<run>#<step>`       | `<index>`               | a fan_out step's item: its outcome  |
| `scripts`                   | `<name>`                | a script workflow stored by the API |
| `versions#<backend>`        | `-`                     | a backend's current version         |
| `versions#<backend>`        | `v#<label>`             | a live version of a backend's code  |
| `sweep#wake`                | `<shard>`               | a wake shard's sweeper and cursors  |
| `sweep#full`                | `-`                     | when the last full sweep ran        |
| `blimit#<backend>`          | `-`                     | a backend's calls in flight, next start |
| `blimitq#<backend>`         | `<ms>#<holder>`         | steps waiting for a backend's slot  |
| `procs`                     | `<kind>#<process id>`   | a process's heartbeat (expires)     |
| `counts`                    | `<workflow>`            | a workflow's counters (`/metrics`)  |
| `counts#<workflow>`         | `h#<epoch hour>`        | the same, added in one hour (expires) |

`<ms>` is a time as 15 zero-padded digits of milliseconds (`ms_key`), so a partition
sorts by time. An `evw#` subject is the event's key, `` (none) or `*` (any): see
services/durable/event_waits.py for which partitions an event and a wait write.

Values that are documents (a delivery's run ids, an event payload) are JSON strings in
`doc`; attributes that conditions test are plain attributes (`holder`, `run_id`, `tat`,
`spec`, `next_fire`, `paused`, `owner`, ...). Items with `expires_at` expire by TTL, and
the reads of control_table.py ignore an expired item that DynamoDB has not deleted yet."""

from __future__ import annotations

import hashlib
import json
from typing import Any, NewType

__all__ = [
    "ANY_SUBJECT",
    "APPROVALS_PENDING",
    "EVENT_WAITS_FROM",
    "HOOK_SECRET",
    "NO_SK",
    "PROCESSES",
    "ROUNDS_FROM",
    "SCRIPTS",
    "STACK_COUNTS",
    "SWEEP_FULL",
    "SWEEP_WAKE",
    "Item",
    "Pk",
    "Sk",
    "apikey_key",
    "approval_key",
    "approval_link_key",
    "approval_sk",
    "backend_limit_key",
    "backend_line_key",
    "child_sk",
    "children_key",
    "counts_sk",
    "delivery_key",
    "doc_of",
    "event_id_key",
    "event_key",
    "event_sk",
    "event_wait_event",
    "event_wait_event_sk",
    "event_wait_events_after",
    "event_wait_keys",
    "event_wait_sk",
    "fanout_item_sk",
    "fanout_key",
    "holder_key",
    "hook_key",
    "hook_used",
    "hour_of",
    "hour_sk",
    "hourly_counts_key",
    "idempotency_key",
    "inbox_sk",
    "lock_item_key",
    "lock_line_key",
    "lock_waiter_sk",
    "locks_held_key",
    "login_key",
    "ms_key",
    "process_sk",
    "queue_key",
    "round_sk",
    "schedule_key",
    "script_sk",
    "sk_of",
    "state_key",
    "state_sk",
    "throttle_key",
    "turn_sk",
    "turns_key",
    "version_sk",
    "versions_key",
    "wait_event_keys",
    "waiting_key",
    "waiting_sk",
]

Item = dict[str, Any]

# A control item's partition and sort keys: made only by the builders below, so a key
# spelled anywhere else does not type-check.
Pk = NewType("Pk", str)
Sk = NewType("Sk", str)

# The sort key of an item alone in its partition.
NO_SK = Sk("-")


def ms_key(t: float) -> str:
    """A time as a sort key: 15-digit zero-padded milliseconds (sorts as it should)."""
    return f"{int(t * 1000):015d}"


# ---- keys: one builder per item kind ---------------------------------------------------


def idempotency_key(key: str) -> Pk:
    """An Idempotency-Key of `POST /runs`."""
    return Pk(f"idem#{key}")


def delivery_key(webhook: str, delivery_id: str) -> Pk:
    """A webhook's delivery id (kept as its SHA-256: ids are the sender's, of any size)."""
    return Pk(f"delivery#{webhook}#{hashlib.sha256(delivery_id.encode()).hexdigest()}")


def event_key(name: str) -> Pk:
    """The events of a name (`event_sk`: by arrival)."""
    return Pk(f"event#{name}")


def event_sk(received_at: float, event_id: str) -> Sk:
    return Sk(f"{ms_key(received_at)}#{event_id}")


def event_id_key(name: str, event_id: str) -> Pk:
    """An event id of a name, claimed by its first delivery."""
    return Pk(f"eventid#{name}#{event_id}")


def schedule_key(workflow: str) -> Pk:
    return Pk(f"schedule#{workflow}")


def holder_key(group_id: str) -> Pk:
    """The run holding a concurrency group (`Gate.group_id`: `<group>#<key>`); its
    stored prefix `lock#` predates the one name per thing (a user's lock is `mutex#`)."""
    return Pk(f"lock#{group_id}")


def queue_key(line_id: str, turns: str) -> Pk:
    """The runs waiting for a concurrency limit (`Limit.line_id`) whose turns key is
    `turns`, by place (`waiting_sk` of their effective time); the line's length leads,
    so no two (line, turns) pairs spell one key."""
    return Pk(f"queue#{len(line_id)}#{line_id}#{turns}")


def turns_key(line_id: str) -> Pk:
    """A concurrency limit's turns: `turn_sk` (a key's round), `round_sk` (turn order)."""
    return Pk(f"turns#{line_id}")


def turn_sk(turns: str) -> Sk:
    return Sk(f"k#{turns}")


ROUNDS_FROM = Sk("r#")


def round_sk(round_: int, turns: str) -> Sk:
    return Sk(f"r#{round_:012d}#{turns}")


def waiting_key(group_id: str) -> Pk:
    """The runs waiting for a concurrency group (`waiting_sk`: in arrival order)."""
    return Pk(f"waiting#{group_id}")


def waiting_sk(created_at: float, run_id: str) -> Sk:
    """A waiting run's place: arrival order, ties broken by run id."""
    return Sk(f"{ms_key(created_at)}#{run_id}")


def throttle_key(workflow: str, key: str) -> Pk:
    return Pk(f"throttle#{workflow}#{key}")


def apikey_key(sha256: str) -> Pk:
    """An API key, by the hex SHA-256 of the key."""
    return Pk(f"apikey#{sha256}")


def login_key(sha256: str) -> Pk:
    """A dashboard's one-time login link, by the hex SHA-256 of its token."""
    return Pk(f"login#{sha256}")


def hook_key(sha256: str) -> Pk:
    """A hook, by the hex SHA-256 of its token."""
    return Pk(f"hook#{sha256}")


# The key hook tokens are made with, when ORCH_HOOK_SECRET does not give one.
HOOK_SECRET = Pk("secret#hooks")


# The inbox's one partition: an item per approval still open, oldest first.
APPROVALS_PENDING = Pk("approvals#pending")


def approval_key(run_id: str) -> Pk:
    """The partition of a run's approval gates."""
    return Pk(f"approval#{run_id}")


def approval_sk(step: str) -> Sk:
    return Sk(step)


def inbox_sk(created_at: float, run_id: str, step: str) -> Sk:
    """An open approval's place in the inbox: by when it opened."""
    return Sk(f"{ms_key(created_at)}#{run_id}#{step}")


def approval_link_key(sha256: str) -> Pk:
    return Pk(f"approvallink#{sha256}")


def fanout_key(run_id: str, step: str) -> Pk:
    """A fan_out step's items' outcomes."""
    return Pk(f"fanout#{run_id}#{step}")


def fanout_item_sk(index: int) -> Sk:
    return Sk(f"{index:06d}")


def lock_item_key(key: str) -> Pk:
    """A lock's item: who holds it."""
    return Pk(f"mutex#{key}")


def lock_line_key(key: str) -> Pk:
    """A lock's waiting line."""
    return Pk(f"mutexq#{key}")


def lock_waiter_sk(arrived: float, holder: str) -> Sk:
    return Sk(f"{ms_key(arrived)}#{holder}")


def locks_held_key(run_id: str) -> Pk:
    """The locks a run holds."""
    return Pk(f"mutexheld#{run_id}")


def state_key(entity: str) -> Pk:
    """The partition of an entity's state cells."""
    return Pk(f"state#{entity}")


def state_sk(key: str) -> Sk:
    return Sk(key)


def versions_key(backend: str) -> Pk:
    """The partition of a backend's versions: its head (`NO_SK`, the current one) and
    one item per live version (`version_sk`)."""
    return Pk(f"versions#{backend}")


def version_sk(label: str) -> Sk:
    return Sk(f"v#{label}")


# The partition of the script workflows stored through the API (`script_sk`: one each).
SCRIPTS = Pk("scripts")


def script_sk(name: str) -> Sk:
    return Sk(name)


def children_key(parent: str) -> Pk:
    """The child runs of a run (`child_sk`: one item each)."""
    return Pk(f"children#{parent}")


def child_sk(child: str) -> Sk:
    return Sk(child)


# An event wait partition's subject that matches any subject.
ANY_SUBJECT = "*"


def _event_wait_key(name: str, subject: str) -> Pk:
    return Pk(f"evw#{name}#{subject}")


def event_wait_keys(name: str, key: str | None) -> list[Pk]:
    """Where an event is written for waits to find it: under its key (`` without one)
    and under `*`."""
    return [_event_wait_key(name, key or ""), _event_wait_key(name, ANY_SUBJECT)]


def wait_event_keys(name: str, subject: str | None) -> list[Pk]:
    """Where a wait registers and looks: under its subject and `` (an event without a
    key matches every wait), or under `*` for a wait for any subject."""
    if subject is None:
        return [_event_wait_key(name, ANY_SUBJECT)]
    return list(dict.fromkeys([_event_wait_key(name, subject), _event_wait_key(name, "")]))


def event_wait_event_sk(received_at: float, event_id: str) -> Sk:
    """An event's sort key in an event wait partition (`e#`: before every wait)."""
    return Sk(f"e#{ms_key(received_at)}#{event_id}")


def event_wait_events_after(t: float) -> Sk:
    """A query bound: the events of an event wait partition received from `t` on."""
    return Sk(f"e#{ms_key(t)}")


def event_wait_sk(run_id: str, scope: str, pos: Any) -> Sk:
    """A waiting run's sort key in an event wait partition (`w#`: after every event)."""
    return Sk(f"w#{run_id}#{scope}#{pos}")


# A query bound: every waiting run of an event wait partition sorts after it.
EVENT_WAITS_FROM = Sk("w#")

# The wake shards' items (`<shard>`: one each) and the full sweep's turn.
SWEEP_WAKE = Pk("sweep#wake")
SWEEP_FULL = Pk("sweep#full")


# ---- codecs: what an item holds, as typed values ---------------------------------------


def doc_of(item: Item) -> Any:
    """An item's JSON document (None: it has none, or there is no item)."""
    raw = item.get("doc", {}).get("S")
    return None if raw is None else json.loads(raw)


def hook_used(item: Item) -> str | None:
    """The digest of the request that spent a hook item (its `used`), None if unspent."""
    used = item.get("used", {}).get("S")
    return None if used is None else str(used)


def sk_of(item: Item) -> Sk:
    """An item's sort key (a page of a query goes on after the last one's)."""
    return Sk(str(item["sk"]["S"]))


def event_wait_event(item: Item) -> dict[str, Any] | None:
    """The event an event wait partition's item holds (None: it is a waiting run)."""
    return doc_of(item) if sk_of(item).startswith("e#") else None


def backend_limit_key(backend: str) -> Pk:
    """A backend's limits: its calls in flight and its next start (services/coordination/
    backend_limits.py)."""
    return Pk(f"blimit#{backend}")


def backend_line_key(backend: str) -> Pk:
    """The steps waiting for a free slot of a backend (sorted by arrival, as a lock's
    line: `lock_waiter_sk`)."""
    return Pk(f"blimitq#{backend}")


# The processes' heartbeats (`process_sk`: one item each, expiring a few minutes after
# its last beat), in one partition: one query lists every process of the stack.
PROCESSES = Pk("procs")


def process_sk(kind: str, process_id: str) -> Sk:
    return Sk(f"{kind}#{process_id}")


# The stack's counters for `GET /metrics`, one item a workflow (`counts_sk`), added to
# by every process (`ADD`): one query reads the whole stack's.
STACK_COUNTS = Pk("counts")


def counts_sk(workflow: str) -> Sk:
    return Sk(workflow)


def hourly_counts_key(workflow: str) -> Pk:
    """A workflow's counters hour by hour (`hour_sk`: one item an hour, expiring), for
    its page's charts: one query reads a week of them."""
    return Pk(f"counts#{workflow}")


def hour_sk(hour: int) -> Sk:
    """An hour as a sort key: hours since the epoch (UTC), 10 zero-padded digits."""
    return Sk(f"h#{hour:010d}")


def hour_of(item: Item) -> int:
    """The hour (since the epoch) of an hourly counts item."""
    return int(sk_of(item)[2:])
