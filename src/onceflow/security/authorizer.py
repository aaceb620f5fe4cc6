"""Kafka's ACL authorizer (StandardAuthorizer, AclAuthorizer), in memory.

The broker persists the ACLs itself and hands the whole set to `Authorizer.replace_all`;
this module only decides. `authorize` runs on every request, so the bindings are indexed
per resource type: literal names in a dict, prefixed names in a dict probed once per distinct
prefix length, each then keyed by principal. A decision touches only the ACLs that can match.

The pure helpers below (`validate_binding`, `validate_filter`, `filter_matches`,
`encode_bindings`, ...) are what CreateAcls, DescribeAcls and DeleteAcls need, with Kafka's
error codes and messages.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from onceflow.errors import ErrorCode
from onceflow.security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from onceflow.security.session import Session

__all__ = [
    "Authorizer",
    "decode_bindings",
    "encode_bindings",
    "filter_matches",
    "parse_super_users",
    "validate_binding",
    "validate_filter",
]

_audit = logging.getLogger("onceflow.audit")

_ALL = AclOperation.ALL
_DENY = AclPermissionType.DENY
_FILTER_ONLY_OPS = frozenset({AclOperation.UNKNOWN, AclOperation.ANY})
_FILTER_ONLY_TYPES = frozenset({ResourceType.UNKNOWN, ResourceType.ANY})

# The ALLOW operations that grant each operation: itself and ALL, and for DESCRIBE and
# DESCRIBE_CONFIGS the operations that imply them. Implication never applies to DENY: a
# DENY READ does not deny DESCRIBE.
_IMPLIES: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}
_ALLOWED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    op: frozenset({op, _ALL}) | _IMPLIES.get(op, frozenset()) for op in AclOperation
}

# Kafka's default authorizeByResourceType first asks about a resource of this name, so that
# super users (and allow.everyone.if.no.acl.found) pass whatever DENY ACLs say.
_PROBE_NAME = "hardcode"

# pattern name -> principal -> that principal's entries on the pattern
_ByPrincipal = dict[str, tuple[AccessControlEntry, ...]]
_ByName = dict[str, _ByPrincipal]


@dataclass(frozen=True, slots=True)
class _TypeIndex:
    literal: _ByName
    prefixed: _ByName
    prefix_lengths: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _State:
    bindings: frozenset[AclBinding]
    by_type: Mapping[ResourceType, _TypeIndex]


def _build_state(bindings: frozenset[AclBinding]) -> _State:
    groups: dict[tuple[ResourceType, PatternType], dict[str, dict[str, list[AccessControlEntry]]]]
    groups = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for b in bindings:
        p = b.pattern
        groups[p.resource_type, p.pattern_type][p.name][b.entry.principal].append(b.entry)

    def freeze(key: tuple[ResourceType, PatternType]) -> _ByName:
        return {
            name: {principal: tuple(entries) for principal, entries in by_principal.items()}
            for name, by_principal in groups.get(key, {}).items()
        }

    by_type: dict[ResourceType, _TypeIndex] = {}
    for rt in {rt for rt, _ in groups}:
        prefixed = freeze((rt, PatternType.PREFIXED))
        by_type[rt] = _TypeIndex(
            literal=freeze((rt, PatternType.LITERAL)),
            prefixed=prefixed,
            prefix_lengths=tuple(sorted({len(name) for name in prefixed})),
        )
    return _State(bindings, by_type)


def _clean(text: str) -> str:
    """One log line per decision, whatever control characters a group id or a
    certificate's name carries."""
    return text if text.isprintable() else repr(text)[1:-1]


# What decided: a default ("SuperUser", "DefaultDeny", ...) or the matching ACL as
# (pattern type, pattern name, entry). Turned into text only when it is logged.
_Rule = str | tuple[str, str, AccessControlEntry]


def _rule_text(rule: _Rule) -> str:
    if isinstance(rule, str):
        return rule
    pattern_type, name, entry = rule
    return _clean(
        f"{entry.permission.name} {entry.operation.name} for {entry.principal} "
        f"from {entry.host} on {pattern_type}:{name}"
    )


class Authorizer:
    """Kafka's ACL semantics: super users pass; a matching DENY wins over any ALLOW; with no
    ACL at all on a resource, `allow.everyone.if.no.acl.found` decides; otherwise deny.

    An ACL matches a request when its pattern matches the resource (LITERAL name or `*`, or a
    PREFIXED prefix of the name), its principal is the session's or `User:*`, and its host is
    the client's address or `*`.
    """

    def __init__(
        self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False
    ) -> None:
        self._super_users = frozenset(super_users)
        self._allow_everyone = allow_everyone_if_no_acl_found
        self._state = _build_state(frozenset())

    @property
    def super_users(self) -> frozenset[str]:
        return self._super_users

    @property
    def allow_everyone_if_no_acl_found(self) -> bool:
        return self._allow_everyone

    @property
    def bindings(self) -> frozenset[AclBinding]:
        return self._state.bindings

    def replace_all(self, bindings: Iterable[AclBinding]) -> None:
        """Swap in a new ACL set in one assignment, so a concurrent decision sees either
        the old set or the new one, never a mix. Raises ValueError on a binding that
        CreateAcls would refuse (an ANY or UNKNOWN value, an empty name, ...)."""
        frozen = frozenset(bindings)
        for b in frozen:
            problem = validate_binding(b)
            if problem is not None:
                raise ValueError(f"invalid ACL binding {b}: {problem[1]}")
        self._state = _build_state(frozen)

    def authorize(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        log_denied: bool = True,
    ) -> bool:
        """May `session` do `operation` on the resource? A denial is logged at INFO unless
        `log_denied` is False (Kafka's logIfDenied: a Metadata request for all topics
        filters silently, one that names a topic does not)."""
        _check_concrete(operation, resource_type)
        allowed, rule = self._decide(session, operation, resource_type, name)
        if not allowed and log_denied:
            _audit.info(
                "%s based on rule %s",
                _audit_line(session, "Denied", operation, f"{resource_type.name}:LITERAL:{name}"),
                _rule_text(rule),
            )
        elif allowed and _audit.isEnabledFor(logging.DEBUG):
            _audit.debug(
                "%s based on rule %s",
                _audit_line(session, "Allowed", operation, f"{resource_type.name}:LITERAL:{name}"),
                _rule_text(rule),
            )
        return allowed

    def authorize_any(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        *,
        log_denied: bool = True,
    ) -> bool:
        """May `session` do `operation` on at least one resource of the type (Kafka's
        authorizeByResourceType, KIP-679)? Used where Kafka accepts WRITE on any topic in
        place of IDEMPOTENT_WRITE on the cluster.

        Only ACLs for exactly `operation` or ALL count (no implied operations). A LITERAL `*`
        DENY denies; a LITERAL `*` ALLOW allows; otherwise some ALLOW pattern must survive the
        DENY patterns: a LITERAL allow is cancelled by the same LITERAL deny, and any allow
        by a PREFIXED deny that is a prefix of its name.
        """
        _check_concrete(operation, resource_type)
        allowed, _ = self._decide(session, operation, resource_type, _PROBE_NAME)
        if not allowed:
            allowed = self._any_survives(session, operation, resource_type)
        if not allowed and log_denied:
            _audit.info(
                "%s", _audit_line(session, "Denied", operation, f"any {resource_type.name}")
            )
        elif allowed and _audit.isEnabledFor(logging.DEBUG):
            _audit.debug(
                "%s", _audit_line(session, "Allowed", operation, f"any {resource_type.name}")
            )
        return allowed

    def _decide(
        self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> tuple[bool, _Rule]:
        """The decision and the rule that made it, for the audit line."""
        if session.principal in self._super_users:
            return True, "SuperUser"
        index = self._state.by_type.get(resource_type)
        if index is None:
            return self._no_acls()
        matching: list[tuple[str, str, _ByPrincipal]] = []
        for key in (name, WILDCARD) if name != WILDCARD else (name,):
            by_principal = index.literal.get(key)
            if by_principal is not None:
                matching.append(("LITERAL", key, by_principal))
        for length in index.prefix_lengths:
            if length > len(name):
                break
            by_principal = index.prefixed.get(name[:length])
            if by_principal is not None:
                matching.append(("PREFIXED", name[:length], by_principal))
        if not matching:
            return self._no_acls()

        principals = _principals(session)
        host = session.client_host
        allowing = _ALLOWED_BY[operation]
        allow_rule: _Rule | None = None
        for pattern_type, pattern_name, by_principal in matching:
            for principal in principals:
                for entry in by_principal.get(principal, ()):
                    if entry.host != host and entry.host != WILDCARD:
                        continue
                    if entry.permission is _DENY:
                        if entry.operation is operation or entry.operation is _ALL:
                            return False, (pattern_type, pattern_name, entry)
                    elif allow_rule is None and entry.operation in allowing:
                        allow_rule = (pattern_type, pattern_name, entry)
        if allow_rule is not None:
            return True, allow_rule
        return False, "DefaultDeny"

    def _no_acls(self) -> tuple[bool, _Rule]:
        return (True, "DefaultAllow") if self._allow_everyone else (False, "DefaultDeny")

    def _any_survives(
        self, session: Session, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        index = self._state.by_type.get(resource_type)
        if index is None:
            return False
        principals = _principals(session)
        host = session.client_host

        def relevant(entries: _ByPrincipal) -> Iterable[AccessControlEntry]:
            for principal in principals:
                for entry in entries.get(principal, ()):
                    if (entry.host == host or entry.host == WILDCARD) and (
                        entry.operation is operation or entry.operation is _ALL
                    ):
                        yield entry

        allow: dict[PatternType, set[str]] = {
            PatternType.LITERAL: set(),
            PatternType.PREFIXED: set(),
        }
        deny: dict[PatternType, set[str]] = {
            PatternType.LITERAL: set(),
            PatternType.PREFIXED: set(),
        }
        for pattern_type, names in (
            (PatternType.LITERAL, index.literal),
            (PatternType.PREFIXED, index.prefixed),
        ):
            for name, entries in names.items():
                for entry in relevant(entries):
                    (deny if entry.permission is _DENY else allow)[pattern_type].add(name)
        if WILDCARD in deny[PatternType.LITERAL]:
            return False
        if WILDCARD in allow[PatternType.LITERAL]:
            return True

        denied_prefixes = deny[PatternType.PREFIXED]

        def dominated(name: str) -> bool:
            return any(name[:n] in denied_prefixes for n in range(1, len(name) + 1))

        literal = allow[PatternType.LITERAL] - deny[PatternType.LITERAL]
        return any(not dominated(name) for name in literal | allow[PatternType.PREFIXED])


def _principals(session: Session) -> tuple[str, ...]:
    """The ACL principals that apply to the session: its own and `User:*`."""
    p = session.principal
    return (p,) if p == WILDCARD_PRINCIPAL else (p, WILDCARD_PRINCIPAL)


def _check_concrete(operation: AclOperation, resource_type: ResourceType) -> None:
    if operation in _FILTER_ONLY_OPS or resource_type in _FILTER_ONLY_TYPES:
        raise ValueError(
            f"authorization needs a concrete operation and resource type, "
            f"not {operation.name} on {resource_type.name}"
        )


def _audit_line(session: Session, verdict: str, operation: AclOperation, resource: str) -> str:
    return (
        f"Principal = {_clean(session.principal)} is {verdict} operation = {operation.name} "
        f"from host = {_clean(session.client_host)} on resource = {_clean(resource)}"
    )


def _invalid(message: str) -> tuple[ErrorCode, str]:
    return ErrorCode.invalid_request, message


def validate_binding(b: AclBinding) -> tuple[ErrorCode, str] | None:
    """Kafka's CreateAcls checks (AclApis, then the controller's validateNewAcl), in its
    order and with its messages: the error for the binding's result, or None if valid."""
    p, e = b.pattern, b.entry
    if p.resource_type is ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return _invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not p.name:
        return _invalid("Invalid empty resource name")
    if p.resource_type in _FILTER_ONLY_TYPES:
        return _invalid(f"Invalid resourceType {p.resource_type.name}")
    if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return _invalid(f"Invalid patternType {p.pattern_type.name}")
    if e.operation in _FILTER_ONLY_OPS:
        return _invalid(f"Invalid operation {e.operation.name}")
    if e.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return _invalid(f"Invalid permissionType {e.permission.name}")
    if ":" not in e.principal:
        return _invalid(
            f"Could not parse principal from `{e.principal}` (no colon is present "
            "separating the principal type from the principal name)"
        )
    return None


def validate_filter(f: AclBindingFilter) -> tuple[ErrorCode, str] | None:
    """Kafka's check of a DescribeAcls or DeleteAcls filter: UNKNOWN anywhere is refused
    (ANY and MATCH are what filters are for)."""
    if f.resource_type is ResourceType.UNKNOWN or f.pattern_type is PatternType.UNKNOWN:
        return _invalid("Unknown patternFilter.")
    if f.operation is AclOperation.UNKNOWN or f.permission is AclPermissionType.UNKNOWN:
        return _invalid("Unknown entryFilter.")
    return None


def filter_matches(f: AclBindingFilter, b: AclBinding) -> bool:
    """Kafka's AclBindingFilter.matches. None and ANY match anything; principal and host
    compare exactly (a `User:*` filter finds only `User:*` ACLs). Pattern type MATCH with a
    name finds every ACL that would apply to that resource: LITERAL of that name or `*`,
    and PREFIXED patterns the name starts with."""
    p, e = b.pattern, b.entry
    if f.resource_type is not ResourceType.ANY and f.resource_type is not p.resource_type:
        return False
    if f.pattern_type not in (PatternType.ANY, PatternType.MATCH, p.pattern_type):
        return False
    if f.name is not None:
        if f.pattern_type is PatternType.ANY or f.pattern_type is p.pattern_type:
            if f.name != p.name:
                return False
        elif p.pattern_type is PatternType.LITERAL:
            if f.name != p.name and p.name != WILDCARD:
                return False
        elif p.pattern_type is PatternType.PREFIXED:
            if not f.name.startswith(p.name):
                return False
        else:
            return False
    if f.principal is not None and f.principal != e.principal:
        return False
    if f.host is not None and f.host != e.host:
        return False
    if f.operation is not AclOperation.ANY and f.operation is not e.operation:
        return False
    return f.permission is AclPermissionType.ANY or f.permission is e.permission


def parse_super_users(text: str) -> frozenset[str]:
    """Kafka's `super.users`: principals separated by `;` (`User:admin;User:broker`),
    blanks ignored. Raises ValueError naming the first entry that is not `Type:name`."""
    result: set[str] = set()
    for item in text.split(";"):
        principal = item.strip()
        if not principal:
            continue
        kind, sep, name = principal.partition(":")
        if not (kind and sep and name):
            raise ValueError(
                f"super.users: {principal!r} is not a principal; expected Type:name, "
                "e.g. User:admin (separate several with ';')"
            )
        result.add(principal)
    return frozenset(result)


# Stored ACL sets carry enum names, not wire codes, so a file or a znode reads plainly.
_FORMAT_VERSION = 1


def encode_bindings(bindings: Iterable[AclBinding]) -> bytes:
    """A versioned JSON document of the bindings, sorted so equal sets encode equally."""
    rows = sorted(
        (
            {
                "resource_type": b.pattern.resource_type.name,
                "pattern_type": b.pattern.pattern_type.name,
                "name": b.pattern.name,
                "principal": b.entry.principal,
                "host": b.entry.host,
                "operation": b.entry.operation.name,
                "permission": b.entry.permission.name,
            }
            for b in set(bindings)
        ),
        key=lambda row: tuple(row.values()),
    )
    return json.dumps({"version": _FORMAT_VERSION, "acls": rows}, ensure_ascii=False).encode()


def decode_bindings(raw: bytes) -> frozenset[AclBinding]:
    """The bindings of `encode_bindings`' output. Raises ValueError on anything else:
    not JSON, another version, a missing field, an unknown name, an invalid binding."""
    try:
        doc = json.loads(raw)
    except ValueError as exc:  # includes bad UTF-8
        raise ValueError(f"ACL data is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("version") != _FORMAT_VERSION:
        raise ValueError(f"ACL data is not a version {_FORMAT_VERSION} ACL document")
    rows = doc.get("acls")
    if not isinstance(rows, list):
        raise ValueError("ACL data has no 'acls' list")
    result: set[AclBinding] = set()
    for i, row in enumerate(rows):
        try:
            binding = AclBinding(
                ResourcePattern(
                    ResourceType[_text(row, "resource_type")],
                    _text(row, "name"),
                    PatternType[_text(row, "pattern_type")],
                ),
                AccessControlEntry(
                    _text(row, "principal"),
                    _text(row, "host"),
                    AclOperation[_text(row, "operation")],
                    AclPermissionType[_text(row, "permission")],
                ),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"ACL data entry {i} is malformed: {exc!r}") from exc
        problem = validate_binding(binding)
        if problem is not None:
            raise ValueError(f"ACL data entry {i} is invalid: {problem[1]}")
        result.add(binding)
    return frozenset(result)


def _text(row: object, key: str) -> str:
    if not isinstance(row, dict):
        raise TypeError("entry is not an object")
    value = row[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value
