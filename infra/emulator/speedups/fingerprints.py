"""The fingerprints of moto's code that the emulator's speed-ups were read against, one
per moto release that changed it (infra/emulator/capabilities.py says how a fingerprint is
made).

A new moto release: install it, run `python -m infra.capabilities` (it marks every reach
whose code is new), read what changed in each marked function, bring the speed-up to it
(or leave it off there), run tests/integration/test_moto_speedups.py, add the new
fingerprints below, and raise moto's upper bound in pyproject.toml."""

from __future__ import annotations

__all__ = ["KNOWN"]

KNOWN: dict[str, frozenset[str]] = {
    # 5.2.1 to 5.2.5
    "moto.dynamodb.parsing.expressions:UpdateExpressionParser.make": frozenset({'2c00ed96d6e1'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.parsing.validators:Validator.__init__": frozenset({'9489b532dd0f'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.parsing.validators:Validator.validate": frozenset({'5a99f0d36c7b'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.parsing.validators:UpdateExpressionValidator.get_ast_processors":
        frozenset({'918400bbecd6'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.parsing.validators:ActionCountValidator": frozenset({'3fe995f04a9c'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.parsing.validators:OverlappingPathsValidator": frozenset({'27f48a77a176'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.parsing.validators:UpdateHashRangeKeyValidator": frozenset({'18ca06e4b0d8'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.comparisons:ConditionExpressionParser._lex_condition_expression":
        frozenset({'a81528835921'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.comparisons:ConditionExpressionParser._lex_one_node":
        frozenset({'58485dd15b2f'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.parsing.ast_nodes:DepthFirstTraverser.traverse_node_recursively":
        frozenset({'d7f01d9b45cf'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.parsing.ast_nodes:Node": frozenset({'424025051cec'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.responses:create_condition_expression_parser": frozenset({'a667986752c0'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.comparisons:ConditionExpressionParser.parse": frozenset({'5c9b63c5f49e'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models.table:Table.all_items": frozenset({'c80d2ee3c896'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models.table:Table.query": frozenset({'002b4d00be6d'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models.dynamo_type:Item.project": frozenset({'f411e6d8b568'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models.dynamo_type:DynamoType.__init__": frozenset({'7c6cde92e114'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models.dynamo_type:DDBType": frozenset({'882633af21f9'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models:DynamoDBBackend.query": frozenset({'b8f2b308cd13'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models.dynamo_type:Item.size": frozenset({'9bc6ada96d33'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models.dynamo_type:find_nested_key": frozenset({'66e7b1b00236'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models.dynamo_type:merge_dicts": frozenset({'e37c91dbbe97'}),
    # 5.2.1 to 5.2.5
    "moto.core.serialize:AttributePicker.get_possible_keys": frozenset({'cb284052c5ea'}),
    # 5.2.1 to 5.2.5
    "moto.core.serialize:XFormedAttributePicker.get_possible_keys": frozenset({'f0d20f55f37f'}),
    # 5.2.1 to 5.2.5
    "moto.core.serialize:ResponseSerializer.get_value": frozenset({'5ac16904b91c'}),
    # 5.2.1 to 5.2.5
    "moto.core.utils:get_service_model": frozenset({'0a4a5eced5d6'}),
    # 5.2.1 to 5.2.3
    "moto.core.responses:normalize_request": frozenset({'f38bc8eda853'}),
    # 5.2.4, 5.2.5 (up to 5.2.3 a function of another shape; json-request's first variant)
    "moto.core.request:normalize_request": frozenset({'6f97e3945587', '499186edb58b'}),
    # 5.2.4, 5.2.5
    "moto.core.request:Request.from_primitives": frozenset({'7e8863e2d864', '4cfb35d5fb26'}),
    # 5.2.4, 5.2.5 (up to 5.2.3 the name is werkzeug's Request)
    "moto.core.request:Request": frozenset({'2ad33960bd82', 'a4cbd42ad3c1'}),
    # 5.2.1 to 5.2.3, 5.2.4, 5.2.5
    "moto.dynamodb.responses:DynamoHandler.parse_parameters":
        frozenset({'303d289410ab', '74ad4348cfd2', 'fd3d04c91948'}),
    # 5.2.1 to 5.2.5
    "moto.core.responses:method_names_from_class": frozenset({'9dbac89d082b'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models:DynamoDBBackend.transact_write_items": frozenset({'81db2cb7d94e'}),
    # 5.2.1 to 5.2.5
    "moto.sqs.models:SQSBackend.send_message": frozenset({'bf161af09a9e'}),
    # 5.2.1 to 5.2.5
    "moto.sqs.models:Queue.attributes": frozenset({'40cb990b1216'}),
    # 5.2.1 to 5.2.5
    "moto.sqs.models:SQSBackend.is_message_valid_based_on_retention_period":
        frozenset({'cca23b94a5f3'}),
    # 5.2.1 to 5.2.5
    "moto.core.serialize:BaseJSONSerializer._serialize_type_structure":
        frozenset({'36873909cd0a'}),
    # 5.2.1 to 5.2.5
    "moto.core.serialize:ResponseSerializer._serialize_type_structure":
        frozenset({'f9b47068f40c'}),
    # 5.2.1 to 5.2.5
    "moto.core.serialize:ResponseSerializer._serialize_structure_member":
        frozenset({'437fdce43aa5'}),
    # 5.2.1 to 5.2.5
    "moto.core.serialize:ResponseSerializer._serialize": frozenset({'4eccca5bf025'}),
    # 5.2.1 to 5.2.5
    "moto.core.serialize:ResponseSerializer._default_serialize": frozenset({'25ce8ddbb1a9'}),
    # 5.2.1 to 5.2.5
    "moto.core.serialize:ResponseSerializer.get_serialized_name": frozenset({'2c23dcac85cc'}),
    # 5.2.1 to 5.2.3; 5.2.4 and 5.2.5 (a string method of its own: str() of the value)
    "moto.core.serialize:BaseJSONSerializer": frozenset({'edca15cee5a4', 'e558d3b61d06'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models.dynamo_type:Item.__init__": frozenset({'d9c12b62cb92'}),
    # 5.2.1 to 5.2.5 (its __setitem__ holds the 405,000-byte limit)
    "moto.dynamodb.models.dynamo_type:LimitedSizeDict": frozenset({'c956079ac955'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models.dynamo_type:DynamoType.size": frozenset({'f7c111fca25b'}),
    # 5.2.1 to 5.2.5
    "moto.dynamodb.models.utilities:bytesize": frozenset({'b0dce378c1ce'}),
}
