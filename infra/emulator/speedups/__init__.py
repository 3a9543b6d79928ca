"""Work moto repeats on every request, done once, without changing an answer: the
registry of the speed-ups, and `install()`.

Each module beside this one replaces a few of moto's functions, and mirrors the part of
moto it patches:

- `dynamodb_expressions.py` (moto.dynamodb.parsing, .comparisons): update-parse,
  update-validate, condition-lex, tree-walk, condition-names;
- `dynamodb_query.py` (moto.dynamodb.models: Query): query-copy, index-range, with
  `dynamodb_range.py`, index-range's cut of a partition to its sort-key range;
- `dynamodb_items.py` (moto.dynamodb.models.dynamo_type): item-size, type-size, projection;
- `dynamodb_transact.py` (moto.dynamodb.models: TransactWriteItems): transact-undo;
- `dynamodb_wire.py` (moto.dynamodb.responses, the serializer's AttributeValue):
  json-params, answer-values;
- `core.py` (moto.core: requests, serializer, response classes): answer-spellings,
  json-request, method-names;
- `sqs.py` (moto.sqs.models): sqs-send, sqs-retention;
- `fingerprints.py`: the fingerprints of moto's code each was read against, per release.

Every speed-up is a capability (infra/emulator/capabilities.py): the moto functions it
replaces or reads, each with the fingerprints of its code in the moto releases it was
checked against (5.2.1 to 5.2.5). `install()` applies each speed-up whose check passes and
switches off, with one log line, each whose check fails: a moto release that moves or
changes what a speed-up reproduces costs that speed-up, never the emulator.
ORCH_MOTO_STOCK=1 in the environment switches them all off (to compare, or to rule them
out); ORCH_MOTO_SPEEDUPS_OFF names some to switch off (comma-separated, as
`speedup:NAME` or `NAME`)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infra.emulator.capabilities import Capability, Reach, check, forget, record, resolve
from infra.emulator.speedups import (
    core,
    dynamodb_expressions,
    dynamodb_items,
    dynamodb_query,
    dynamodb_transact,
    dynamodb_wire,
    sqs,
)
from infra.emulator.speedups.fingerprints import KNOWN

__all__ = ["CAPABILITIES", "CHECKED_MOTO", "SPEEDUPS", "Patch", "Speedup", "active",
           "install", "installed", "uninstall"]

# The moto releases whose code every fingerprint below was read from and tested on.
CHECKED_MOTO = ("5.2.1", "5.2.2", "5.2.3", "5.2.4", "5.2.5")
STOCK_VARIABLE = "ORCH_MOTO_STOCK"
OFF_VARIABLE = "ORCH_MOTO_SPEEDUPS_OFF"

_lock = threading.Lock()
_state: dict[str, Any] = {"installed": False, "active": ()}


def installed() -> bool:
    """Whether install() ran and left moto patched (some speed-ups may be off)."""
    return bool(_state["installed"])


def active() -> tuple[str, ...]:
    """The names of the speed-ups applied now."""
    return tuple(_state["active"])


@dataclass(frozen=True)
class Patch:
    """One attribute `install` replaces: `owner` (`module` or `module:Class`), `attr`, and
    `build(stock) -> replacement`, given what moto had there."""

    owner: str
    attr: str
    build: Callable[[Any], Any]

    @property
    def path(self) -> str:
        sep = "." if ":" in self.owner else ":"
        return f"{self.owner}{sep}{self.attr}"


@dataclass(frozen=True)
class Speedup:
    capability: Capability
    patches: tuple[Patch, ...]


_DDB = "moto.dynamodb"
_VALIDATORS = dynamodb_expressions.VALIDATORS
_PARSER = dynamodb_expressions.PARSER
_TABLE = f"{_DDB}.models.table:Table"
_RESPONSES = "moto.core.responses"
_SQS = "moto.sqs.models"


def _speedup(name: str, what: str, patches: list[Patch], reads: tuple[str, ...] = ()) -> Speedup:
    """A speed-up whose every patched attribute, and every moto attribute it `reads`, is
    checked against the fingerprints of the releases read (fingerprints.py)."""
    paths = [p.path for p in patches] + list(reads)
    reaches = tuple(Reach(path, KNOWN.get(path, frozenset())) for path in paths)
    return Speedup(Capability(f"speedup:{name}", what, reaches), tuple(patches))


SPEEDUPS: tuple[Speedup, ...] = (
    _speedup("update-parse", "an UpdateExpression parsed once per text", [
        Patch(f"{_DDB}.parsing.expressions:UpdateExpressionParser", "make",
              dynamodb_expressions.update_parse)]),
    _speedup("update-validate", "the pure validators run once per expression, names, keys", [
        Patch(f"{_VALIDATORS}:Validator", "__init__", dynamodb_expressions.validator_init),
        Patch(f"{_VALIDATORS}:Validator", "validate", dynamodb_expressions.validate)],
        reads=(f"{_VALIDATORS}:UpdateExpressionValidator.get_ast_processors",
               f"{_VALIDATORS}:ActionCountValidator",
               f"{_VALIDATORS}:OverlappingPathsValidator",
               f"{_VALIDATORS}:UpdateHashRangeKeyValidator")),
    _speedup("condition-lex", "a ConditionExpression tokenized once per text", [
        Patch(_PARSER, "_lex_condition_expression", dynamodb_expressions.condition_lex)],
        reads=(f"{_PARSER}._lex_one_node",)),
    _speedup("tree-walk", "the node types a validator handles looked up once per walk", [
        Patch(f"{_DDB}.parsing.ast_nodes:DepthFirstTraverser", "traverse_node_recursively",
              dynamodb_expressions.tree_walk)],
        reads=(f"{_DDB}.parsing.ast_nodes:Node",)),
    _speedup("condition-names", "the names a condition uses listed once per text", [
        Patch(f"{_DDB}.responses", "create_condition_expression_parser",
              dynamodb_expressions.condition_names)],
        reads=(f"{_PARSER}.parse",)),
    # Before index-range: it reads Table.query as moto has it.
    _speedup("query-copy", "a query of a table copies nothing, and sizes each item once", [
        Patch(f"{_DDB}.models:DynamoDBBackend", "query", dynamodb_query.backend_query),
        Patch(f"{_DDB}.models.table", "copy", dynamodb_query.table_copy),
        Patch(f"{_DDB}.models.dynamo_type:Item", "size", dynamodb_query.item_size)],
        reads=dynamodb_query.READS),
    _speedup("index-range", "a query reads its key range, not the whole table", [
        Patch(_TABLE, "all_items", dynamodb_query.table_all_items),
        Patch(_TABLE, "query", dynamodb_query.table_query)],
        reads=(dynamodb_query.PAGE_LIMIT, *dynamodb_items.READS)),
    _speedup("projection", "an item converted once per projection", [
        Patch(f"{_DDB}.models.dynamo_type:Item", "project", dynamodb_items.project)],
        reads=dynamodb_items.PROJECT_READS),
    _speedup("answer-spellings", "the serializer's member spellings memoized", [
        Patch("moto.core.serialize:AttributePicker", "get_possible_keys",
              core.get_possible_keys("moto.core.serialize:AttributePicker")),
        Patch("moto.core.serialize:XFormedAttributePicker", "get_possible_keys",
              core.get_possible_keys("moto.core.serialize:XFormedAttributePicker")),
        Patch("moto.core.serialize:ResponseSerializer", "get_value", core.get_value)],
        reads=("moto.core.utils:get_service_model",)),
    _speedup("answer-values", "an answer's plain attribute values copied as they are", [
        Patch("moto.core.serialize:BaseJSONSerializer", "_serialize_type_structure",
              dynamodb_wire.attribute_values)],
        reads=("moto.core.serialize:ResponseSerializer._serialize_type_structure",
               "moto.core.serialize:ResponseSerializer._serialize_structure_member",
               "moto.core.serialize:ResponseSerializer._serialize",
               "moto.core.serialize:ResponseSerializer._default_serialize",
               "moto.core.serialize:ResponseSerializer.get_serialized_name",
               # the whole class: how it writes maps, lists and strings (5.2.4 added
               # a string method of its own)
               "moto.core.serialize:BaseJSONSerializer")),
    _speedup("item-size", "an item's 400 KB check made with a running total", [
        Patch(f"{_DDB}.models.dynamo_type:Item", "__init__", dynamodb_items.item_init)],
        reads=dynamodb_items.READS),
    _speedup("type-size", "a value sized with its type read once", [
        Patch(f"{_DDB}.models.dynamo_type:DynamoType", "size", dynamodb_items.type_size)],
        reads=dynamodb_items.SIZE_READS),
    _speedup("json-request", "a JSON request handed to the parser as its body", [
        Patch(_RESPONSES, "normalize_request", core.normalize_request)]),
    # The same request, on a moto that makes its Request once, before the handler (5.2.4).
    _speedup("json-request", "a JSON request's environ written out, not built", [
        Patch("moto.core.request", "normalize_request", core.build_request)],
        reads=("moto.core.request:Request.from_primitives", "moto.core.request:Request")),
    _speedup("json-params", "an item operation's body read as the JSON it is", [
        Patch(f"{_DDB}.responses:DynamoHandler", "parse_parameters",
              dynamodb_wire.parse_parameters)]),
    _speedup("method-names", "a response class's methods listed once", [
        Patch(_RESPONSES, "method_names_from_class", core.method_names)]),
    _speedup("transact-undo", "a transaction keeps the items it touches, not whole tables", [
        Patch(f"{_DDB}.models:DynamoDBBackend", "transact_write_items",
              dynamodb_transact.transact_write_items)],
        reads=dynamodb_transact.READS),
    _speedup("sqs-send", "a send reads one attribute of its queue, not all", [
        Patch(f"{_SQS}:SQSBackend", "send_message", sqs.send_message),
        Patch(f"{_SQS}:Queue", "attributes", sqs.attributes)]),
    _speedup("sqs-retention", "a receive reads the retention period, not every attribute", [
        Patch(f"{_SQS}:SQSBackend", "is_message_valid_based_on_retention_period",
              sqs.retained)]),
)
CAPABILITIES: tuple[Capability, ...] = tuple(s.capability for s in SPEEDUPS)
# What install() replaced: (owner, attribute, whether the owner had it itself, what it was).
_applied: list[tuple[Any, str, bool, Any]] = []


def _switched_off(environ: dict[str, str] | os._Environ[str]) -> set[str]:
    names = {n.strip() for n in environ.get(OFF_VARIABLE, "").split(",") if n.strip()}
    return {n if n.startswith("speedup:") else f"speedup:{n}" for n in names}


def _lookups() -> None:
    """The moto objects the replacements use (each is among their speed-ups' reads); one
    that is missing is left out: its speed-up's check fails on the same path, and it is
    not applied."""
    dynamodb_expressions.bind()
    dynamodb_query.bind()
    dynamodb_items.bind()
    try:
        dynamodb_transact.bind()
    except LookupError:
        pass


def _apply(speedup: Speedup) -> None:
    """Replace every attribute of one speed-up (all resolved before any is replaced)."""
    targets = []
    for patch in speedup.patches:
        owner = resolve(patch.owner)
        own = patch.attr in vars(owner)
        # The owner's own entry (a classmethod or a property as such), else inherited.
        stock = vars(owner)[patch.attr] if own else getattr(owner, patch.attr)
        targets.append((owner, patch.attr, own, stock, patch.build(stock)))
    for owner, attr, own, stock, replacement in targets:
        _applied.append((owner, attr, own, stock))
        setattr(owner, attr, replacement)


def _variants() -> dict[str, list[Speedup]]:
    """The speed-ups by name: a name may have one variant per shape of moto's code."""
    out: dict[str, list[Speedup]] = {}
    for speedup in SPEEDUPS:
        out.setdefault(speedup.capability.name, []).append(speedup)
    return out


def _try(variants: list[Speedup]) -> str | None:
    """Apply the first variant whose check passes; None, or why none could be."""
    reasons = []
    for speedup in variants:
        reason = check(speedup.capability)
        if reason is None:
            try:
                _apply(speedup)
                return None
            except (LookupError, AttributeError, TypeError) as exc:
                reason = f"could not be applied: {exc}"
        reasons.append(reason)
    return "; nor: ".join(reasons)


def install() -> bool:
    """Apply every speed-up whose capability check passes (idempotent); record a verdict
    for each (infra.emulator.capabilities.report()). False if none applies (ORCH_MOTO_STOCK=1, or
    none of moto's code is as checked): moto then runs as shipped, only slower."""
    with _lock:
        if _state["installed"]:
            return bool(_state["active"])
        stock_all = bool(os.environ.get(STOCK_VARIABLE))
        off = _switched_off(os.environ)
        _lookups()
        applied = []
        for name, variants in _variants().items():
            if stock_all:
                reason: str | None = f"{STOCK_VARIABLE}=1"
            elif name in off:
                reason = f"{OFF_VARIABLE} names it"
            else:
                reason = _try(variants)
            record(variants[0].capability, reason)
            if reason is None:
                applied.append(name.removeprefix("speedup:"))
        _state["installed"] = True
        _state["active"] = tuple(applied)
        return bool(applied)


def uninstall() -> None:
    """Put moto back as shipped (for comparisons: tests, benchmarks' before)."""
    with _lock:
        if not _state["installed"]:
            return
        while _applied:
            owner, attr, own, stock = _applied.pop()
            if own:
                setattr(owner, attr, stock)
            else:
                delattr(owner, attr)
        for module in (dynamodb_expressions, dynamodb_query, dynamodb_items, core):
            module.clear()
        forget("speedup:")
        _state["installed"] = False
        _state["active"] = ()
