from google.protobuf import descriptor_pb2 as _descriptor_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Permission(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERMISSION_UNSPECIFIED: _ClassVar[Permission]
    PERMISSION_READ: _ClassVar[Permission]
    PERMISSION_COMMIT: _ClassVar[Permission]
    PERMISSION_ADMIN: _ClassVar[Permission]

class Scope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCOPE_UNSPECIFIED: _ClassVar[Scope]
    SCOPE_GROUP: _ClassVar[Scope]
    SCOPE_PREFIX: _ClassVar[Scope]
    SCOPE_TOPICS: _ClassVar[Scope]

class CostRule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COST_RULE_UNSPECIFIED: _ClassVar[CostRule]
    COST_RULE_ONE: _ClassVar[CostRule]
    COST_RULE_ENTRIES: _ClassVar[CostRule]
    COST_RULE_SELECTION: _ClassVar[CostRule]
    COST_RULE_PAGE: _ClassVar[CostRule]

class Counted(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COUNTED_UNSPECIFIED: _ClassVar[Counted]
    COUNTED_COMMITS: _ClassVar[Counted]
    COUNTED_RESETS: _ClassVar[Counted]

class Scan(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCAN_UNSPECIFIED: _ClassVar[Scan]
    SCAN_GROUP: _ClassVar[Scan]
    SCAN_PREFIX: _ClassVar[Scan]
    SCAN_GROUP_VERDICT: _ClassVar[Scan]

class EntryCost(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENTRY_COST_UNSPECIFIED: _ClassVar[EntryCost]
    ENTRY_COST_PARTITION: _ClassVar[EntryCost]
    ENTRY_COST_CONTENTS: _ClassVar[EntryCost]
PERMISSION_UNSPECIFIED: Permission
PERMISSION_READ: Permission
PERMISSION_COMMIT: Permission
PERMISSION_ADMIN: Permission
SCOPE_UNSPECIFIED: Scope
SCOPE_GROUP: Scope
SCOPE_PREFIX: Scope
SCOPE_TOPICS: Scope
COST_RULE_UNSPECIFIED: CostRule
COST_RULE_ONE: CostRule
COST_RULE_ENTRIES: CostRule
COST_RULE_SELECTION: CostRule
COST_RULE_PAGE: CostRule
COUNTED_UNSPECIFIED: Counted
COUNTED_COMMITS: Counted
COUNTED_RESETS: Counted
SCAN_UNSPECIFIED: Scan
SCAN_GROUP: Scan
SCAN_PREFIX: Scan
SCAN_GROUP_VERDICT: Scan
ENTRY_COST_UNSPECIFIED: EntryCost
ENTRY_COST_PARTITION: EntryCost
ENTRY_COST_CONTENTS: EntryCost
CALL_FIELD_NUMBER: _ClassVar[int]
call: _descriptor.FieldDescriptor
ENTRY_COST_FIELD_NUMBER: _ClassVar[int]
entry_cost: _descriptor.FieldDescriptor

class CallFacts(_message.Message):
    __slots__ = ("permission", "scope", "cost", "cost_field", "creates_group", "adds_partitions", "appends_history", "removes_groups", "preview_field", "unknown_outcome", "entries_field", "counted", "scan", "scan_skipped_by")
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_FIELD_NUMBER: _ClassVar[int]
    CREATES_GROUP_FIELD_NUMBER: _ClassVar[int]
    ADDS_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    APPENDS_HISTORY_FIELD_NUMBER: _ClassVar[int]
    REMOVES_GROUPS_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_FIELD_NUMBER: _ClassVar[int]
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    SCAN_FIELD_NUMBER: _ClassVar[int]
    SCAN_SKIPPED_BY_FIELD_NUMBER: _ClassVar[int]
    permission: Permission
    scope: Scope
    cost: CostRule
    cost_field: str
    creates_group: bool
    adds_partitions: bool
    appends_history: bool
    removes_groups: bool
    preview_field: str
    unknown_outcome: str
    entries_field: str
    counted: Counted
    scan: Scan
    scan_skipped_by: str
    def __init__(self, permission: _Optional[_Union[Permission, str]] = ..., scope: _Optional[_Union[Scope, str]] = ..., cost: _Optional[_Union[CostRule, str]] = ..., cost_field: _Optional[str] = ..., creates_group: _Optional[bool] = ..., adds_partitions: _Optional[bool] = ..., appends_history: _Optional[bool] = ..., removes_groups: _Optional[bool] = ..., preview_field: _Optional[str] = ..., unknown_outcome: _Optional[str] = ..., entries_field: _Optional[str] = ..., counted: _Optional[_Union[Counted, str]] = ..., scan: _Optional[_Union[Scan, str]] = ..., scan_skipped_by: _Optional[str] = ...) -> None: ...
