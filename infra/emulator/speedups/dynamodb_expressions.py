"""moto's DynamoDB expressions (moto.dynamodb.parsing, moto.dynamodb.comparisons), each
parsed once per text (the speed-ups' registry, `__init__.py`, applies these, each behind
its capability check).

Updates: moto parses an UpdateExpression into an AST twice per request (in the response
handler and again in the backend), deep-copies the AST before validating it, and runs
three validators that depend only on the expression, its attribute names and the table's
keys (clause counts, overlapping paths, key attributes updated). The orchestrator sends a
few dozen distinct expressions, millions of times: the parse is memoized by expression
text (`update_parse`), the copy is a pickle round trip of the memoized tree, and those
three validators run once per (expression, names, table keys) (`validator_init`,
`validate`). A ConditionExpression's tokens are memoized by its text the same way
(`condition_lex`), and the tree walk looks up which node types a validator handles once
per walk instead of at every node (`tree_walk`). Everything that depends on the values or
the item (value resolution, functions, type checks, the write itself) still runs on every
request, so every answer and every error stays moto's own.

Conditions: before it applies a write, moto's response handler parses the
ConditionExpression once only to list the names and values it uses (to refuse unused
ones), then the backend parses it again to evaluate it. That first parse is memoized by
(text, names, and the placeholders and types of the values) (`condition_names`): what it
lists, and whether it succeeds, depend on nothing else. A parse that fails is never
memoized."""

from __future__ import annotations

import copy
import pickle
import threading
from collections import OrderedDict, deque
from typing import Any

from infra.emulator.capabilities import resolve

__all__ = ["CACHE_SIZE", "PARSER", "VALIDATORS", "bind", "clear", "condition_lex",
           "condition_names", "tree_walk", "update_parse", "validate", "validator_init"]

CACHE_SIZE = 512
_DDB = "moto.dynamodb"
VALIDATORS = f"{_DDB}.parsing.validators"
PARSER = f"{_DDB}.comparisons:ConditionExpressionParser"

_lock = threading.Lock()
_trees: OrderedDict[str, tuple[Any, bytes]] = OrderedDict()  # expression -> (tree, pickled)
_pickled: dict[int, bytes] = {}  # id(tree) -> its pickle, for trees held in _trees
_tokens: OrderedDict[str, tuple[Any, ...]] = OrderedDict()  # condition -> its tokens
_passed: set[tuple[int, tuple[tuple[str, str], ...], tuple[str, ...]]] = set()
_found: OrderedDict[tuple[Any, ...], tuple[list[str], list[str]]] = OrderedDict()
_is_node: dict[type, bool] = {}  # a class: whether it is moto's Node (an ABC: slow to ask)
_stock: dict[str, Any] = {}
# moto's objects the replacements use, looked up when they are installed (`bind`).
_refs: dict[str, Any] = {}
# Validators that read nothing but the tree, the attribute names and the table's keys.
_PURE: list[type] = []


def bind() -> None:
    """Look up the moto objects the replacements use; one that is missing is left out (its
    speed-up's check fails on the same path, and it is not applied)."""
    for key, path in (("Node", f"{_DDB}.parsing.ast_nodes:Node"), ("parser", PARSER)):
        try:
            _refs[key] = resolve(path)
        except LookupError:
            pass
    _PURE[:] = []
    for name in ("ActionCountValidator", "OverlappingPathsValidator",
                 "UpdateHashRangeKeyValidator"):
        try:
            _PURE.append(resolve(f"{VALIDATORS}:{name}"))
        except LookupError:
            pass


def clear() -> None:
    """Forget every memo (moto put back as shipped)."""
    with _lock:
        for memo in (_found, _trees, _pickled, _tokens, _passed, _stock, _is_node):
            memo.clear()


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


def update_parse(stock: Any) -> Any:
    """UpdateExpressionParser.make (a classmethod), memoized by text."""
    _stock["make"] = stock
    return classmethod(_make)


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


def validator_init(stock: Any) -> Any:
    """Validator.__init__: the tree's copy from its pickle, the pure validators skipped
    for an (expression, names, keys) that passed them."""
    _stock["init"] = stock
    return _validator_init


def _validate(self: Any) -> Any:
    node = _stock["validate"](self)
    key = getattr(self, "_memo_key", None)
    if key is not None:
        with _lock:
            _passed.add(key)
    return node


def validate(stock: Any) -> Any:
    """Validator.validate, noting what passed."""
    _stock["validate"] = stock
    return _validate


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


def condition_lex(stock: Any) -> Any:
    """ConditionExpressionParser._lex_condition_expression, memoized by text."""
    _stock["lex"] = stock
    return _lex


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


def tree_walk(stock: Any) -> Any:
    """DepthFirstTraverser.traverse_node_recursively, its type tests answered once."""
    _stock["walk"] = stock
    return _walk


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


def condition_names(stock: Any) -> Any:
    """moto.dynamodb.responses.create_condition_expression_parser: the names and values
    a condition uses, listed once per text."""
    return _UsedNames
