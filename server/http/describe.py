"""An OpenAPI 3.1 description of the HTTP/JSON surface, generated from the proto's descriptors.

Every RPC of offsetstore.v1.OffsetStoreService is a ``POST`` of its request message in proto3
JSON; the schemas follow proto3's JSON mapping (64-bit integers as strings or numbers,
enums by name, Timestamp as RFC 3339, Duration as ``"1.5s"``). The server serves it at
``/openapi.json``; docs/openapi.json is the committed copy, which a test keeps equal.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor

from offsetstore.server.http.connect import CONNECT_CODES, JSON, SERVICE

__all__ = ["openapi", "openapi_json"]

_INT32 = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SFIXED32,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_FIXED32,
}
_INT64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_SFIXED64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_FIXED64,
}
# Well-known types have a JSON form of their own, not their fields.
_WELL_KNOWN: dict[str, dict[str, Any]] = {
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Duration": {"type": "string", "pattern": r"^-?[0-9]+(\.[0-9]{1,9})?s$", "examples": ["3600s"]},
}


def openapi(version: str = "v1") -> dict[str, Any]:
    """The OpenAPI document of every RPC of the service (a new RPC appears without any change here)."""
    schemas: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for method in SERVICE.methods:
        request, response = _ref(method.input_type, schemas), _ref(method.output_type, schemas)
        paths[f"/{SERVICE.full_name}/{method.name}"] = {
            "post": {
                "operationId": method.name,
                "tags": [SERVICE.full_name],
                "requestBody": {"required": True, "content": {JSON: {"schema": request}}},
                "parameters": [{"$ref": "#/components/parameters/ConnectTimeoutMs"}],
                "responses": {
                    "200": {"description": f"{method.output_type.name}", "content": {JSON: {"schema": response}}},
                    "default": {
                        "description": "A Connect error; details[].debug.reason is the ErrorInfo reason",
                        "content": {JSON: {"schema": {"$ref": "#/components/schemas/connect.error"}}},
                    },
                },
            }
        }
    schemas["connect.error"] = _connect_error()
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"{SERVICE.full_name} over HTTP/JSON (Connect protocol)",
            "version": version,
            "description": "Each RPC is a POST of its request message in proto3 JSON to /<service>/<method>. "
            "Send Authorization: Bearer <token> when the server takes tokens. See docs/http.md.",
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "parameters": {
                "ConnectTimeoutMs": {
                    "name": "Connect-Timeout-Ms",
                    "in": "header",
                    "required": False,
                    "description": "The call's deadline in milliseconds",
                    "schema": {"type": "integer", "minimum": 0},
                }
            },
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}, {}],
    }


def openapi_json() -> str:
    """:func:`openapi` as the text served and committed (sorted keys, two-space indent, final newline)."""
    return json.dumps(openapi(), indent=2, sort_keys=True) + "\n"


def _ref(message: Descriptor, schemas: dict[str, Any]) -> dict[str, Any]:
    if message.full_name in _WELL_KNOWN:
        return dict(_WELL_KNOWN[message.full_name])
    if message.full_name not in schemas:
        schemas[message.full_name] = {}  # placed first: a message that refers to itself ends here
        schemas[message.full_name] = _message(message, schemas)
    return {"$ref": f"#/components/schemas/{message.full_name}"}


def _message(message: Descriptor, schemas: dict[str, Any]) -> dict[str, Any]:
    properties = {}
    for field in message.fields:
        schema = _field(field, schemas)
        if field.is_repeated and not _is_map(field):
            schema = {"type": "array", "items": schema}
        properties[field.json_name] = schema
    out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    oneofs = [o for o in message.oneofs if not o.name.startswith("_")]  # not proto3 `optional`
    if oneofs:
        out["description"] = "; ".join(
            f"at most one of {', '.join(f.json_name for f in o.fields)} ({o.name})" for o in oneofs
        )
    return out


def _is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def _field(field: FieldDescriptor, schemas: dict[str, Any]) -> dict[str, Any]:
    if _is_map(field):
        assert field.message_type is not None
        value = field.message_type.fields_by_name["value"]
        return {"type": "object", "additionalProperties": _field(value, schemas)}
    kind = field.type
    if kind == FieldDescriptor.TYPE_MESSAGE:
        assert field.message_type is not None
        return _ref(field.message_type, schemas)
    if kind == FieldDescriptor.TYPE_ENUM:
        assert field.enum_type is not None
        return _enum(field.enum_type)
    if kind in _INT32:
        return {"type": "integer", "format": "int32"}
    if kind in _INT64:
        # proto3 JSON writes 64-bit integers as strings (JavaScript's numbers are doubles); both are read.
        return {"type": ["string", "integer"], "format": "int64", "pattern": r"^-?[0-9]+$"}
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return {"type": "number"}
    if kind == FieldDescriptor.TYPE_BOOL:
        return {"type": "boolean"}
    if kind == FieldDescriptor.TYPE_BYTES:
        return {"type": "string", "contentEncoding": "base64"}
    return {"type": "string"}


def _enum(enum: EnumDescriptor) -> dict[str, Any]:
    return {"type": "string", "enum": [v.name for v in enum.values]}


def _connect_error() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "code": {"type": "string", "enum": sorted({name for name, _ in CONNECT_CODES.values()})},
            "message": {"type": "string"},
            "details": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "examples": ["google.rpc.ErrorInfo"]},
                        "value": {"type": "string", "contentEncoding": "base64"},
                        "debug": {"type": "object", "description": "The detail as JSON (ErrorInfo: reason, metadata)"},
                    },
                    "required": ["type", "value"],
                },
            },
        },
        "required": ["code"],
    }
