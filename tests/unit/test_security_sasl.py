"""onceflow.security: JAAS parsing, SCRAM credentials and their store form, Kafka's
AlterUserScramCredentials rules, and the broker side of SASL/PLAIN and SASL/SCRAM exchanges
(against scramp's and kafka-python's clients)."""

from __future__ import annotations

import base64
import json
import re

import pytest
import scramp  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import (  # type: ignore[import-untyped]
    ScramClient as KafkaPythonScramClient,
)

from onceflow.errors import ErrorCode
from onceflow.security import sasl as sasl_module
from onceflow.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, parse_jaas_config
from onceflow.security.sasl import (
    SUPPORTED_MECHANISMS,
    SaslFailed,
    SaslServer,
    make_sasl_server,
)
from onceflow.security.scram import (
    SCRAM_MECHANISMS,
    ScramCredential,
    ScramDeletion,
    ScramMechanism,
    ScramUpsertion,
    decode_credentials,
    encode_credentials,
    salted_password,
    user_alteration_error,
    validate_deletion,
    validate_upsertion,
)

SCRAMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SALT = b"0123456789abcdef"
SECRET = "s3cr3t-Pa55"


def generic(mechanism: str) -> str:
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


# --- JAAS ---------------------------------------------------------------------------------


def test_jaas_plain_broker_config() -> None:
    entry = parse_jaas_config(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" user_admin="admin-secret" '
        'user_alice="alice-secret";'
    )
    assert entry.login_module == PLAIN_LOGIN_MODULE
    assert entry.control_flag == "required"
    assert entry.options == {
        "username": "admin",
        "password": "admin-secret",
        "user_admin": "admin-secret",
        "user_alice": "alice-secret",
    }
    assert (entry.username, entry.password) == ("admin", "admin-secret")
    assert entry.plain_users() == {"admin": "admin-secret", "alice": "alice-secret"}
    assert "admin-secret" not in repr(entry)


def test_jaas_scram_config_defines_no_plain_users() -> None:
    entry = parse_jaas_config(
        f'{SCRAM_LOGIN_MODULE} REQUIRED username="alice" password="x" user_bob="y";'
    )
    assert entry.login_module == SCRAM_LOGIN_MODULE
    assert entry.control_flag == "required"
    assert (entry.username, entry.password) == ("alice", "x")
    assert entry.plain_users() == {}  # as Kafka, user_ options count only for PLAIN


@pytest.mark.parametrize(
    ("text", "options"),
    [
        (r'M optional a="q\"uo\\te\n\t";', {"a": 'q"uo\\te\n\t'}),
        (r"M sufficient a='single \'q\'';", {"a": "single 'q'"}),
        (r"M sufficient a=\"x\";", None),  # a backslash outside quotes is no value
        (r'M requisite a="\101\1010\477\8";', {"a": "AA0'7" + "8"}),
        ("M required a=alice_1$x.b-c b=Ünïcode;", {"a": "alice_1$x.b-c", "b": "Ünïcode"}),
        ('M required /* c */ a="x" // comment\n b="y"\n;', {"a": "x", "b": "y"}),
        ('M required a="x" a="y";', {"a": "y"}),  # the last value wins, as in a HashMap
        ('M required "quoted key"="v";', {"quoted key": "v"}),
        ("  M\trequired\r\n;  ", {}),
        ('M required a="line\nb=1";', None),  # a line break ends a quoted string
    ],
)
def test_jaas_tokenizer_follows_java(text: str, options: dict[str, str] | None) -> None:
    if options is None:
        with pytest.raises(ValueError):
            parse_jaas_config(text)
    else:
        assert parse_jaas_config(text).options == options


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Login module not specified"),
        ("  /* only a comment */ ", "Login module not specified"),
        ("M", "control flag not specified"),
        ("M ;", "control flag is not available"),
        ("M maybe;", "Invalid login module control flag 'maybe'"),
        ('M required a="x"', "not terminated by semi-colon"),
        ("M required a;", "Value not specified for key 'a'"),
        ("M required a=;", "Value not specified for key 'a'"),
        ("M required iterations=4096;", "must be quoted"),
        ("M required a=-x;", "must be quoted"),
        ("M required a=x/y;", "not terminated by semi-colon"),  # `/` starts a comment
        ("M required a=x@y;", "Option name expected"),  # `@` is no word character
        ("M required = x;", "Option name expected"),
        ("4 required;", "Login module name not specified"),
        ("M required; N required;", "contains 2 login modules, should be 1 module"),
    ],
)
def test_jaas_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_jaas_config(text)


@pytest.mark.parametrize(
    "text",
    [
        f'M required password="{SECRET}"',
        f'M required username="admin" "{SECRET}";',
        f'M required username="admin" "{SECRET}"=;',
        f'M "{SECRET}" password="x";',
        f'M required password="{SECRET}"; N required password="{SECRET}";',
        f'M required password="{SECRET}" user_a="{SECRET}" 12;',
        f"M required password={SECRET} b;",
    ],
)
def test_jaas_errors_never_echo_a_password(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_jaas_config(text)
    assert SECRET not in str(info.value)


# --- SCRAM credentials ----------------------------------------------------------------------


def test_mechanism_codes_are_kafkas() -> None:
    assert [(m.name, int(m)) for m in ScramMechanism] == [
        ("UNKNOWN", 0),
        ("SCRAM_SHA_256", 1),
        ("SCRAM_SHA_512", 2),
    ]
    assert {n: s.code for n, s in SCRAM_MECHANISMS.items()} == {
        "SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
        "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512,
    }
    assert ScramMechanism.from_code(2).mechanism_name == "SCRAM-SHA-512"
    assert ScramMechanism.from_code(7) is ScramMechanism.UNKNOWN
    assert {(s.min_iterations, s.max_iterations) for s in SCRAM_MECHANISMS.values()} == {
        (4096, 16384)
    }


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_credential_from_salted_password_equals_from_password(mechanism: str) -> None:
    by_password = ScramCredential.from_password(mechanism, "pw", 8192, SALT)
    salted = salted_password(mechanism, "pw", SALT, 8192)
    assert ScramCredential.from_salted_password(mechanism, SALT, salted, 8192) == by_password
    # ...and with scramp's own derivation, for a password SASLprep leaves alone
    auth_info = scramp.ScramMechanism(mechanism).make_auth_info("pw", 8192, SALT)
    assert auth_info == (SALT, by_password.stored_key, by_password.server_key, 8192)


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_verify_password(mechanism: str) -> None:
    cred = ScramCredential.from_password(mechanism, "pä55")
    assert cred.verify_password("pä55")
    assert not cred.verify_password("pä56")
    assert not cred.verify_password("")
    assert not cred.verify_password("\ud800")  # not encodable: refused, no exception
    assert len(cred.salt) == 32 and cred.iterations == 4096


def test_credential_checks_and_repr() -> None:
    for bad in (4095, 16385):
        with pytest.raises(ValueError, match="iterations"):
            ScramCredential.from_password("SCRAM-SHA-256", "pw", bad)
    with pytest.raises(ValueError, match="salt"):
        ScramCredential.from_password("SCRAM-SHA-256", "pw", salt=b"short")
    with pytest.raises(ValueError, match="unknown SCRAM mechanism"):
        ScramCredential.from_password("SCRAM-SHA-1", "pw")
    with pytest.raises(ValueError, match="salted password"):
        ScramCredential.from_salted_password("SCRAM-SHA-256", SALT, b"", 4096)
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pw", salt=SALT)
    with pytest.raises(ValueError, match="32 bytes"):
        ScramCredential("SCRAM-SHA-256", SALT, cred.stored_key[:-1], cred.server_key, 4096)
    shown = repr(cred)
    assert "iterations=4096" in shown
    for secret in (cred.salt, cred.stored_key, cred.server_key):
        assert repr(secret) not in shown


def test_credentials_round_trip_and_hold_no_password() -> None:
    creds = {
        "alice": {m: ScramCredential.from_password(m, "hunter2") for m in SCRAMS},
        "bob,=é": {"SCRAM-SHA-512": ScramCredential.from_password("SCRAM-SHA-512", "x", 16384)},
        "carol": {},
    }
    raw = encode_credentials(creds)
    assert decode_credentials(raw) == creds
    assert decode_credentials(raw.decode()) == creds
    assert b"hunter2" not in raw
    assert json.loads(raw)["version"] == 1


def _raw(doc: object) -> bytes:
    return json.dumps(doc).encode()


def _good_doc() -> dict[str, object]:
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pw", salt=SALT)
    return json.loads(encode_credentials({"alice": {"SCRAM-SHA-256": cred}}))  # type: ignore[no-any-return]


def _with(path: tuple[str, ...], value: object) -> bytes:
    doc = _good_doc()
    node: dict[str, object] = doc
    for key in path[:-1]:
        node = node[key]  # type: ignore[assignment]
    node[path[-1]] = value
    return _raw(doc)


ENTRY = ("users", "alice", "SCRAM-SHA-256")


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        _raw([]),
        _raw({"users": {}}),
        _raw({"version": 2, "users": {}}),
        _raw({"version": True, "users": {}}),
        _raw({"version": 1, "users": []}),
        _raw({"version": 1, "users": {}, "extra": 1}),
        _with(("users", "alice"), []),
        _with(ENTRY, "x"),
        _with((*ENTRY, "salt"), "***"),
        _with((*ENTRY, "salt"), 5),
        _with((*ENTRY, "salt"), ""),
        _with((*ENTRY, "stored_key"), base64.b64encode(b"short").decode()),
        _with((*ENTRY, "iterations"), "4096"),
        _with((*ENTRY, "iterations"), 1),
        _with((*ENTRY, "iterations"), 4096.0),
        _with((*ENTRY, "extra"), 1),
        _raw({"version": 1, "users": {"alice": {"SCRAM-SHA-1": _good_doc()}}}),
    ],
)
def test_corrupt_credentials_raise_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_credentials(raw)


def test_encode_refuses_a_credential_under_another_mechanism() -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    with pytest.raises(ValueError):
        encode_credentials({"alice": {"SCRAM-SHA-512": cred}})


# --- AlterUserScramCredentials rules ----------------------------------------------------------


def upsert(
    name: str = "alice", mechanism: int = 1, iterations: int = 4096, **kw: bytes
) -> ScramUpsertion:
    salted = salted_password("SCRAM-SHA-256", "pw", SALT, 4096)
    return ScramUpsertion(
        name, mechanism, iterations, kw.get("salt", SALT), kw.get("salted", salted)
    )


@pytest.mark.parametrize(
    ("upsertion", "expected"),
    [
        (upsert(), (ErrorCode.none, None)),
        (upsert(iterations=16384, mechanism=2), (ErrorCode.none, None)),
        (upsert(name=""), (ErrorCode.unacceptable_credential, "Username must not be empty")),
        (upsert(mechanism=0), (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")),
        (upsert(mechanism=3), (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")),
        (upsert(iterations=4095), (ErrorCode.unacceptable_credential, "Too few iterations")),
        (upsert(iterations=16385), (ErrorCode.unacceptable_credential, "Too many iterations")),
        (
            upsert(name="", mechanism=0),
            (ErrorCode.unacceptable_credential, "Username must not be empty"),
        ),
        (upsert(salt=b""), (ErrorCode.unacceptable_credential, "Salt must have at least 12 bytes")),
        (
            upsert(salted=b""),
            (ErrorCode.unacceptable_credential, "Salted password must not be empty"),
        ),
    ],
)
def test_validate_upsertion(
    upsertion: ScramUpsertion, expected: tuple[ErrorCode, str | None]
) -> None:
    assert validate_upsertion(upsertion) == expected


def test_validate_deletion() -> None:
    assert validate_deletion(ScramDeletion("alice", 1), exists=True) == (ErrorCode.none, None)
    assert validate_deletion(ScramDeletion("alice", 1), exists=False) == (
        ErrorCode.resource_not_found,
        "Attempt to delete a user credential that does not exist",
    )
    assert (
        validate_deletion(ScramDeletion("", 1), exists=True)[0] == ErrorCode.unacceptable_credential
    )
    assert (
        validate_deletion(ScramDeletion("a", 9), exists=True)[0]
        == ErrorCode.unsupported_sasl_mechanism
    )


def test_a_users_alterations_succeed_or_fail_together() -> None:
    stored = {"SCRAM-SHA-256"}
    ok = (ErrorCode.none, None)
    dup = (
        ErrorCode.duplicate_resource,
        "A user credential cannot be altered twice in the same request",
    )
    # Both mechanisms in one request, as kafka-configs.sh sends them.
    assert user_alteration_error("a", [], [upsert("a", 1), upsert("a", 2)], stored) == ok
    assert user_alteration_error("a", [ScramDeletion("a", 1)], [upsert("a", 2)], stored) == ok
    # One mechanism twice, deleted and set or set twice.
    assert user_alteration_error("a", [ScramDeletion("a", 1)], [upsert("a", 1)], stored) == dup
    assert user_alteration_error("a", [], [upsert("a", 2), upsert("a", 2)], stored) == dup
    # Kafka's order: name and mechanism first, then duplicates, deletions, upsertions.
    assert user_alteration_error("", [], [upsert("", 1), upsert("", 1)], stored)[0] == (
        ErrorCode.unacceptable_credential
    )
    assert user_alteration_error("a", [], [upsert("a", 9), upsert("a", 9)], stored)[0] == (
        ErrorCode.unsupported_sasl_mechanism
    )
    assert user_alteration_error("a", [ScramDeletion("a", 2)], [upsert("a", 1)], stored) == (
        ErrorCode.resource_not_found,
        "Attempt to delete a user credential that does not exist",
    )
    assert user_alteration_error("a", [], [upsert("a", iterations=10)], stored) == (
        ErrorCode.unacceptable_credential,
        "Too few iterations",
    )


# --- SASL/PLAIN -------------------------------------------------------------------------------

PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
STORED = {
    ("scram256", "SCRAM-SHA-256"): ScramCredential.from_password("SCRAM-SHA-256", "s-pw"),
    ("scram512", "SCRAM-SHA-512"): ScramCredential.from_password("SCRAM-SHA-512", "s-pw"),
    ("alice", "SCRAM-SHA-256"): ScramCredential.from_password("SCRAM-SHA-256", "other"),
}


def lookup(user: str, mechanism: str) -> ScramCredential | None:
    return STORED.get((user, mechanism))


def plain(token: bytes) -> SaslServer:
    server = make_sasl_server("PLAIN", lookup, PLAIN_USERS)
    assert server.step(token) == b""
    return server


@pytest.mark.parametrize(
    ("token", "user"),
    [
        (b"\0alice\0alice-secret", "alice"),
        (b"alice\0alice\0alice-secret", "alice"),  # an authzid equal to the user
        (b"\0scram256\0s-pw", "scram256"),  # Onceflow: stored SCRAM credentials serve PLAIN
        (b"\0scram512\0s-pw", "scram512"),
    ],
)
def test_plain_good(token: bytes, user: str) -> None:
    server = plain(token)
    assert server.complete and server.user == user and server.principal == f"User:{user}"
    assert server.mechanism == "PLAIN"


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\0alice\0wrong", "Authentication failed: Invalid username or password"),
        (b"\0nobody\0alice-secret", "Authentication failed: Invalid username or password"),
        (b"\0scram256\0wrong", "Authentication failed: Invalid username or password"),
        # the JAAS user wins over a stored credential of the same name
        (b"\0alice\0other", "Authentication failed: Invalid username or password"),
        (b"\0ALICE\0alice-secret", "Authentication failed: Invalid username or password"),
        (
            b"admin\0alice\0alice-secret",
            "Authentication failed: Client requested an authorization id that is different "
            "from username",
        ),
        (b"\0\0pw", "Authentication failed: username not specified"),
        (b"\0alice\0", "Authentication failed: password not specified"),
        (b"", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"alice\0alice-secret", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\0alice\0alice-secret\0", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\0a\0b\0c\0d\0e", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"\0alice\0alice-secret\xff", "Authentication failed: Invalid username or password"),
    ],
)
def test_plain_refused(token: bytes, message: str) -> None:
    server = make_sasl_server("PLAIN", lookup, PLAIN_USERS)
    with pytest.raises(SaslFailed) as info:
        server.step(token)
    assert info.value.message == str(info.value) == message
    assert not server.complete and server.user is None and server.principal is None
    assert b"secret" not in info.value.reason.encode() and "wrong" not in info.value.reason


def test_plain_failure_names_the_claimed_user_for_the_audit_log() -> None:
    with pytest.raises(SaslFailed) as info:
        make_sasl_server("PLAIN", lookup, PLAIN_USERS).step(b"\0alice\0wrong")
    assert info.value.user == "alice"


def test_plain_lookup_failure() -> None:
    def broken(user: str, mechanism: str) -> ScramCredential | None:
        raise OSError("store unavailable")

    with pytest.raises(SaslFailed) as info:
        make_sasl_server("PLAIN", broken, {}).step(b"\0bob\0pw")
    assert info.value.message == "Authentication failed: credentials for user could not be verified"


def test_no_step_after_completion_or_failure() -> None:
    server = plain(b"\0alice\0alice-secret")
    with pytest.raises(SaslFailed, match="state COMPLETE"):
        server.step(b"\0alice\0alice-secret")
    assert not server.complete and server.user is None
    with pytest.raises(SaslFailed, match="state FAILED"):
        server.step(b"\0alice\0alice-secret")


def test_state_table_covers_every_state() -> None:
    assert set(sasl_module._TRANSITIONS) == set(sasl_module._State)
    for state, targets in sasl_module._TRANSITIONS.items():
        assert sasl_module._State.FAILED in targets, state  # any state can fail


def test_unknown_mechanism() -> None:
    assert SUPPORTED_MECHANISMS == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    with pytest.raises(ValueError):
        make_sasl_server("GSSAPI", lookup, {})


# --- SASL/SCRAM -------------------------------------------------------------------------------


def scram_server(mechanism: str, **creds: ScramCredential) -> SaslServer:
    return make_sasl_server(mechanism, lambda u, m: creds.get(u) if m == mechanism else None, {})


def exchange(server: SaslServer, client: scramp.ScramClient) -> None:
    server_first = server.step(client.get_client_first().encode())
    client.set_server_first(server_first.decode())
    server_final = server.step(client.get_client_final().encode())
    client.set_server_final(server_final.decode())  # the client checks the server's proof


@pytest.mark.parametrize("mechanism", SCRAMS)
@pytest.mark.parametrize("user", ["alice", "a,b=c", "Ünïcode"])
def test_scram_good(mechanism: str, user: str) -> None:
    server = make_sasl_server(
        mechanism,
        lambda u, m: ScramCredential.from_password(m, "pw", 8192, SALT) if u == user else None,
        {},
    )
    exchange(server, scramp.ScramClient([mechanism], user, "pw"))
    assert server.complete and server.user == user and server.principal == f"User:{user}"


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_with_kafka_pythons_client_and_an_unnormalized_password(mechanism: str) -> None:
    """Kafka's clients hash the raw UTF-8 password (no SASLprep); so do our credentials."""
    password = "cafe\u0301\u00a0"  # NFKC (SASLprep) would turn this into "café "
    server = scram_server(mechanism, alice=ScramCredential.from_password(mechanism, password))
    client = KafkaPythonScramClient("alice", password, mechanism)
    server_first = server.step(client.first_message())
    client.process_server_first_message(server_first)
    client.process_server_final_message(server.step(client.final_message()))
    assert server.user == "alice"


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_wrong_password(mechanism: str) -> None:
    server = scram_server(mechanism, alice=ScramCredential.from_password(mechanism, "pw"))
    with pytest.raises(SaslFailed) as info:
        exchange(server, scramp.ScramClient([mechanism], "alice", "wrong"))
    assert info.value.message == generic(mechanism)
    assert info.value.user == "alice"
    assert not server.complete and server.user is None


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_unknown_user_fails_like_a_wrong_password(mechanism: str) -> None:
    def server_first_of(user: str) -> dict[str, str]:
        server = scram_server(mechanism, alice=ScramCredential.from_password(mechanism, "pw"))
        client = scramp.ScramClient([mechanism], user, "pw")
        first = server.step(client.get_client_first().encode()).decode()
        return dict(p.split("=", 1) for p in first.split(","))

    known, unknown = server_first_of("alice"), server_first_of("mallory")
    assert set(unknown) == set(known) == {"r", "s", "i"}
    assert len(base64.b64decode(unknown["s"])) == len(base64.b64decode(known["s"]))
    assert server_first_of("mallory")["s"] == unknown["s"]  # asking again shows nothing new
    server = scram_server(mechanism)
    with pytest.raises(SaslFailed) as info:
        exchange(server, scramp.ScramClient([mechanism], "mallory", "pw"))
    assert info.value.message == generic(mechanism)
    assert info.value.reason == "unknown user"


def test_scram_credential_of_the_other_mechanism_does_not_serve() -> None:
    cred = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    server = make_sasl_server("SCRAM-SHA-512", lambda u, m: cred if u == "alice" else None, {})
    with pytest.raises(SaslFailed):
        exchange(server, scramp.ScramClient(["SCRAM-SHA-512"], "alice", "pw"))


def _first_and_final(mechanism: str, user: str = "alice") -> tuple[SaslServer, str, str]:
    server = scram_server(mechanism, alice=ScramCredential.from_password(mechanism, "pw"))
    client = scramp.ScramClient([mechanism], user, "pw")
    client_first = client.get_client_first()
    client.set_server_first(server.step(client_first.encode()).decode())
    return server, client_first, client.get_client_final()


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_wrong_nonce_in_client_final(mechanism: str) -> None:
    server, _, final = _first_and_final(mechanism)
    nonce = re.search(r"r=([^,]+)", final)
    assert nonce is not None
    tampered = final.replace(nonce.group(1), nonce.group(1)[:-1] + "x")
    with pytest.raises(SaslFailed) as info:
        server.step(tampered.encode())
    assert info.value.message == generic(mechanism)
    assert not server.complete


@pytest.mark.parametrize("mechanism", SCRAMS)
def test_scram_replayed_and_out_of_order_steps(mechanism: str) -> None:
    # client-first sent again where client-final is due
    server, first, _ = _first_and_final(mechanism)
    with pytest.raises(SaslFailed):
        server.step(first.encode())
    # a client-final replayed into another exchange (another server nonce)
    _, _, final = _first_and_final(mechanism)
    server, _, _ = _first_and_final(mechanism)
    with pytest.raises(SaslFailed):
        server.step(final.encode())
    # client-final first
    with pytest.raises(SaslFailed):
        scram_server(mechanism).step(final.encode())
    # anything after completion
    server, _, final = _first_and_final(mechanism)
    server.step(final.encode())
    assert server.complete
    with pytest.raises(SaslFailed):
        server.step(final.encode())
    assert not server.complete


@pytest.mark.parametrize("mechanism", SCRAMS)
@pytest.mark.parametrize(
    "token",
    [
        b"",
        b"\xff\xfe",
        b"n,,",
        b"n,,n=alice",
        b"n,,r=abc,n=alice",
        b"x,,n=alice,r=abc",
        b"n,a=alice,n=alice,r=abc",  # authzid: refused (see the module docstring)
        b"n,,n=alice,r=abc,tokenauth=true",  # delegation tokens: none here
        b"n,,n=alice,r=abc,ext=1",
        b"p=tls-unique,,n=alice,r=abc",  # channel binding: not offered
        b"n,,n=al=ice,r=abc",  # bad escape
        b"n,,n=alice,r=ab\x00c",
    ],
)
def test_scram_garbage_client_first(mechanism: str, token: bytes) -> None:
    server = scram_server(mechanism, alice=ScramCredential.from_password(mechanism, "pw"))
    with pytest.raises(SaslFailed) as info:
        server.step(token)
    assert info.value.message == generic(mechanism)


def test_scram_user_name_must_survive_saslprep() -> None:
    """scramp SASLpreps a fullwidth `a` into `a`; Kafka would not, so neither may we."""
    mechanism = "SCRAM-SHA-256"
    server = scram_server(mechanism, alice=ScramCredential.from_password(mechanism, "pw"))
    client = KafkaPythonScramClient("\uff41lice", "pw", mechanism)  # sends the name as is
    with pytest.raises(SaslFailed) as info:
        server.step(client.first_message())
    assert "SASLprep" in info.value.reason


def test_scram_failure_wording_on_reauthentication() -> None:
    server = make_sasl_server("SCRAM-SHA-256", lookup, {}, reauthentication=True)
    with pytest.raises(SaslFailed) as info:
        server.step(b"garbage")
    assert info.value.message.startswith("Authentication failed during re-authentication due")


def test_scram_lookup_failure_is_a_generic_failure() -> None:
    def broken(user: str, mechanism: str) -> ScramCredential | None:
        raise OSError("store unavailable")

    with pytest.raises(SaslFailed) as info:
        make_sasl_server("SCRAM-SHA-256", broken, {}).step(b"n,,n=alice,r=abc")
    assert info.value.message == generic("SCRAM-SHA-256")


# --- fuzz: step() raises SaslFailed or answers, nothing else ---------------------------------

_PIECES = st.sampled_from(
    [
        "n,,",
        "y,,",
        "p=x,,",
        "n=",
        "r=",
        ",",
        "=",
        "c=biws",
        ",p=",
        "s=",
        "i=4096",
        "alice",
        "=2C",
        "=3D",
        "tokenauth=true",
        "\x00",
        "é",
        "a=",
        "m=",
        "v=",
        "e=",
        "AAAA",
        "\uff41",
    ]
)
_TOKENS = st.one_of(
    st.binary(max_size=200),
    st.lists(_PIECES, max_size=12).map(lambda parts: "".join(parts).encode()),
)
_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _step_or_fail(server: SaslServer, token: bytes) -> bool:
    try:
        assert isinstance(server.step(token), bytes)
        return True
    except SaslFailed as e:
        assert isinstance(e.message, str) and e.message
        return False


@_FUZZ
@given(mechanism=st.sampled_from(SCRAMS), tokens=st.lists(_TOKENS, min_size=1, max_size=3))
def test_fuzz_scram_steps(mechanism: str, tokens: list[bytes]) -> None:
    cred = ScramCredential.from_password(mechanism, "pw", salt=SALT)
    server = scram_server(mechanism, alice=cred)
    for token in tokens:
        _step_or_fail(server, token)
    assert not server.complete  # nobody guesses a proof


@_FUZZ
@given(mechanism=st.sampled_from(SCRAMS), data=st.data())
def test_fuzz_scram_client_final(mechanism: str, data: st.DataObject) -> None:
    """After a good client-first: random tokens, and the real client-final mutated."""
    server, _, final = _first_and_final(mechanism)
    real = final.encode()
    mutated = st.lists(
        st.tuples(st.integers(0, len(real) - 1), st.integers(0, 255)), min_size=1, max_size=4
    ).map(lambda edits: _apply(real, edits))
    truncated = st.integers(0, len(real) - 1).map(lambda n: real[:n])
    token = data.draw(st.one_of(_TOKENS, mutated, truncated))
    _step_or_fail(server, token)
    if server.complete:  # only the proof itself passes (base64 may spell it two ways)
        assert _proofless(token) == _proofless(real)


def _apply(token: bytes, edits: list[tuple[int, int]]) -> bytes:
    out = bytearray(token)
    for index, value in edits:
        out[index] = value
    return bytes(out)


def _proofless(client_final: bytes) -> tuple[str, bytes]:
    head, proof = client_final.decode().rsplit(",p=", 1)
    return head, base64.b64decode(proof)


@_FUZZ
@given(token=_TOKENS)
def test_fuzz_plain_step(token: bytes) -> None:
    server = make_sasl_server("PLAIN", lookup, PLAIN_USERS)
    if _step_or_fail(server, token):
        assert server.complete and server.user in PLAIN_USERS
