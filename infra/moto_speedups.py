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

Answers: moto's response serializer works out, for every member of every attribute value
of every item, which spellings to look the member up under. For plain dicts (what
DynamoDB answers are made of) those spellings are a pure function of the member's name and
its shape in the service's model, which moto keeps for the life of the process: they are
memoized, and a member is then looked up in the dict directly.

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

Parameters: before a handler runs, moto turns botocore's request into a werkzeug Request
(a WSGI environ, headers, a form parser) only to hand its body to the JSON parser, which
reads nothing else: a request of the JSON protocols (DynamoDB, SQS) is handed over as
what that parser reads.

Conditions: before it applies a write, moto's response handler parses the
ConditionExpression once only to list the names and values it uses (to refuse unused
ones), then the backend parses it again to evaluate it. That first parse is memoized by
(text, names, and the placeholders and types of the values): what it lists, and whether it
succeeds, depend on nothing else. A parse that fails is never memoized.

Parsing: moto hands a DynamoDB request's body to botocore's parser, which walks the
operation's shapes to copy it out member by member; what it changes is only binary
values (decoded from base64) and timestamps. A request of an item operation (none has a
timestamp member) with no binary value is read as the JSON it is.

Every request: moto lists the methods of its response class (`inspect.getmembers`) to
find the action's; a class's methods do not change while it serves, so the list is
memoized per class.

Queues: before handing out each message, moto's ReceiveMessage asks for the queue's
retention period through GetQueueAttributes' code, which builds every attribute of the
queue, twice, counting the queue's messages three times each time: a receive of ten
messages from a queue with N waiting walked them sixty times. The retention period is read
from the queue itself, where those attributes take it from. SendMessage builds them all
too (once or twice per message) to read one of them, ContentBasedDeduplication: within a
send, the queue's attributes are that one (as moto spells it, present only on a FIFO
queue), so a batch of ten sent to a queue of N no longer walks the N thirty times.

`install()` applies this only to the moto version it was checked against (see
CHECKED_MOTO); on any other, or with ORCH_MOTO_STOCK=1 in the environment (to compare, or
to rule the memo out), it does nothing and moto runs unmodified, only slower."""

from __future__ import annotations

import copy
import json
import os
import pickle
import threading
from collections import OrderedDict, deque
from typing import Any
from urllib.parse import urlparse

import moto
import moto.core.responses as moto_responses
import moto.core.utils as moto_utils
import moto.dynamodb.responses as ddb_responses
from botocore.awsrequest import AWSPreparedRequest
from moto.core.serialize import AttributePicker, ResponseSerializer, XFormedAttributePicker
from moto.dynamodb.comparisons import ConditionExpressionParser
from moto.dynamodb.models import dynamo_type
from moto.dynamodb.models.table import Table
from moto.dynamodb.parsing import validators
from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]
    DepthFirstTraverser,
    Node,
)
from moto.dynamodb.parsing.expressions import (  # type: ignore[attr-defined]
    UpdateExpressionParser,
)
from moto.sqs.models import Queue, SQSBackend

__all__ = ["CHECKED_MOTO", "install", "installed", "uninstall"]

CHECKED_MOTO = ("5.2.",)
# Validators that read nothing but the tree, the attribute names and the table's keys.
PURE = (
    validators.ActionCountValidator,
    validators.OverlappingPathsValidator,
    validators.UpdateHashRangeKeyValidator,
)
CACHE_SIZE = 512

_lock = threading.Lock()
_trees: OrderedDict[str, tuple[Any, bytes]] = OrderedDict()  # expression -> (tree, pickled)
_pickled: dict[int, bytes] = {}  # id(tree) -> its pickle, for trees held in _trees
_tokens: OrderedDict[str, tuple[Any, ...]] = OrderedDict()  # condition -> its tokens
_models: dict[str, Any] = {}  # service name -> moto's one ServiceModel of it
_spellings: dict[tuple[Any, ...], tuple[str, ...]] = {}
_passed: set[tuple[int, tuple[tuple[str, str], ...], tuple[str, ...]]] = set()
_state = {"installed": False}
_stock: dict[str, Any] = {}
# The index query running on this thread: (table, sort-key attribute, a test for the
# values before its range).
_range = threading.local()


def installed() -> bool:
    return _state["installed"]


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
        processors = [p for p in processors if not isinstance(p, PURE)]
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


def _walk(self: Any, node: Any, child_id: int = -1) -> Any:
    # moto's DepthFirstTraverser.traverse_node_recursively, with the processed node
    # types computed once per traverser (moto rebuilds them at every node).
    if isinstance(node, Node):
        types = self.__dict__.get("_memo_types")
        if types is None:
            types = self._memo_types = self.nodes_to_be_processed()
        parent_node = node.parent
        if node.children is not None:
            for i, child_node in enumerate(node.children):
                self.pre_processing_of_child(node, i)
                self.traverse_node_recursively(child_node, i)
        if isinstance(node, types):
            node = self.process(node)
            node.parent = parent_node
            if parent_node:
                parent_node.children[child_id] = node
    return node


def _kept(service_model: Any) -> bool:
    """Is this the model moto keeps for its service (so its shapes live on)?"""
    name = service_model.service_name
    kept = _models.get(name)
    if kept is None:
        kept = _models.setdefault(name, moto_utils.get_service_model(name))
    return kept is service_model


def _spelled(cls: type) -> Any:
    stock = cls.__dict__["get_possible_keys"]

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
    _, attr, before = within
    if attr is None:  # a query of the table by partition key: only that partition
        hash_set = self.items.get(before)
        if hash_set is None:
            return []
        return list(hash_set.values()) if self.range_key_attr else [hash_set]
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
        _range.query = (self, None, hash_key)
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
    _range.query = (self, attr, before)
    try:
        return _stock["query"](self, hash_key, range_comparison, range_objs, *args, **kwargs)
    finally:
        _range.query = None


def _get_value(self: Any, value: Any, key: str, shape: Any) -> Any:
    # ResponseSerializer.get_value for a dict whose member spellings are memoized: the
    # first spelling present, as the picker would find it (moto's get_value of a dict is
    # a key lookup, for names without a dot), without building a picking context.
    picker = self._value_picker
    if type(value) is dict and type(picker) is XFormedAttributePicker \
            and not picker.response_transformers:
        hit = _spellings.get((XFormedAttributePicker, id(picker.alias_providers), key,
                              id(shape)))
        if hit is not None and _kept(self.operation_model.service_model) \
                and not any("." in spelling for spelling in hit):
            for spelling in hit:
                if spelling in value:
                    return value[spelling]
            return None
    return _stock["get_value"](self, value, key, shape)


def _project(self: Any, projection_expressions: list[list[str]]) -> Any:
    # moto's Item.project, with self.to_regular_json() computed once, not per expression.
    result: dict[str, Any] = {}
    plain = self.to_regular_json()
    for expr in projection_expressions:
        dynamo_type.merge_dicts(result, dynamo_type.find_nested_key(expr, plain))  # type: ignore[attr-defined]
    return dynamo_type.Item(
        hash_key=self.hash_key,
        range_key=self.range_key,
        attrs=dynamo_type.serializer.serialize(result)["M"],
    )


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


def _normalize_request(request: Any) -> Any:
    # moto.core.request.normalize_request, for moto.core.responses.parse_parameters.
    if isinstance(request, AWSPreparedRequest) and "Content-Encoding" not in request.headers:
        content_type = request.headers.get("Content-Type", "")
        if isinstance(content_type, bytes):
            content_type = content_type.decode()
        if content_type in ("application/x-amz-json-1.0", "application/x-amz-json-1.1"):
            return _JSONRequest(request, content_type)
    return _stock["normalize"](request)


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
            parser = ConditionExpressionParser(expr, names, values)
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


def _method_names(clazz: Any) -> list[str]:
    # moto.core.utils.method_names_from_class, once per class (callers only test `in`).
    names = _methods.get(clazz)
    if names is None:
        names = _methods.setdefault(clazz, _stock["methods"](clazz))
    return names


def _retained(self: Any, queue_name: str, message: Any) -> bool:
    # SQSBackend.is_message_valid_based_on_retention_period, with the period read where
    # Queue.attributes reads it (getattr of its snake_case name), not by building them all.
    period = self.get_queue(queue_name).message_retention_period
    return bool(period + message.sent_timestamp / 1000 > moto_utils.unix_time())


# Threads inside SQSBackend.send_message (a depth: a send may nest another).
_sending = threading.local()


def _send_message(self: Any, *args: Any, **kwargs: Any) -> Any:
    _sending.depth = getattr(_sending, "depth", 0) + 1
    try:
        return _stock["send"](self, *args, **kwargs)
    finally:
        _sending.depth -= 1


def _attributes(self: Any) -> dict[str, Any]:
    # Queue.attributes. Within a send moto reads only ContentBasedDeduplication; it is
    # among the attributes of a FIFO queue only, a bool given as "true" / "false".
    if not getattr(_sending, "depth", 0):
        return _stock["attributes"].fget(self)  # type: ignore[no-any-return]
    if not self.fifo_queue:
        return {}
    value = getattr(self, moto_utils.camelcase_to_underscores("ContentBasedDeduplication"))
    return {"ContentBasedDeduplication": str(value).lower() if isinstance(value, bool)
            else value}


# DynamoDB operations whose requests hold no timestamp member: without a binary value
# either, botocore's parser gives back the JSON body as it is.
_PLAIN_OPS = frozenset({
    "GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem",
    "BatchWriteItem", "TransactGetItems", "TransactWriteItems",
})


def _parse_parameters(self: Any, request: Any) -> None:
    # BaseResponse.parse_parameters, for DynamoHandler: the JSON body itself where the
    # parser would only copy it out member by member.
    if isinstance(request, AWSPreparedRequest) and self._get_action() in _PLAIN_OPS:
        body = request.body or b""
        raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        if b'"B":' not in raw and b'"BS":' not in raw:
            self.params = json.loads(raw)
            return
    _stock["parse"](self, request)


def _patches() -> list[tuple[str, Any, str, Any]]:
    """(stock key, owner, attribute, replacement): every change `install` makes."""
    return [
        ("make", UpdateExpressionParser, "make", classmethod(_make)),
        ("init", validators.Validator, "__init__", _validator_init),
        ("validate", validators.Validator, "validate", _validate),
        ("lex", ConditionExpressionParser, "_lex_condition_expression", _lex),
        ("walk", DepthFirstTraverser, "traverse_node_recursively", _walk),
        *((f"keys:{cls.__name__}", cls, "get_possible_keys", _spelled(cls))
          for cls in (AttributePicker, XFormedAttributePicker)),
        ("get_value", ResponseSerializer, "get_value", _get_value),
        ("all_items", Table, "all_items", _all_items),
        ("query", Table, "query", _query),
        ("project", dynamo_type.Item, "project", _project),
        ("used_names", ddb_responses, "create_condition_expression_parser", _UsedNames),
        ("normalize", moto_responses, "normalize_request", _normalize_request),
        ("methods", moto_responses, "method_names_from_class", _method_names),
        ("parse", ddb_responses.DynamoHandler, "parse_parameters", _parse_parameters),
        ("send", SQSBackend, "send_message", _send_message),
        ("attributes", Queue, "attributes", property(_attributes)),
        ("retained", SQSBackend, "is_message_valid_based_on_retention_period", _retained),
    ]


# What install() replaced: (owner, attribute, whether the owner had it itself, what it was).
_applied: list[tuple[Any, str, bool, Any]] = []


def install() -> bool:
    """Apply the memo to moto (idempotent). False if moto's version is not the one
    checked: moto then runs as shipped."""
    with _lock:
        if _state["installed"]:
            return True
        if os.environ.get("ORCH_MOTO_STOCK") or not moto.__version__.startswith(CHECKED_MOTO):
            return False
        for key, owner, attr, replacement in _patches():
            own = attr in vars(owner)
            # The owner's own entry (a classmethod or a property as such), else inherited.
            stock = vars(owner)[attr] if own else getattr(owner, attr)
            _stock[key] = stock
            _applied.append((owner, attr, own, stock))
            setattr(owner, attr, replacement)
        _state["installed"] = True
        return True


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
        for memo in (_found, _methods, _models, _spellings, _trees, _pickled, _tokens,
                     _passed):
            memo.clear()
        _state["installed"] = False
