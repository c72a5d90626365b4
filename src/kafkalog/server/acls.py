"""Kafka's ACLs: bindings, the authorizer's decision, their file, and the ACL APIs.

A binding is Kafka's ``AclBinding``: a resource pattern (type, name, LITERAL or PREFIXED) and an
entry (principal, host, operation, ALLOW or DENY). The decision is the one Kafka's
``AclAuthorizer`` and ``StandardAuthorizer`` make:

- a super user (``super.users``) is allowed everything;
- the ACLs that apply to a resource are the literal ones on its name, the literal ones on the
  wildcard ``*`` and the prefixed ones whose prefix starts its name;
- of those, an entry matches when its principal is the caller's or ``User:*``, its host the
  caller's or ``*``, and its operation the one asked or ALL; ALLOW on READ, WRITE, DELETE or
  ALTER also allows DESCRIBE, and ALLOW on ALTER_CONFIGS also DESCRIBE_CONFIGS (a DENY is not
  widened that way);
- a matching DENY wins over any ALLOW; with no matching ALLOW it is denied, unless the
  resource has no ACL at all and ``allow.everyone.if.no.acl.found`` is true.

They are kept in the data directory's :data:`ACLS_FILE` (JSON, rewritten atomically); the
ACL APIs that change them are in :mod:`kafkalog.server.acl_apis`.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from typing import Any

from kafkalog.errors import KafkalogError

ACLS_FILE = ".kafkalog-acls.json"

# Kafka's ResourceType, PatternType, AclOperation and AclPermissionType codes
ANY = 1
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 2, 3, 4, 5, 6, 7
MATCH, LITERAL, PREFIXED = 2, 3, 4
ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 2, 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
CREATE_TOKENS, DESCRIBE_TOKENS = 13, 14
DENY, ALLOW = 2, 3

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
RESOURCE_TYPES = {TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER}
OPERATIONS = set(range(ALL, DESCRIBE_TOKENS + 1))
#: operations an ALLOW on them also allows (Kafka's implied operations)
IMPLIED = {
    DESCRIBE: {DESCRIBE, READ, WRITE, DELETE, ALTER},
    DESCRIBE_CONFIGS: {DESCRIBE_CONFIGS, ALTER_CONFIGS},
}


@dataclass(frozen=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True)
class AclFilter:
    """Kafka's AclBindingFilter: None (or ANY) fields match anything; MATCH as Kafka reads
    it (the ACLs that would apply to that resource name)."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    @classmethod
    def of(cls, body: Any) -> AclFilter:
        return cls(
            int(body.resource_type_filter),
            body.resource_name_filter,
            int(body.pattern_type_filter),
            body.principal_filter,
            body.host_filter,
            int(body.operation),
            int(body.permission_type),
        )

    def problem(self) -> str | None:
        """Why Kafka would refuse this filter (INVALID_REQUEST), or None."""
        if self.resource_type not in RESOURCE_TYPES | {ANY}:
            return f"unknown resource type {self.resource_type}"
        if self.pattern_type not in (ANY, MATCH, LITERAL, PREFIXED):
            return f"unknown pattern type {self.pattern_type}"
        if self.operation not in OPERATIONS | {ANY}:
            return f"unknown operation {self.operation}"
        if self.permission_type not in (ANY, DENY, ALLOW):
            return f"unknown permission type {self.permission_type}"
        return None

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ANY and acl.resource_type != self.resource_type:
            return False
        if not self._pattern_matches(acl):
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != ANY and acl.operation != self.operation:
            return False
        return self.permission_type == ANY or acl.permission_type == self.permission_type

    def _pattern_matches(self, acl: AclBinding) -> bool:
        name = self.resource_name
        if self.pattern_type == MATCH:
            if name is None:
                return True
            if acl.pattern_type == LITERAL:
                return acl.resource_name in (name, WILDCARD)
            return name.startswith(acl.resource_name)
        if self.pattern_type != ANY and acl.pattern_type != self.pattern_type:
            return False
        return name is None or acl.resource_name == name


def binding_problem(acl: AclBinding) -> str | None:
    """Why CreateAcls refuses this binding (INVALID_REQUEST, as Kafka), or None."""
    if acl.resource_type not in RESOURCE_TYPES:
        return f"invalid resource type {acl.resource_type}"
    if acl.pattern_type not in (LITERAL, PREFIXED):
        return f"invalid pattern type {acl.pattern_type}: only LITERAL and PREFIXED"
    if acl.operation not in OPERATIONS:
        return f"invalid operation {acl.operation}"
    if acl.permission_type not in (ALLOW, DENY):
        return f"invalid permission type {acl.permission_type}"
    kind, sep, name = acl.principal.partition(":")
    if not sep or not kind or not name:
        return f"invalid principal {acl.principal!r}: expected Type:name, e.g. User:alice"
    if not acl.host:
        return "empty host"
    if not acl.resource_name:
        return "empty resource name"
    if acl.resource_type == CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"the only valid name for a CLUSTER resource is {CLUSTER_NAME}"
    return None


class Authorizer:
    """The ACLs of one data directory and the decision over them."""

    def __init__(
        self,
        data_dir: str,
        *,
        super_users: frozenset[str] = frozenset(),
        allow_if_no_acl: bool = False,
    ) -> None:
        self.path = os.path.join(data_dir, ACLS_FILE)
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self.acls: list[AclBinding] = self._load()

    def _load(self) -> list[AclBinding]:
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as e:
            raise KafkalogError(f"{self.path}: not an ACL file ({e})") from None
        try:
            return [AclBinding(**entry) for entry in data["acls"]]
        except (KeyError, TypeError) as e:
            raise KafkalogError(f"{self.path}: not an ACL file ({e})") from None

    def _save(self) -> None:
        folder = os.path.dirname(self.path) or "."
        fd, tmp = tempfile.mkstemp(prefix=ACLS_FILE, suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"format": 1, "acls": [asdict(a) for a in self.acls]}, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def add(self, bindings: list[AclBinding]) -> None:
        new = [b for b in dict.fromkeys(bindings) if b not in self.acls]
        if new:
            self.acls.extend(new)
            self._save()

    def remove(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """The bindings each filter deleted (a binding two filters match is listed under
        both, as Kafka lists it)."""
        matched = [[a for a in self.acls if f.matches(a)] for f in filters]
        gone = {a for group in matched for a in group}
        if gone:
            self.acls = [a for a in self.acls if a not in gone]
            self._save()
        return matched

    # -- the decision ----------------------------------------------------------------------
    def _applying(self, resource_type: int, name: str) -> list[AclBinding]:
        return [
            a
            for a in self.acls
            if a.resource_type == resource_type
            and (
                (a.pattern_type == LITERAL and a.resource_name in (name, WILDCARD))
                or (a.pattern_type == PREFIXED and name.startswith(a.resource_name))
            )
        ]

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        applying = self._applying(resource_type, name)
        if not applying:
            return self.allow_if_no_acl
        mine = [
            a
            for a in applying
            if a.principal in (principal, "User:*") and a.host in (host, WILDCARD)
        ]
        if any(a.permission_type == DENY and a.operation in (operation, ALL) for a in mine):
            return False
        allowed_by = IMPLIED.get(operation, {operation}) | {ALL}
        return any(a.permission_type == ALLOW and a.operation in allowed_by for a in mine)

    def authorize_any(self, principal: str, host: str, operation: int, resource_type: int) -> bool:
        """Whether ``operation`` is allowed on some resource of the type (Kafka's
        ``authorizeByResourceType``, used for idempotent producers, KIP-679): an ALLOW that
        applies to the caller, unless a DENY on every name of the type (literal ``*`` or
        prefix ``""``) or on the very pattern denies it."""
        if principal in self.super_users:
            return True
        mine = [
            a
            for a in self.acls
            if a.resource_type == resource_type
            and a.principal in (principal, "User:*")
            and a.host in (host, WILDCARD)
            and a.operation in (operation, ALL)
        ]
        denied = [a for a in mine if a.permission_type == DENY]
        if any(
            (a.pattern_type == LITERAL and a.resource_name == WILDCARD)
            or (a.pattern_type == PREFIXED and a.resource_name == "")
            for a in denied
        ):
            return False
        for a in mine:
            if a.permission_type != ALLOW:
                continue
            if not any(
                d.resource_name == a.resource_name
                or (d.pattern_type == PREFIXED and a.resource_name.startswith(d.resource_name))
                for d in denied
            ):
                return True
        return self.allow_if_no_acl and not any(a.resource_type == resource_type for a in self.acls)
