"""A client certificate's principal is the one Kafka gives it: the subject as Java prints it,
through `ssl.principal.mapping.rules`, prefixed `User:`.

The expected subject strings were checked against Java 17's
`X509Certificate.getSubjectX500Principal().getName()` on the same certificates."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

from onceflow.security.principal import (
    DEFAULT_MAPPING_RULES,
    NoMatchingRule,
    parse_mapping_rules,
    principal_from_certificate,
    subject_name,
)

A = x509.NameAttribute
_KEY = ec.generate_private_key(ec.SECP256R1())


def cert(*rdns: x509.NameAttribute[str] | list[x509.NameAttribute[str]]) -> bytes:
    """A self-signed DER certificate whose subject has these RDNs, least specific first
    (DER order); a list is one multi-valued RDN."""
    subject = x509.Name(
        [x509.RelativeDistinguishedName(r if isinstance(r, list) else [r]) for r in rdns]
    )
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(x509.Name([A(NameOID.COMMON_NAME, "test-ca")]))
        .public_key(_KEY.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(_KEY, hashes.SHA256())
        .public_bytes(Encoding.DER)
    )


ALICE = cert(
    A(NameOID.COUNTRY_NAME, "US"),
    A(NameOID.STATE_OR_PROVINCE_NAME, "CA"),
    A(NameOID.LOCALITY_NAME, "SF"),
    A(NameOID.ORGANIZATION_NAME, "Onceflow"),
    A(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
    A(NameOID.COMMON_NAME, "alice"),
)
DEFAULT = parse_mapping_rules(DEFAULT_MAPPING_RULES)


def test_default_principal_is_the_rfc2253_subject() -> None:
    assert (
        principal_from_certificate(ALICE, DEFAULT)
        == "User:CN=alice,OU=eng,O=Onceflow,L=SF,ST=CA,C=US"
    )
    # for plain values of the keyword attributes, Java and cryptography agree
    loaded = x509.load_der_x509_certificate(ALICE)
    assert subject_name(ALICE) == loaded.subject.rfc4514_string()


@pytest.mark.parametrize(
    ("rdns", "java"),
    [
        # attributes without an RFC 2253 keyword: OID and the hex of the DER value
        (
            [A(NameOID.COMMON_NAME, "bob"), A(NameOID.EMAIL_ADDRESS, "bob@example.com")],
            "1.2.840.113549.1.9.1=#160f626f62406578616d706c652e636f6d,CN=bob",
        ),
        (
            [
                A(NameOID.DOMAIN_COMPONENT, "com"),
                A(NameOID.USER_ID, "u1"),
                A(NameOID.STREET_ADDRESS, "1 Main St"),
                A(NameOID.SERIAL_NUMBER, "1234"),
            ],
            "2.5.4.5=#130431323334,STREET=1 Main St,UID=u1,DC=com",
        ),
        # `=` and `#` escaped anywhere, every leading and trailing space escaped
        (
            [A(NameOID.COMMON_NAME, '  a=b#c, d+e<f>g;h"i\\j  ')],
            'CN=\\ \\ a\\=b\\#c\\, d\\+e\\<f\\>g\\;h\\"i\\\\j\\ \\ ',
        ),
        ([A(NameOID.COMMON_NAME, "Zoë 日本")], "CN=Zoë 日本"),
        # a multi-valued RDN keeps its DER order, joined with +
        (
            [
                A(NameOID.ORGANIZATION_NAME, "O1"),
                [A(NameOID.COMMON_NAME, "multi"), A(NameOID.ORGANIZATIONAL_UNIT_NAME, "x")],
            ],
            "OU=x+CN=multi,O=O1",
        ),
        ([], ""),
    ],
)
def test_subject_is_printed_as_java_prints_it(
    rdns: list[x509.NameAttribute[str] | list[x509.NameAttribute[str]]], java: str
) -> None:
    assert subject_name(cert(*rdns)) == java


def test_bad_certificate_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        principal_from_certificate(b"\x30\x03\x02\x01\x01", DEFAULT)
    with pytest.raises(ValueError):
        subject_name(ALICE[:-10])


KAFKA_RULES = ", ".join(
    [
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]
)


@pytest.mark.parametrize(
    ("dn", "name"),
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),  # first rule, lower-cased
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),  # upper-cased
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),  # DEFAULT
    ],
)
def test_kafkas_mapping_examples(dn: str, name: str) -> None:
    assert parse_mapping_rules(KAFKA_RULES).apply(dn) == name


def test_mapping_rules_applied_to_a_certificate() -> None:
    mapper = parse_mapping_rules("RULE:^CN=([^,]+),OU=eng,.*$/$1/U, DEFAULT")
    assert principal_from_certificate(ALICE, mapper) == "User:ALICE"
    other = cert(A(NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"), A(NameOID.COMMON_NAME, "carol"))
    assert principal_from_certificate(other, mapper) == "User:CN=carol,OU=ops"  # fell through
    strict = parse_mapping_rules("RULE:^CN=([^,]+),OU=eng,.*$/$1/")
    with pytest.raises(NoMatchingRule, match="CN=carol,OU=ops"):
        principal_from_certificate(other, strict)


@pytest.mark.parametrize(
    ("rules", "dn", "name"),
    [
        # escaped comma inside the value, a comma inside the pattern
        ("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT", "CN=Tkac\\, Adam,OU=ITZ", "Tkac\\, Adam"),
        # $n past the last group stays literal text (Kafka); $12 with one group is $1 then 2
        ("RULE:^CN=([^,]*),.*$/$1-$2/", "CN=a,O=b", "a-$2"),
        ("RULE:^CN=([^,]*),.*$/$12/", "CN=a,O=b", "a2"),
        ("RULE:^CN=([^,]*),(.*)$/$2 $1 $0/", "CN=a,O=b", "O=b a CN=a,O=b"),
        ("RULE:^CN=([^,]*),.*$/\\$1 \\\\/", "CN=a,O=b", "$1 \\"),  # backslash escapes
        ("RULE:^CN=(?P<user>[^,]*),.*$/${user}/", "CN=a,O=b", "a"),
        ("RULE:^CN=a\\/b,.*$/slash/", "CN=a/b,O=x", "slash"),  # \/ is a slash in the pattern
        ("RULE:.*/x/", "CN=a", "xx"),  # Java's replaceAll also replaces the empty match at the end
        ("  RULE:^CN=([a-z]+),.*$/$1/ , , DEFAULT  ", "CN=1,O=x", "CN=1,O=x"),  # blanks, empty rule
    ],
)
def test_mapping_rule_details_match_kafka(rules: str, dn: str, name: str) -> None:
    assert parse_mapping_rules(rules).apply(dn) == name


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        "RULE:^CN=(.*)$/$1/Lx",
        "RULE:[/x/",  # pattern does not compile
        "RULE:^CN=.*$/$1/",  # no group 1
        "RULE:^CN=(.*)$/a$/",  # dangling $
        "RULE:^CN=(.*)$/${nope}/",
        "",
        " , ",
    ],
)
def test_bad_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError, match=r"ssl\.principal\.mapping\.rules"):
        parse_mapping_rules(rules)
