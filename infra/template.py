"""template.yaml, read and translated offline.

`template.yaml` (repo root) is the one definition of the tables, queues, bucket and Lambda
functions. This module parses it (CloudFormation short-form tags included), translates the
SAM transform into plain CloudFormation with samtranslator *without any AWS call*, and cuts
out the data resources that the local stack deploys into moto (moto's CloudFormation cannot
create Lambda functions without code)."""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import boto3
import yaml
from samtranslator.parser.parser import Parser
from samtranslator.public.exceptions import InvalidDocumentException
from samtranslator.translator.arn_generator import ArnGenerator
from samtranslator.translator.translator import Translator

from orchestrator.errors import OrchestratorError

__all__ = [
    "DATA_RESOURCE_TYPES",
    "TEMPLATE_PATH",
    "TemplateError",
    "cloudformation_template",
    "data_resources_template",
    "load_template",
    "translate",
]

TEMPLATE_PATH = Path(__file__).resolve().parent.parent / "template.yaml"

# What the local stack deploys: everything that holds state, nothing that needs code.
DATA_RESOURCE_TYPES = frozenset({"AWS::DynamoDB::Table", "AWS::SQS::Queue", "AWS::S3::Bucket"})

# samtranslator refuses local paths; `sam package` uploads them and rewrites the property to
# an S3 URI. For an offline translation any S3 URI will do (the code is never fetched).
_PLACEHOLDER_CODE_URI = "s3://local-placeholder/code.zip"


class TemplateError(OrchestratorError):
    """template.yaml failed to parse or translate, or a parameter value breaks its rules."""

    code = "invalid_template"


# --- YAML with CloudFormation short-form tags ---------------------------------------------


class _CloudFormationLoader(yaml.SafeLoader):
    """SafeLoader that reads `!Ref x` as {"Ref": x}, `!Sub s` as {"Fn::Sub": s}, ...

    Like CloudFormation, it leaves dates as strings ("2010-09-09" is a version, not a date).
    The constructors are registered on this subclass only: yaml.SafeLoader is untouched."""

    yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


def _construct_intrinsic(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:  # pragma: no cover - PyYAML has no other node kinds
        raise yaml.constructor.ConstructorError(
            None, None, f"unexpected !{suffix}", node.start_mark
        )
    if suffix == "Ref" or suffix == "Condition":
        return {suffix: value}
    if suffix == "GetAtt" and isinstance(value, str):
        # `!GetAtt Queue.Arn` is the short form of {"Fn::GetAtt": ["Queue", "Arn"]}.
        resource, _, attribute = value.partition(".")
        if not attribute:
            raise yaml.constructor.ConstructorError(
                None, None, f"!GetAtt {value!r} needs the form Resource.Attribute", node.start_mark
            )
        value = [resource, attribute]
    return {f"Fn::{suffix}": value}


_CloudFormationLoader.add_multi_constructor("!", _construct_intrinsic)


def load_template(path: Path = TEMPLATE_PATH) -> dict[str, Any]:
    """Parse a CloudFormation/SAM YAML file into plain dicts with long-form intrinsics."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateError(f"{path}: cannot read the template: {exc}") from exc
    try:
        document = yaml.load(text, Loader=_CloudFormationLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise TemplateError(f"{path}: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("Resources"), dict):
        raise TemplateError(f"{path}: not a CloudFormation template (no Resources mapping)")
    return document


# --- SAM -> CloudFormation, offline -------------------------------------------------------


def _no_network_policy_map() -> dict[str, str]:
    """The managed-policy fallback samtranslator would fill from IAM ListPolicies.

    samtranslator already resolves AWS managed policy names from its bundled map and
    passes ARNs through; anything else stays as written instead of costing an IAM call."""
    return {}


def _with_placeholder_code(template: dict[str, Any]) -> None:
    functions = [
        resource.setdefault("Properties", {})
        for resource in template["Resources"].values()
        if isinstance(resource, dict) and resource.get("Type") == "AWS::Serverless::Function"
    ]
    global_function = template.get("Globals", {}).get("Function")
    if isinstance(global_function, dict):
        functions.append(global_function)
    for properties in functions:
        uri = properties.get("CodeUri")
        if uri is not None and not (isinstance(uri, str) and uri.startswith("s3://")):
            properties["CodeUri"] = _PLACEHOLDER_CODE_URI


# samtranslator records the session's region on a class attribute of ArnGenerator; we set it
# for the duration of one translation only, so no other user of samtranslator sees our value.
_translate_lock = threading.Lock()


def translate(
    sam_template: Mapping[str, Any],
    *,
    parameters: Mapping[str, str] | None = None,
    region: str = "us-east-1",
) -> dict[str, Any]:
    """Translate a SAM template into plain CloudFormation, without network access.

    Local `CodeUri` paths become a placeholder S3 URI (what `sam package` would upload).
    The input is not modified. Raises TemplateError listing every problem SAM found."""
    template = copy.deepcopy(dict(sam_template))
    _with_placeholder_code(template)
    # A Session only reads local configuration; naming the region keeps it off the
    # environment (samtranslator needs a region to pick the ARN partition).
    session = boto3.session.Session(region_name=region)
    with _translate_lock:
        saved_region = ArnGenerator.BOTO_SESSION_REGION_NAME
        try:
            translator = Translator(None, Parser(), boto_session=session)
            translated: dict[str, Any] = translator.translate(
                template,
                parameter_values=dict(parameters or {}),
                get_managed_policy_map=_no_network_policy_map,
            )
            return translated
        except InvalidDocumentException as exc:
            problems = "; ".join(cause.message for cause in exc.causes)
            raise TemplateError(f"SAM translation failed: {problems}") from exc
        finally:
            ArnGenerator.BOTO_SESSION_REGION_NAME = saved_region


@cache
def _translated(path: Path, region: str) -> dict[str, Any]:
    return translate(load_template(path), region=region)


def cloudformation_template(
    path: Path = TEMPLATE_PATH, *, region: str = "us-east-1"
) -> dict[str, Any]:
    """template.yaml translated to plain CloudFormation (cached per process; this returns a
    copy the caller may modify)."""
    return copy.deepcopy(_translated(path.resolve(), region))


# --- the data resources only --------------------------------------------------------------

_SUB_VARIABLE = re.compile(r"\$\{(?!!)([^}]+)\}")


def _references(node: Any) -> set[str]:
    """Logical ids, parameters and pseudo parameters that a template fragment refers to."""
    found: set[str] = set()
    if isinstance(node, list):
        for item in node:
            found |= _references(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                found.add(value)
            elif key == "Fn::GetAtt":
                target = value[0] if isinstance(value, list) else str(value).split(".")[0]
                found.add(str(target))
            elif key == "Fn::Sub":
                text, local = (value, {}) if isinstance(value, str) else (value[0], value[1])
                names = {m.split(".")[0].strip() for m in _SUB_VARIABLE.findall(text)}
                found |= (names - set(local)) | _references(local)
            elif key == "DependsOn":
                found |= {value} if isinstance(value, str) else set(value)
            else:
                found |= _references(value)
    return found


def data_resources_template(
    prefix: str, *, path: Path = TEMPLATE_PATH, region: str = "us-east-1"
) -> dict[str, Any]:
    """The translated template cut down to DynamoDB tables, SQS queues and S3 buckets and the
    outputs that only refer to them, with `prefix` as the Prefix parameter's default.

    Raises TemplateError if `prefix` breaks the parameter's AllowedPattern, or if a data
    resource depends on something that is cut out."""
    full = cloudformation_template(path, region=region)
    parameter = full.get("Parameters", {}).get("Prefix", {})
    pattern = parameter.get("AllowedPattern")
    if pattern is not None and not re.fullmatch(pattern, prefix):
        raise TemplateError(
            f"prefix {prefix!r} does not match the Prefix AllowedPattern {pattern!r} of {path}: "
            f"{parameter.get('ConstraintDescription', '')}".rstrip(": ")
        )
    # The local data stack is disposable: its tables go with it (the deployed stack keeps
    # them, DeletionPolicy Retain, until `orchestrator destroy --delete-data`).
    resources = {
        logical_id: {k: v for k, v in resource.items()
                     if k not in ("DeletionPolicy", "UpdateReplacePolicy")}
        for logical_id, resource in full["Resources"].items()
        if resource.get("Type") in DATA_RESOURCE_TYPES
    }
    allowed = set(resources) | set(full.get("Parameters", {})) | set(full.get("Conditions", {}))
    for logical_id, resource in resources.items():
        missing = {r for r in _references(resource) - allowed if not r.startswith("AWS::")}
        if missing:
            raise TemplateError(
                f"{path}: data resource {logical_id} refers to {sorted(missing)}, "
                "which the local data stack does not create"
            )
    outputs = {
        name: output
        for name, output in full.get("Outputs", {}).items()
        if all(r in allowed or r.startswith("AWS::") for r in _references(output))
    }
    kept = ("AWSTemplateFormatVersion", "Description", "Parameters", "Conditions", "Mappings")
    template: dict[str, Any] = {key: full[key] for key in kept if key in full}
    if "Prefix" in template.get("Parameters", {}):
        template["Parameters"]["Prefix"]["Default"] = prefix
    template["Resources"] = resources
    template["Outputs"] = outputs
    return template
