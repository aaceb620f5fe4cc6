"""The ACL authorizer decides as Kafka's StandardAuthorizer does, and the CreateAcls /
DescribeAcls / DeleteAcls helpers check and match as Kafka's do."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onceflow.config import AUTHORIZER_CLASS_NAMES
from onceflow.errors import ErrorCode
from onceflow.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from onceflow.security.authorizer import (
    Authorizer,
    decode_bindings,
    encode_bindings,
    filter_matches,
    parse_super_users,
    validate_binding,
    validate_filter,
)
from onceflow.security.session import Session

Op = AclOperation
RT = ResourceType
PT = PatternType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = PT.LITERAL, PT.PREFIXED

ALICE = Session("User:alice", "10.0.0.1")
BOB = Session("User:bob", "10.0.0.2")


def acl(
    name: str,
    op: AclOperation = Op.READ,
    perm: AclPermissionType = ALLOW,
    principal: str = "User:alice",
    pattern: PatternType = LIT,
    rt: ResourceType = RT.TOPIC,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        ResourcePattern(rt, name, pattern), AccessControlEntry(principal, host, op, perm)
    )


def authz(
    *bindings: AclBinding, supers: tuple[str, ...] = (), everyone: bool = False
) -> Authorizer:
    a = Authorizer(supers, allow_everyone_if_no_acl_found=everyone)
    a.replace_all(bindings)
    return a


def test_literal_prefixed_and_wildcard_patterns() -> None:
    a = authz(
        acl("orders"),
        acl("pay-", pattern=PRE),
        acl("*", Op.WRITE),
        acl("g", rt=RT.GROUP),
    )
    assert a.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    assert not a.authorize(ALICE, Op.READ, RT.TOPIC, "orders2")  # literal is exact
    assert a.authorize(ALICE, Op.READ, RT.TOPIC, "pay-in")
    assert a.authorize(ALICE, Op.READ, RT.TOPIC, "pay-")
    assert not a.authorize(ALICE, Op.READ, RT.TOPIC, "pay")
    assert a.authorize(ALICE, Op.WRITE, RT.TOPIC, "anything")  # LITERAL * matches every name
    assert not a.authorize(ALICE, Op.READ, RT.TOPIC, "anything")
    assert not a.authorize(ALICE, Op.READ, RT.GROUP, "orders")  # resource types are separate
    assert a.authorize(ALICE, Op.READ, RT.GROUP, "g")
    assert not a.authorize(BOB, Op.READ, RT.TOPIC, "orders")
    # a PREFIXED "*" is the literal prefix "*", not a wildcard
    b = authz(acl("*", pattern=PRE))
    assert not b.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    assert b.authorize(ALICE, Op.READ, RT.TOPIC, "*x")


def test_deny_wins_over_allow_by_operation_all_and_wildcard_principal() -> None:
    base = (acl("orders", Op.ALL), acl("ord", Op.READ, pattern=PRE))
    assert authz(*base).authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    for deny in (
        acl("orders", Op.READ, DENY),
        acl("orders", Op.ALL, DENY),
        acl("orders", Op.READ, DENY, principal="User:*"),
        acl("*", Op.READ, DENY),
        acl("or", Op.ALL, DENY, pattern=PRE, principal="User:*"),
    ):
        assert not authz(*base, deny).authorize(ALICE, Op.READ, RT.TOPIC, "orders"), deny
    # a DENY for another operation, principal or host leaves the ALLOW alone
    for other in (
        acl("orders", Op.WRITE, DENY),
        acl("orders", Op.READ, DENY, principal="User:bob"),
        acl("orders", Op.READ, DENY, host="10.9.9.9"),
    ):
        assert authz(*base, other).authorize(ALICE, Op.READ, RT.TOPIC, "orders"), other


def test_wildcard_principal_allows_everyone() -> None:
    a = authz(acl("orders", principal="User:*"))
    assert a.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    assert a.authorize(Session("User:ANONYMOUS"), Op.READ, RT.TOPIC, "orders")


def test_host_matching() -> None:
    a = authz(acl("orders", host="10.0.0.1"), acl("orders", Op.WRITE, host="*"))
    assert a.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    elsewhere = Session("User:alice", "10.0.0.9")
    assert not a.authorize(elsewhere, Op.READ, RT.TOPIC, "orders")
    assert a.authorize(elsewhere, Op.WRITE, RT.TOPIC, "orders")
    deny_from = authz(acl("orders", Op.ALL), acl("orders", Op.READ, DENY, host="10.0.0.9"))
    assert deny_from.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    assert not deny_from.authorize(elsewhere, Op.READ, RT.TOPIC, "orders")


@pytest.mark.parametrize("op", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.ALL])
def test_describe_is_implied_by_read_write_delete_alter(op: AclOperation) -> None:
    assert authz(acl("t", op)).authorize(ALICE, Op.DESCRIBE, RT.TOPIC, "t")


@pytest.mark.parametrize("op", [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.CLUSTER_ACTION])
def test_describe_is_not_implied_by_others(op: AclOperation) -> None:
    assert not authz(acl("t", op)).authorize(ALICE, Op.DESCRIBE, RT.TOPIC, "t")


def test_implication_rules() -> None:
    assert authz(acl("t", Op.ALTER_CONFIGS)).authorize(ALICE, Op.DESCRIBE_CONFIGS, RT.TOPIC, "t")
    assert not authz(acl("t", Op.DESCRIBE_CONFIGS)).authorize(
        ALICE, Op.ALTER_CONFIGS, RT.TOPIC, "t"
    )
    assert not authz(acl("t", Op.DESCRIBE)).authorize(ALICE, Op.READ, RT.TOPIC, "t")
    # implication is for ALLOW only: a DENY READ does not deny DESCRIBE
    a = authz(acl("t", Op.DESCRIBE), acl("t", Op.READ, DENY))
    assert a.authorize(ALICE, Op.DESCRIBE, RT.TOPIC, "t")
    assert not a.authorize(ALICE, Op.READ, RT.TOPIC, "t")
    assert not authz(acl("t", Op.READ), acl("t", Op.DESCRIBE, DENY)).authorize(
        ALICE, Op.DESCRIBE, RT.TOPIC, "t"
    )


def test_super_users_pass_any_deny() -> None:
    a = authz(acl("*", Op.ALL, DENY, principal="User:*"), supers=("User:admin",))
    admin = Session("User:admin", "1.2.3.4")
    assert a.authorize(admin, Op.CLUSTER_ACTION, RT.CLUSTER, "kafka-cluster")
    assert a.authorize(admin, Op.WRITE, RT.TOPIC, "x")
    assert not a.authorize(ALICE, Op.WRITE, RT.TOPIC, "x")
    assert Authorizer(["User:admin"]).authorize(admin, Op.READ, RT.GROUP, "g")


def test_allow_everyone_only_when_the_resource_has_no_acls_at_all() -> None:
    a = authz(
        acl("owned", Op.READ, principal="User:bob"),
        acl("denied", Op.WRITE, DENY, principal="User:bob"),
        acl("pre", Op.READ, principal="User:bob", pattern=PRE),
        everyone=True,
    )
    assert a.authorize(ALICE, Op.READ, RT.TOPIC, "free")
    assert a.authorize(ALICE, Op.READ, RT.GROUP, "owned")  # other resource type
    assert not a.authorize(ALICE, Op.READ, RT.TOPIC, "owned")  # bob's ACL exists
    assert not a.authorize(ALICE, Op.READ, RT.TOPIC, "denied")  # even only a DENY for bob
    assert not a.authorize(ALICE, Op.READ, RT.TOPIC, "prefix")  # covered by a PREFIXED ACL
    assert not authz(everyone=False).authorize(ALICE, Op.READ, RT.TOPIC, "free")
    # an ACL for another operation also counts as "an ACL on the resource"
    b = authz(acl("t", Op.WRITE), everyone=True)
    assert not b.authorize(ALICE, Op.READ, RT.TOPIC, "t")
    assert (
        authz(acl("*", Op.WRITE, principal="User:bob"), everyone=True).authorize(
            ALICE, Op.READ, RT.TOPIC, "any"
        )
        is False
    )


def test_authorize_any_follows_kafkas_authorize_by_resource_type() -> None:
    w = Op.WRITE

    def any_(*bindings: AclBinding, everyone: bool = False, s: Session = ALICE) -> bool:
        return authz(*bindings, everyone=everyone).authorize_any(s, w, RT.TOPIC)

    assert not any_()
    assert any_(everyone=True)
    assert any_(acl("t", w))
    assert any_(acl("t", Op.ALL))
    assert any_(acl("t", w, principal="User:*"))
    assert not any_(acl("t", Op.READ))  # only the operation itself or ALL
    assert not any_(acl("t", Op.WRITE, rt=RT.GROUP))
    assert not any_(acl("t", w, host="10.9.9.9"))
    assert not any_(acl("t", w), acl("t", w, DENY))  # literal deny cancels literal allow
    assert not any_(acl("t", w), acl("t", w, DENY, pattern=PRE))  # prefix deny dominates
    assert not any_(acl("tx", w), acl("t", Op.ALL, DENY, pattern=PRE))
    assert any_(acl("tx", w), acl("tx-", w, DENY, pattern=PRE))  # longer prefix: no
    assert any_(acl("t", w, pattern=PRE), acl("t", w, DENY))  # literal deny leaves prefix allow
    assert not any_(acl("t", w, pattern=PRE), acl("t", w, DENY, pattern=PRE))
    assert any_(acl("t", w), acl("u", w, DENY, pattern=PRE))
    assert any_(acl("*", w))
    assert not any_(acl("*", w), acl("*", w, DENY))  # a wildcard DENY wins over everything
    assert not any_(acl("t", w), acl("*", w, DENY, principal="User:*"))
    assert any_(acl("*", w), acl("t", w, DENY, pattern=PRE))  # wildcard allow beats prefix deny
    assert not any_(acl("t", w, principal="User:bob"))
    # super users pass, and allow.everyone applies when no ACL touches the probe name
    assert authz(acl("*", w, DENY, principal="User:*"), supers=("User:alice",)).authorize_any(
        ALICE, w, RT.TOPIC
    )
    assert any_(acl("t", w, DENY), everyone=True)
    assert not any_(acl("*", w, DENY, principal="User:bob"), everyone=True)


def test_filter_only_values_are_refused_by_authorize() -> None:
    a = Authorizer()
    with pytest.raises(ValueError, match="concrete"):
        a.authorize(ALICE, Op.ANY, RT.TOPIC, "t")
    with pytest.raises(ValueError, match="concrete"):
        a.authorize_any(ALICE, Op.WRITE, RT.ANY)


def test_replace_all_swaps_the_whole_set_and_refuses_invalid_bindings() -> None:
    a = authz(acl("a"), acl("b", pattern=PRE))
    assert a.bindings == {acl("a"), acl("b", pattern=PRE)}
    a.replace_all([acl("c")])
    assert a.bindings == frozenset({acl("c")})
    assert not a.authorize(ALICE, Op.READ, RT.TOPIC, "a")
    assert not a.authorize(ALICE, Op.READ, RT.TOPIC, "bx")
    assert a.authorize(ALICE, Op.READ, RT.TOPIC, "c")
    with pytest.raises(ValueError, match="MATCH"):
        a.replace_all([acl("d", pattern=PT.MATCH)])
    assert a.bindings == frozenset({acl("c")})  # unchanged after a refusal


def test_audit_lines(caplog: pytest.LogCaptureFixture) -> None:
    a = authz(acl("orders", Op.READ), acl("orders", Op.WRITE, DENY, principal="User:*"))
    bob = Session("User:bob", "127.0.0.1")
    with caplog.at_level(logging.DEBUG, logger="onceflow.audit"):
        assert not a.authorize(bob, Op.WRITE, RT.TOPIC, "orders")
        assert a.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
        assert not a.authorize(bob, Op.READ, RT.TOPIC, "orders", log_denied=False)
        assert not a.authorize(bob, Op.READ, RT.GROUP, "bad\ngroup")
        assert not a.authorize_any(bob, Op.IDEMPOTENT_WRITE, RT.CLUSTER)
    records = [r for r in caplog.records if r.name == "onceflow.audit"]
    assert [r.levelno for r in records] == [logging.INFO, logging.DEBUG, logging.INFO, logging.INFO]
    lines = [r.getMessage() for r in records]
    assert lines[0].startswith(
        "Principal = User:bob is Denied operation = WRITE from host = 127.0.0.1 "
        "on resource = TOPIC:LITERAL:orders"
    )
    assert "DENY WRITE for User:* from * on LITERAL:orders" in lines[0]
    assert lines[1].startswith("Principal = User:alice is Allowed operation = READ")
    assert "\n" not in lines[2] and "GROUP:LITERAL:bad\\ngroup" in lines[2]
    assert "is Denied operation = IDEMPOTENT_WRITE" in lines[3] and "any CLUSTER" in lines[3]


def test_validate_binding_gives_kafkas_errors() -> None:
    ok = acl("t")
    assert validate_binding(ok) is None
    assert validate_binding(acl("kafka-cluster", Op.ALTER, rt=RT.CLUSTER)) is None
    cases = {
        acl(
            "other", rt=RT.CLUSTER
        ): "The only valid name for the CLUSTER resource is kafka-cluster",
        acl(""): "Invalid empty resource name",
        acl("t", rt=RT.ANY): "Invalid resourceType ANY",
        acl("t", rt=RT.UNKNOWN): "Invalid resourceType UNKNOWN",
        acl("t", pattern=PT.MATCH): "Invalid patternType MATCH",
        acl("t", pattern=PT.ANY): "Invalid patternType ANY",
        acl("t", Op.ANY): "Invalid operation ANY",
        acl("t", Op.UNKNOWN): "Invalid operation UNKNOWN",
        acl("t", perm=AclPermissionType.ANY): "Invalid permissionType ANY",
        acl("t", principal="alice"): "Could not parse principal from `alice`",
    }
    for binding, message in cases.items():
        result = validate_binding(binding)
        assert result is not None and result[0] is ErrorCode.invalid_request, binding
        assert result[1].startswith(message), result


def test_validate_filter() -> None:
    assert validate_filter(AclBindingFilter()) is None
    assert validate_filter(AclBindingFilter(pattern_type=PT.MATCH, name="x")) is None
    bad = {
        AclBindingFilter(resource_type=RT.UNKNOWN): "Unknown patternFilter.",
        AclBindingFilter(pattern_type=PT.UNKNOWN): "Unknown patternFilter.",
        AclBindingFilter(operation=Op.UNKNOWN): "Unknown entryFilter.",
        AclBindingFilter(permission=AclPermissionType.UNKNOWN): "Unknown entryFilter.",
    }
    for f, message in bad.items():
        assert validate_filter(f) == (ErrorCode.invalid_request, message)


def test_filter_matches() -> None:
    lit, star, pre = acl("orders"), acl("*"), acl("ord", pattern=PRE)
    other_pre = acl("x", pattern=PRE)
    everything = [lit, star, pre, other_pre]

    def found(f: AclBindingFilter) -> list[AclBinding]:
        return [b for b in everything if filter_matches(f, b)]

    assert found(AclBindingFilter()) == everything
    assert found(AclBindingFilter(name="orders")) == [lit]  # ANY: exact names only
    assert found(AclBindingFilter(name="*")) == [star]
    assert found(AclBindingFilter(name="ord", pattern_type=PRE)) == [pre]
    assert found(AclBindingFilter(name="ord", pattern_type=LIT)) == []
    assert found(AclBindingFilter(pattern_type=PRE)) == [pre, other_pre]
    # MATCH: every ACL that applies to the resource named
    assert found(AclBindingFilter(name="orders", pattern_type=PT.MATCH)) == [lit, star, pre]
    assert found(AclBindingFilter(name="xyz", pattern_type=PT.MATCH)) == [star, other_pre]
    assert found(AclBindingFilter(pattern_type=PT.MATCH)) == everything
    assert found(AclBindingFilter(resource_type=RT.GROUP)) == []
    # entry fields: exact, no wildcard expansion
    wild = acl("t", principal="User:*", host="10.0.0.1", op=Op.WRITE, perm=DENY)
    assert filter_matches(AclBindingFilter(principal="User:*"), wild)
    assert not filter_matches(AclBindingFilter(principal="User:*"), lit)
    assert filter_matches(AclBindingFilter(host="10.0.0.1"), wild)
    assert not filter_matches(AclBindingFilter(host="10.0.0.1"), lit)
    assert filter_matches(AclBindingFilter(operation=Op.WRITE, permission=DENY), wild)
    assert not filter_matches(AclBindingFilter(operation=Op.ALL), wild)
    assert not filter_matches(AclBindingFilter(permission=ALLOW), wild)


def test_parse_super_users() -> None:
    assert parse_super_users("") == frozenset()
    assert parse_super_users(" User:admin ; User:broker;;") == {"User:admin", "User:broker"}
    assert parse_super_users("User:CN=a,O=b") == {"User:CN=a,O=b"}
    for bad in ("admin", "User:", ":admin", "User:a;bob"):
        with pytest.raises(ValueError, match=r"super\.users"):
            parse_super_users(bad)


def test_encode_decode_round_trip_and_format() -> None:
    bindings = {
        acl("orders"),
        acl("pay-", Op.ALL, DENY, "User:*", PRE, RT.TOPIC, "10.0.0.1"),
        acl("kafka-cluster", Op.CLUSTER_ACTION, rt=RT.CLUSTER, principal="User:CN=b,O=x"),
        acl("grüppe", rt=RT.GROUP),
    }
    raw = encode_bindings(bindings)
    assert decode_bindings(raw) == bindings
    assert encode_bindings(reversed(sorted(bindings, key=str))) == raw  # canonical
    doc = json.loads(raw)
    assert doc["version"] == 1
    assert {"resource_type": "TOPIC", "pattern_type": "PREFIXED", "name": "pay-"}.items() <= (
        next(row for row in doc["acls"] if row["name"] == "pay-").items()
    )
    assert decode_bindings(encode_bindings([])) == frozenset()


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\xfe",
        b"not json",
        b"[]",
        b'{"version": 2, "acls": []}',
        b'{"version": 1}',
        b'{"version": 1, "acls": [1]}',
        b'{"version": 1, "acls": [{"resource_type": "TOPIC"}]}',
        json.dumps(
            {
                "version": 1,
                "acls": [dict(json.loads(encode_bindings([acl("t")]))["acls"][0], operation="FLY")],
            }
        ).encode(),
        json.dumps(
            {
                "version": 1,
                "acls": [dict(json.loads(encode_bindings([acl("t")]))["acls"][0], name=7)],
            }
        ).encode(),
        json.dumps(
            {
                "version": 1,
                "acls": [
                    dict(json.loads(encode_bindings([acl("t")]))["acls"][0], pattern_type="MATCH")
                ],
            }
        ).encode(),
    ],
)
def test_decode_refuses_corrupt_input(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_bindings(raw)


def test_kafka_class_names_are_accepted() -> None:
    assert "org.apache.kafka.metadata.authorizer.StandardAuthorizer" in AUTHORIZER_CLASS_NAMES
    assert "kafka.security.authorizer.AclAuthorizer" in AUTHORIZER_CLASS_NAMES


# --- against a brute-force model of Kafka's rules ---------------------------------------

NAMES = ["a", "ab", "abc", "b", "*"]
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
HOSTS = ["*", "10.0.0.1", "10.0.0.2"]
OPS = [Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER, Op.ALL, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS]
IMPLIES = {
    Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
    Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS},
}

bindings_st = st.builds(
    acl,
    name=st.sampled_from(NAMES),
    op=st.sampled_from(OPS),
    perm=st.sampled_from([ALLOW, DENY]),
    principal=st.sampled_from(PRINCIPALS),
    pattern=st.sampled_from([LIT, PRE]),
    rt=st.sampled_from([RT.TOPIC, RT.GROUP]),
    host=st.sampled_from(HOSTS),
)


def model(
    bindings: set[AclBinding], everyone: bool, s: Session, op: AclOperation, name: str
) -> bool:
    on_resource = [
        b
        for b in bindings
        if b.pattern.resource_type is RT.TOPIC
        and (
            (b.pattern.pattern_type is LIT and b.pattern.name in (name, "*"))
            or (b.pattern.pattern_type is PRE and name.startswith(b.pattern.name))
        )
    ]
    if not on_resource:
        return everyone
    mine = [
        b.entry
        for b in on_resource
        if b.entry.principal in (s.principal, "User:*") and b.entry.host in (s.client_host, "*")
    ]
    if any(e.permission is DENY and e.operation in (op, Op.ALL) for e in mine):
        return False
    return any(
        e.permission is ALLOW and e.operation in {op, Op.ALL} | IMPLIES.get(op, set()) for e in mine
    )


@settings(max_examples=300)
@given(
    st.sets(bindings_st, max_size=12),
    st.booleans(),
    st.sampled_from(PRINCIPALS[:2]),
    st.sampled_from(HOSTS[1:]),
    st.sampled_from([o for o in OPS if o is not Op.ALL]),
    st.sampled_from(["a", "ab", "abc", "abd", "b", "c", "*", ""]),
)
def test_authorize_agrees_with_a_brute_force_model(
    bindings: set[AclBinding],
    everyone: bool,
    principal: str,
    host: str,
    op: AclOperation,
    name: str,
) -> None:
    s = Session(principal, host)
    a = authz(*bindings, everyone=everyone)
    assert a.authorize(s, op, RT.TOPIC, name) == model(bindings, everyone, s, op, name)
