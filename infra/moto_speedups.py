"""Work moto's DynamoDB repeats on every request, done once, without changing an answer.

Updates: moto parses an UpdateExpression into an AST twice per request (in the response
handler and again in the backend), deep-copies the AST before validating it, and runs
three validators that depend only on the expression, its attribute names and the table's
keys (clause counts, overlapping paths, key attributes updated). The orchestrator sends a
few dozen distinct expressions, millions of times: the parse is memoized by expression
text, the copy is a pickle round trip of the memoized tree, and those three validators run
once per (expression, names, table keys). A ConditionExpression's tokens are memoized by
its text the same way, and the tree walk looks up which node types a validator handles
once per walk instead of at every node. Everything that depends on the values or the item
(value resolution, functions, type checks, the write itself) still runs on every request,
so every answer and every error stays moto's own.

Index queries: moto's Query on an index sorts every item of the table, then sizes and
sorts every item under the partition key before it applies the sort-key condition, so a
query of a narrow range costs as much as reading the whole partition (the orchestrator's
wake index keeps finished rows: every sweep paid for all of them). DynamoDB reads only the
key range; the emulator hands moto's query only the items from the range's start on (in
the query's direction): those before it moto steps over without any effect, so the items,
order, pages and counts are the same. A query of the table by partition key gets that
partition's items (moto keeps just those, and sorts them itself) instead of the whole
table, sorted.

Projections: moto projects an item by converting the whole item to plain JSON once per
attribute named in the ProjectionExpression (the sweeper's and a finish's read of a run's
step states names 25): the item is converted once per projection, and each attribute is
looked up in that one conversion (the conversion is pure, and the lookups only copy out
of it).

Conditions: before it applies a write, moto's response handler parses the
ConditionExpression once only to list the names and values it uses (to refuse unused
ones), then the backend parses it again to evaluate it. That first parse is memoized by
(text, names, and the placeholders and types of the values): what it lists, and whether it
succeeds, depend on nothing else. A parse that fails is never memoized.

Transactions: moto backs up every table a TransactWriteItems names as a deep copy of the
whole table; speedups_transact.py keeps only the items the transaction touches.

The request path (answers' spellings, request parsing, method lists) is in
speedups_wire.py, SQS in speedups_sqs.py.

Every speed-up is a capability (infra/capabilities.py): the moto functions it replaces or
reads, each with the fingerprints of its code in the moto releases it was checked against
(5.2.1 to 5.2.5). `install()` applies each speed-up whose check passes and switches off,
with one log line, each whose check fails: a moto release that moves or changes what a
speed-up reproduces costs that speed-up, never the emulator. ORCH_MOTO_STOCK=1 in the
environment switches them all off (to compare, or to rule them out); ORCH_MOTO_SPEEDUPS_OFF
names some to switch off (comma-separated, as `speedup:NAME` or `NAME`)."""

from __future__ import annotations

import copy
import os
import pickle
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infra import speedups_items, speedups_query, speedups_sqs, speedups_transact, speedups_wire
from infra.capabilities import Capability, Reach, check, forget, record, resolve

__all__ = ["CAPABILITIES", "CHECKED_MOTO", "SPEEDUPS", "Patch", "Speedup", "active",
           "install", "installed", "uninstall"]

# The moto releases whose code every fingerprint below was read from and tested on.
CHECKED_MOTO = ("5.2.1", "5.2.2", "5.2.3", "5.2.4", "5.2.5")
CACHE_SIZE = 512
STOCK_VARIABLE = "ORCH_MOTO_STOCK"
OFF_VARIABLE = "ORCH_MOTO_SPEEDUPS_OFF"

_lock = threading.Lock()
_trees: OrderedDict[str, tuple[Any, bytes]] = OrderedDict()  # expression -> (tree, pickled)
_pickled: dict[int, bytes] = {}  # id(tree) -> its pickle, for trees held in _trees
_tokens: OrderedDict[str, tuple[Any, ...]] = OrderedDict()  # condition -> its tokens
_passed: set[tuple[int, tuple[tuple[str, str], ...], tuple[str, ...]]] = set()
_state: dict[str, Any] = {"installed": False, "active": ()}
_stock: dict[str, Any] = {}
# moto's objects the replacements use, looked up when they are installed.
_refs: dict[str, Any] = {}
# Validators that read nothing but the tree, the attribute names and the table's keys.
_PURE: list[type] = []
# The query running on this thread: (table, sort-key attribute, a test for the values
# before its range, None) for an index; (table, None, partition key, a cut of its items
# or None) for the table (speedups_query.partition_trim).
_range = threading.local()



def installed() -> bool:
    """Whether install() ran and left moto patched (some speed-ups may be off)."""
    return bool(_state["installed"])


def active() -> tuple[str, ...]:
    """The names of the speed-ups applied now."""
    return tuple(_state["active"])


def _make(cls: type, expression_str: str) -> Any:
    with _lock:
        hit = _trees.get(expression_str)
        if hit is not None:
            _trees.move_to_end(expression_str)
            return hit[0]
    tree = _stock["make"].__func__(cls, expression_str)  # raises for a bad expression
    data = pickle.dumps(tree, pickle.HIGHEST_PROTOCOL)
    with _lock:
        if expression_str not in _trees:
            _trees[expression_str] = (tree, data)
            _pickled[id(tree)] = data
            while len(_trees) > CACHE_SIZE:
                _, (old, _data) = _trees.popitem(last=False)
                _pickled.pop(id(old), None)
                _passed.difference_update({k for k in _passed if k[0] == id(old)})
        return _trees[expression_str][0]


def _key(self: Any, expression: Any) -> tuple[int, tuple[tuple[str, str], ...], tuple[str, ...]]:
    names = tuple(sorted((self.expression_attribute_names or {}).items()))
    return (id(expression), names, tuple(self.table.table_key_attrs))


def _validator_init(self: Any, expression: Any, expression_attribute_names: Any,
                    expression_attribute_values: Any, item: Any, table: Any) -> None:
    # moto's own __init__, with the copy and the pure validators taken from the memo.
    self.expression_attribute_names = expression_attribute_names
    self.expression_attribute_values = expression_attribute_values
    self.item = item
    self.table = table
    with _lock:
        data = _pickled.get(id(expression))
        self._memo_key = _key(self, expression) if data is not None else None
        known = self._memo_key in _passed
    processors = self.get_ast_processors()
    if known:
        processors = [p for p in processors if not isinstance(p, tuple(_PURE))]
    self.processors = processors
    self.node_to_validate = (
        pickle.loads(data) if data is not None else copy.deepcopy(expression)
    )


def _validate(self: Any) -> Any:
    node = _stock["validate"](self)
    key = getattr(self, "_memo_key", None)
    if key is not None:
        with _lock:
            _passed.add(key)
    return node


def _lex(self: Any) -> Any:
    text = self.condition_expression
    with _lock:
        hit = _tokens.get(text)
    if hit is None:
        hit = tuple(_stock["lex"](self))  # raises for a bad expression
        with _lock:
            _tokens[text] = hit
            while len(_tokens) > CACHE_SIZE:
                _tokens.popitem(last=False)
    # Fresh tokens each time: the parser's later passes own them.
    return deque(t._replace(children=[]) for t in hit)


_is_node: dict[type, bool] = {}  # a class: whether it is moto's Node (an ABC: slow to ask)


def _walk(self: Any, node: Any, child_id: int = -1) -> Any:
    # moto's DepthFirstTraverser.traverse_node_recursively, with the processed node
    # types computed once per traverser (moto rebuilds them at every node), and each
    # isinstance answered once per class (Node is an ABC: each answer is a registry walk).
    cls = type(node)
    is_node = _is_node.get(cls)
    if is_node is None:
        is_node = _is_node[cls] = isinstance(node, _refs["Node"])
    if is_node:
        types = self.__dict__.get("_memo_types")
        if types is None:
            types = self._memo_types = self.nodes_to_be_processed()
            self._memo_hits = {}
        parent_node = node.parent
        if node.children is not None:
            for i, child_node in enumerate(node.children):
                self.pre_processing_of_child(node, i)
                self.traverse_node_recursively(child_node, i)
        hits = self._memo_hits
        processed = hits.get(cls)
        if processed is None:
            processed = hits[cls] = isinstance(node, types)
        if processed:
            node = self.process(node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
    return node


def _before(comparison: str, bounds: list[Any], forward: bool) -> Any:
    """A test for sort-key values that come before the range in the query's direction
    (None: nothing can be said). moto's query steps over those without any effect: no
    result, no page, no count, and its page size is still 0 there."""
    lo = {"BETWEEN": 0, "=": 0, "EQ": 0, ">": 0, "GT": 0, ">=": 0, "GE": 0}
    hi = {"BETWEEN": 1, "=": 0, "EQ": 0, "<": 0, "LT": 0, "<=": 0, "LE": 0}
    if forward and comparison in lo:
        bound = bounds[lo[comparison]]
        if comparison in (">", "GT"):
            return lambda v: v <= bound
        return lambda v: v < bound
    if not forward and comparison in hi:
        bound = bounds[hi[comparison]]
        if comparison in ("<", "LT"):
            return lambda v: v >= bound
        return lambda v: v > bound
    return None


def _all_items(self: Any) -> list[Any]:
    within = getattr(_range, "query", None)
    if within is None or within[0] is not self:
        return list(_stock["all_items"](self))
    _, attr, before, trim = within
    if attr is None:  # a query of the table by partition key: only that partition
        hash_set = self.items.get(before)
        if hash_set is None:
            return []
        if not self.range_key_attr:
            return [hash_set]
        return list(hash_set.values()) if trim is None else trim(self, list(hash_set.values()))
    items = []
    for hash_set in self.items.values():
        for item in (hash_set.values() if self.range_key_attr else (hash_set,)):
            value = item.attrs.get(attr)
            if value is not None:
                try:
                    if before(value.cast_value):
                        continue
                except TypeError:  # another type than the bound's: moto decides
                    pass
            items.append(item)
    # moto's own order (all_items sorts the table by its keys), of fewer items.
    return sorted(items, key=lambda x: (x.hash_key, x.range_key) if x.range_key else x.hash_key)


def _index_range_attr(table: Any, index_name: str, conditions: Any) -> str | None:
    if conditions:
        return str(conditions[-1][0])
    for index in table.all_indexes():
        if index.name == index_name:
            ranges = [k["AttributeName"] for k in index.schema if k["KeyType"] == "RANGE"]
            return ranges[0] if len(ranges) == 1 else None
    return None


def _query(self: Any, hash_key: Any, range_comparison: Any, range_objs: Any, *args: Any,
           **kwargs: Any) -> Any:
    index_name = kwargs.get("index_name", args[4] if len(args) > 4 else None)
    forward = kwargs.get("scan_index_forward", args[2] if len(args) > 2 else True)
    attr = before = None
    if not index_name and hash_key is not None:
        # moto keeps only the items whose hash key equals it, and sorts them by range
        # key itself: the partition's items are all it needs, in any order.
        _range.query = (self, None, hash_key, speedups_query.partition_trim(
            range_comparison, range_objs, args, kwargs, _refs.get("page_limit")))
        try:
            return _stock["query"](self, hash_key, range_comparison, range_objs, *args,
                                   **kwargs)
        finally:
            _range.query = None
    if index_name and range_comparison and range_objs:
        attr = _index_range_attr(self, index_name, kwargs.get("range_key_conditions"))
        before = _before(range_comparison, [o.cast_value for o in range_objs],
                         forward is not False)
    if attr is None or before is None:
        return _stock["query"](self, hash_key, range_comparison, range_objs, *args, **kwargs)
    _range.query = (self, attr, before, None)
    try:
        return _stock["query"](self, hash_key, range_comparison, range_objs, *args, **kwargs)
    finally:
        _range.query = None


def _project(self: Any, projection_expressions: list[list[str]]) -> Any:
    # moto's Item.project, with self.to_regular_json() computed once, not per expression.
    result: dict[str, Any] = {}
    dynamo_type = _refs["dynamo_type"]
    plain = self.to_regular_json()
    for expr in projection_expressions:
        dynamo_type.merge_dicts(result, dynamo_type.find_nested_key(expr, plain))
    return dynamo_type.Item(
        hash_key=self.hash_key,
        range_key=self.range_key,
        attrs=dynamo_type.serializer.serialize(result)["M"],
    )




_found: OrderedDict[tuple[Any, ...], tuple[list[str], list[str]]] = OrderedDict()


class _UsedNames:
    """A ConditionExpressionParser for moto's response handlers, which call `parse()` only
    to read `expr_attr_names_found` / `expr_attr_values_found` (they drop the tree)."""

    def __init__(self, expr: Any, names: Any, values: Any) -> None:
        self.args = (expr, names, values)
        self.expr_attr_names_found: list[str] = []
        self.expr_attr_values_found: list[str] = []

    def parse(self) -> None:
        expr, names, values = self.args
        try:
            key = (expr, tuple(sorted((names or {}).items())),
                   tuple(sorted((k, tuple(sorted(v))) for k, v in (values or {}).items())))
        except (AttributeError, TypeError):  # not the shapes memoized: as moto does
            key = None
        with _lock:
            hit = _found.get(key) if key is not None else None
        if hit is None:
            parser = _refs["parser"](expr, names, values)
            parser.parse()  # raises for a bad expression: never memoized
            hit = (list(parser.expr_attr_names_found), list(parser.expr_attr_values_found))
            if key is not None:
                with _lock:
                    _found[key] = hit
                    while len(_found) > CACHE_SIZE:
                        _found.popitem(last=False)
        self.expr_attr_names_found.extend(hit[0])
        self.expr_attr_values_found.extend(hit[1])


_methods: dict[type, list[str]] = {}



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


def _stocked(key: str, wrap: Callable[[Any], Any] = lambda f: f) -> Callable[[Any], Any]:
    """A build that keeps moto's own under `key` for a replacement that reads it there."""
    def build(stock: Any) -> Any:
        _stock[key] = stock
        return wrap(_REPLACEMENTS[key])
    return build


_REPLACEMENTS: dict[str, Any] = {
    "make": _make, "init": _validator_init, "validate": _validate, "lex": _lex,
    "walk": _walk, "all_items": _all_items, "query": _query, "project": _project,
}
_DDB = "moto.dynamodb"
_VALIDATORS = f"{_DDB}.parsing.validators"
_PARSER = f"{_DDB}.comparisons:ConditionExpressionParser"
_TABLE = f"{_DDB}.models.table:Table"
_RESPONSES = "moto.core.responses"
_SQS = "moto.sqs.models"


def _speedup(name: str, what: str, patches: list[Patch], reads: tuple[str, ...] = ()) -> Speedup:
    """A speed-up whose every patched attribute, and every moto attribute it `reads`, is
    checked against the fingerprints of the releases read (moto_fingerprints.py)."""
    from infra.moto_fingerprints import KNOWN

    paths = [p.path for p in patches] + list(reads)
    reaches = tuple(Reach(path, KNOWN.get(path, frozenset())) for path in paths)
    return Speedup(Capability(f"speedup:{name}", what, reaches), tuple(patches))


SPEEDUPS: tuple[Speedup, ...] = (
    _speedup("update-parse", "an UpdateExpression parsed once per text", [
        Patch(f"{_DDB}.parsing.expressions:UpdateExpressionParser", "make",
              _stocked("make", classmethod))]),
    _speedup("update-validate", "the pure validators run once per expression, names, keys", [
        Patch(f"{_VALIDATORS}:Validator", "__init__", _stocked("init")),
        Patch(f"{_VALIDATORS}:Validator", "validate", _stocked("validate"))],
        reads=(f"{_VALIDATORS}:UpdateExpressionValidator.get_ast_processors",
               f"{_VALIDATORS}:ActionCountValidator",
               f"{_VALIDATORS}:OverlappingPathsValidator",
               f"{_VALIDATORS}:UpdateHashRangeKeyValidator")),
    _speedup("condition-lex", "a ConditionExpression tokenized once per text", [
        Patch(_PARSER, "_lex_condition_expression", _stocked("lex"))],
        reads=(f"{_PARSER}._lex_one_node",)),
    _speedup("tree-walk", "the node types a validator handles looked up once per walk", [
        Patch(f"{_DDB}.parsing.ast_nodes:DepthFirstTraverser", "traverse_node_recursively",
              _stocked("walk"))],
        reads=(f"{_DDB}.parsing.ast_nodes:Node",)),
    _speedup("condition-names", "the names a condition uses listed once per text", [
        Patch(f"{_DDB}.responses", "create_condition_expression_parser",
              lambda stock: _UsedNames)],
        reads=(f"{_PARSER}.parse",)),
    # Before index-range: it reads Table.query as moto has it.
    _speedup("query-copy", "a query of a table copies nothing, and sizes each item once", [
        Patch(f"{_DDB}.models:DynamoDBBackend", "query", speedups_query.backend_query),
        Patch(f"{_DDB}.models.table", "copy", speedups_query.table_copy),
        Patch(f"{_DDB}.models.dynamo_type:Item", "size", speedups_query.item_size)],
        reads=speedups_query.READS),
    _speedup("index-range", "a query reads its key range, not the whole table", [
        Patch(_TABLE, "all_items", _stocked("all_items")),
        Patch(_TABLE, "query", _stocked("query"))],
        reads=(f"{_DDB}.models.table:RESULT_SIZE_LIMIT", *speedups_items.READS)),
    _speedup("projection", "an item converted once per projection", [
        Patch(f"{_DDB}.models.dynamo_type:Item", "project", _stocked("project"))],
        reads=(f"{_DDB}.models.dynamo_type:find_nested_key",
               f"{_DDB}.models.dynamo_type:merge_dicts")),
    _speedup("answer-spellings", "the serializer's member spellings memoized", [
        Patch("moto.core.serialize:AttributePicker", "get_possible_keys",
              speedups_wire.get_possible_keys("moto.core.serialize:AttributePicker")),
        Patch("moto.core.serialize:XFormedAttributePicker", "get_possible_keys",
              speedups_wire.get_possible_keys("moto.core.serialize:XFormedAttributePicker")),
        Patch("moto.core.serialize:ResponseSerializer", "get_value", speedups_wire.get_value)],
        reads=("moto.core.utils:get_service_model",)),
    _speedup("answer-values", "an answer's plain attribute values copied as they are", [
        Patch("moto.core.serialize:BaseJSONSerializer", "_serialize_type_structure",
              speedups_wire.attribute_values)],
        reads=("moto.core.serialize:ResponseSerializer._serialize_type_structure",
               "moto.core.serialize:ResponseSerializer._serialize_structure_member",
               "moto.core.serialize:ResponseSerializer._serialize",
               "moto.core.serialize:ResponseSerializer._default_serialize",
               "moto.core.serialize:ResponseSerializer.get_serialized_name",
               # the whole class: how it writes maps, lists and strings (5.2.4 added
               # a string method of its own)
               "moto.core.serialize:BaseJSONSerializer")),
    _speedup("item-size", "an item's 400 KB check made with a running total", [
        Patch(f"{_DDB}.models.dynamo_type:Item", "__init__", speedups_items.item_init)],
        reads=speedups_items.READS),
    _speedup("type-size", "a value sized with its type read once", [
        Patch(f"{_DDB}.models.dynamo_type:DynamoType", "size", speedups_query.type_size)],
        reads=speedups_query.SIZE_READS),
    _speedup("json-request", "a JSON request handed to the parser as its body", [
        Patch(_RESPONSES, "normalize_request", speedups_wire.normalize_request)]),
    # The same request, on a moto that makes its Request once, before the handler (5.2.4).
    _speedup("json-request", "a JSON request's environ written out, not built", [
        Patch("moto.core.request", "normalize_request", speedups_wire.build_request)],
        reads=("moto.core.request:Request.from_primitives", "moto.core.request:Request")),
    _speedup("json-params", "an item operation's body read as the JSON it is", [
        Patch(f"{_DDB}.responses:DynamoHandler", "parse_parameters",
              speedups_wire.parse_parameters)]),
    _speedup("method-names", "a response class's methods listed once", [
        Patch(_RESPONSES, "method_names_from_class", speedups_wire.method_names)]),
    _speedup("transact-undo", "a transaction keeps the items it touches, not whole tables", [
        Patch(f"{_DDB}.models:DynamoDBBackend", "transact_write_items",
              speedups_transact.transact_write_items)],
        reads=speedups_transact.READS),
    _speedup("sqs-send", "a send reads one attribute of its queue, not all", [
        Patch(f"{_SQS}:SQSBackend", "send_message", speedups_sqs.send_message),
        Patch(f"{_SQS}:Queue", "attributes", speedups_sqs.attributes)]),
    _speedup("sqs-retention", "a receive reads the retention period, not every attribute", [
        Patch(f"{_SQS}:SQSBackend", "is_message_valid_based_on_retention_period",
              speedups_sqs.retained)]),
)
CAPABILITIES: tuple[Capability, ...] = tuple(s.capability for s in SPEEDUPS)

# What install() replaced: (owner, attribute, whether the owner had it itself, what it was).
_applied: list[tuple[Any, str, bool, Any]] = []


def _switched_off(environ: dict[str, str] | os._Environ[str]) -> set[str]:
    names = {n.strip() for n in environ.get(OFF_VARIABLE, "").split(",") if n.strip()}
    return {n if n.startswith("speedup:") else f"speedup:{n}" for n in names}


def _lookups() -> None:
    """The moto objects the replacements use (each is among their speed-ups' reads)."""
    for key, path in (("Node", f"{_DDB}.parsing.ast_nodes:Node"),
                      ("dynamo_type", f"{_DDB}.models.dynamo_type"),
                      ("parser", _PARSER),
                      ("page_limit", f"{_DDB}.models.table:RESULT_SIZE_LIMIT")):
        try:
            _refs[key] = resolve(path)
        except LookupError:
            pass  # its speed-up's check fails on the same path, and it is not applied
    try:
        speedups_transact.bind()
    except LookupError:
        pass  # its speed-up's check fails on the same path, and it is not applied
    _PURE[:] = []
    for name in ("ActionCountValidator", "OverlappingPathsValidator",
                 "UpdateHashRangeKeyValidator"):
        try:
            _PURE.append(resolve(f"{_VALIDATORS}:{name}"))
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
    for each (infra.capabilities.report()). False if none applies (ORCH_MOTO_STOCK=1, or
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
        for memo in (_found, _trees, _pickled, _tokens, _passed, _stock, _is_node):
            memo.clear()
        speedups_wire.clear()
        forget("speedup:")
        _state["installed"] = False
        _state["active"] = ()
