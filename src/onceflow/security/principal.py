"""The principal of a TLS client certificate, as Kafka's DefaultKafkaPrincipalBuilder gives it.

Kafka takes the subject as Java's `X500Principal.getName()` prints it (RFC 2253, most
specific RDN first: `CN=alice,OU=eng,O=Onceflow`), runs it through
`ssl.principal.mapping.rules` and prefixes `User:`. ACLs written for a Kafka cluster name
those exact strings, so the subject is printed the way Java prints it, which differs from
`cryptography`'s `Name.rfc4514_string()` in a few places:

- Java escapes `=` and `#` anywhere in a value, cryptography neither (`#` only in front).
- Java escapes every leading and trailing space, cryptography only the outermost ones.
- An attribute without an RFC 2253 keyword (emailAddress, serialNumber, ...) is printed by
  Java as its OID and the hex of its DER value (`1.2.840.113549.1.9.1=#1611...`),
  by cryptography as its OID and the escaped text.

So the subject's DER is read here directly: cryptography parses and checks the certificate,
and a few lines walk the Name's SETs and SEQUENCEs to keep each value's exact encoding.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509

from onceflow.security.session import principal_name

__all__ = [
    "DEFAULT_MAPPING_RULES",
    "NoMatchingRule",
    "SslPrincipalMapper",
    "parse_mapping_rules",
    "principal_from_certificate",
    "subject_name",
]

#: Kafka's default `ssl.principal.mapping.rules`: the whole distinguished name.
DEFAULT_MAPPING_RULES = "DEFAULT"


class NoMatchingRule(ValueError):
    """No mapping rule applies to a certificate's name; Kafka fails the connection."""


# --- ssl.principal.mapping.rules ---------------------------------------------------------

# One rule, Kafka's grammar: DEFAULT, or RULE:pattern/replacement/ with an optional L or U,
# where a backslash escapes the next character (so `\/` is a slash inside the pattern).
# Anything else is matched by the last, lazy alternative so that the splitter below can
# carry it to the parser, which rejects it with the text it could not read.
_RULE = r"""
    (?P<default>DEFAULT)
  | RULE:(?P<pattern>(?:\\.|[^\\/])*)/(?P<replacement>(?:\\.|[^\\/])*)/(?P<case>[LU]?).*?
  | (?P<other>.*?)
"""
# Rules are separated by commas with optional blanks; a comma inside a pattern belongs to
# the pattern because the RULE alternative is tried first.
_SPLITTER = re.compile(rf"\s*(?P<rule>{_RULE})\s*(?:,\s*|$)", re.VERBOSE)
_PARSER = re.compile(_RULE, re.VERBOSE)
_DIGITS = "0123456789"

# A replacement is literal text and group references (index or name).
_Part = str | int


@dataclass(frozen=True, slots=True)
class _Rule:
    source: str
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: tuple[_Part, ...] = ()
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        parts = self.replacement

        def expand(m: re.Match[str]) -> str:
            return "".join(p if isinstance(p, str) else m.group(p) or "" for p in parts)

        # Java's replaceAll: every match in the name, not only the full one.
        result = self.pattern.sub(expand, dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


class SslPrincipalMapper:
    """Parsed `ssl.principal.mapping.rules`; the first rule that applies names the user."""

    def __init__(self, rules: Sequence[_Rule]) -> None:
        self._rules = tuple(rules)

    def apply(self, distinguished_name: str) -> str:
        """The user name for a distinguished name; NoMatchingRule if no rule applies."""
        for rule in self._rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(
            f"no ssl.principal.mapping.rules rule applies to {distinguished_name!r}"
        )

    def __repr__(self) -> str:
        return f"SslPrincipalMapper({', '.join(r.source for r in self._rules)})"


def parse_mapping_rules(text: str) -> SslPrincipalMapper:
    """Parse Kafka's `ssl.principal.mapping.rules`, e.g.
    `RULE:^CN=([^,]+),OU=eng.*$/$1/L, DEFAULT`. Patterns are regular expressions (Java's
    and Python's agree on the usual constructs); replacements use Java's `$1` and `${name}`,
    with Kafka's reading of a `$n` past the last group as literal text.
    Raises ValueError on a rule Kafka would refuse, on a pattern that does not compile, and
    on a list with no rules at all (Kafka would then refuse every certificate)."""
    rules: list[_Rule] = []
    for split in _SPLITTER.finditer(text.strip()):
        source = split.group("rule")
        m = _PARSER.match(source)
        if m is None or m.end() != len(source):
            rest = source[m.end() :] if m is not None else source
            raise ValueError(
                f"ssl.principal.mapping.rules: invalid rule `{source}`, cannot read `{rest}`"
            )
        if m.group("default") is not None:
            rules.append(_Rule(source, None))
        elif m.group("pattern") is not None:
            rules.append(_compile_rule(source, m.group("pattern"), m.group("replacement"), m))
        # an empty rule (",,") is skipped, as in Kafka
    if not rules:
        raise ValueError("ssl.principal.mapping.rules has no rules; use DEFAULT for the full name")
    return SslPrincipalMapper(rules)


def _compile_rule(source: str, pattern_text: str, replacement: str, m: re.Match[str]) -> _Rule:
    try:
        pattern = re.compile(pattern_text)
    except re.error as exc:
        raise ValueError(
            f"ssl.principal.mapping.rules: rule `{source}` has a bad pattern: {exc}"
        ) from exc
    try:
        parts = _parse_replacement(replacement, pattern)
    except ValueError as exc:
        raise ValueError(
            f"ssl.principal.mapping.rules: rule `{source}` has a bad replacement: {exc}"
        ) from exc
    return _Rule(source, pattern, parts, m.group("case"))


def _parse_replacement(text: str, pattern: re.Pattern[str]) -> tuple[_Part, ...]:
    """Java's replacement syntax as Kafka uses it: `\\x` is a literal x; `${name}` a named
    group; `$` and digits the longest group number the digits start with, except that
    a reference whose first digit is past the last group is literal text (Kafka escapes it
    before Java sees it). Java's own errors are raised here, when the rule is read."""
    groups = pattern.groups
    parts: list[_Part] = []
    literal: list[str] = []

    def ref(group: int | str) -> None:
        if literal:
            parts.append("".join(literal))
            literal.clear()
        parts.append(pattern.groupindex[group] if isinstance(group, str) else group)

    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":  # the rule grammar guarantees a character after it
            literal.append(text[i + 1])
            i += 2
            continue
        if c != "$":
            literal.append(c)
            i += 1
            continue
        if text.startswith("{", i + 1):
            end = text.find("}", i + 2)
            name = text[i + 2 : end] if end > 0 else ""
            if name not in pattern.groupindex:
                raise ValueError(f"no group named {name!r} for `{text[i:]}`")
            ref(name)
            i = end + 1
            continue
        end = i + 1
        while end < len(text) and text[end] in _DIGITS:
            end += 1
        digits = text[i + 1 : end]
        if not digits:
            raise ValueError(f"`$` at {i} is not followed by a group; write \\$ for a dollar")
        number, used = int(digits[0]), 1
        if groups and number > groups and digits[0] != "0":
            literal.append(text[i:end])
        elif number > groups:
            raise ValueError(f"the pattern has no group {number}")
        else:
            while used < len(digits) and number * 10 + int(digits[used]) <= groups:
                number, used = number * 10 + int(digits[used]), used + 1
            ref(number)
            literal.append(digits[used:])
        i = end
    if literal:
        parts.append("".join(literal))
    return tuple(parts)


# --- the subject as Java prints it --------------------------------------------------------

# The attributes RFC 2253 names by keyword, as Java's X500Principal does; any other is
# printed as its OID and the hex of its DER value.
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.9": "STREET",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "0.9.2342.19200300.100.1.1": "UID",
    "0.9.2342.19200300.100.1.25": "DC",
}
# The string types Java prints as text; any other type is printed as hex. Java decodes every
# one of them as UTF-8, even BMPString (UTF-16) and T61String, and so does this.
_STRING_TAGS = frozenset({0x0C, 0x13, 0x14, 0x16, 0x1B, 0x1E})
_ESCAPED = frozenset(',=+<>#;"\\')
_SEQUENCE, _SET, _OID = 0x30, 0x31, 0x06


def _tlv(buf: bytes, pos: int) -> tuple[int, int, int]:
    """The tag, content start and end of the DER element at `pos`."""
    if pos + 2 > len(buf):
        raise ValueError("truncated DER")
    tag, length = buf[pos], buf[pos + 1]
    pos += 2
    if length & 0x80:
        n = length & 0x7F
        if not 0 < n <= 4 or pos + n > len(buf):
            raise ValueError("bad DER length")
        length = int.from_bytes(buf[pos : pos + n], "big")
        pos += n
    if pos + length > len(buf):
        raise ValueError("truncated DER")
    return tag, pos, pos + length


def _children(buf: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, element start, content start, content end) of each element in buf[start:end]."""
    out = []
    while start < end:
        tag, content, stop = _tlv(buf, start)
        out.append((tag, start, content, stop))
        start = stop
    return out


def _oid(raw: bytes) -> str:
    arcs: list[int] = []
    value = 0
    for byte in raw:
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs:
        raise ValueError("empty OID")
    first = min(arcs[0] // 40, 2)
    return ".".join(map(str, [first, arcs[0] - 40 * first, *arcs[1:]]))


def _java_escape(value: str) -> str:
    """Java's RFC 2253 value escaping: specials anywhere, NUL as \\00, and every leading
    and trailing blank (space or CR)."""
    chars = ["\\00" if c == "\0" else "\\" + c if c in _ESCAPED else c for c in value]
    lead = 0
    while lead < len(chars) and chars[lead] in (" ", "\r"):
        lead += 1
    trail = len(chars)
    while trail > lead and chars[trail - 1] in (" ", "\r"):
        trail -= 1
    return "".join("\\" + c if i < lead or i >= trail else c for i, c in enumerate(chars))


def _subject_der(cert: x509.Certificate) -> tuple[bytes, int, int]:
    """The TBSCertificate and the bounds of its subject Name (version, serial, signature,
    issuer, validity, subject)."""
    tbs = cert.tbs_certificate_bytes
    _, start, end = _tlv(tbs, 0)
    fields = _children(tbs, start, end)
    if fields and fields[0][0] == 0xA0:  # explicit version
        fields = fields[1:]
    if len(fields) < 5 or fields[4][0] != _SEQUENCE:
        raise ValueError("certificate has no subject")
    _, _, content, stop = fields[4]
    return tbs, content, stop


def subject_name(der: bytes) -> str:
    """The certificate's subject exactly as Java's `X500Principal.getName()` prints it.
    Raises ValueError if `der` is not a DER certificate."""
    cert = x509.load_der_x509_certificate(der)
    buf, start, end = _subject_der(cert)
    rdns: list[str] = []
    for rdn_tag, _, rdn_start, rdn_end in _children(buf, start, end):
        if rdn_tag != _SET:
            raise ValueError("malformed subject")
        avas: list[str] = []
        for ava_tag, _, ava_start, ava_end in _children(buf, rdn_start, rdn_end):
            fields = _children(buf, ava_start, ava_end)
            if ava_tag != _SEQUENCE or len(fields) != 2 or fields[0][0] != _OID:
                raise ValueError("malformed subject attribute")
            (_, _, oid_start, oid_end), (tag, value_start, content, value_end) = fields
            oid = _oid(buf[oid_start:oid_end])
            keyword = _KEYWORDS.get(oid)
            if keyword is not None and tag in _STRING_TAGS:
                text = buf[content:value_end].decode("utf-8", errors="replace")
                avas.append(f"{keyword}={_java_escape(text)}")
            else:
                avas.append(f"{keyword or oid}=#{buf[value_start:value_end].hex()}")
        rdns.append("+".join(avas))
    return ",".join(reversed(rdns))


def principal_from_certificate(der: bytes, mapper: SslPrincipalMapper) -> str:
    """`User:` and the mapped subject of a DER client certificate, as Kafka names a mutual
    TLS client. Raises ValueError on a bad certificate and NoMatchingRule when no mapping
    rule applies (Kafka then refuses the connection)."""
    return principal_name(mapper.apply(subject_name(der)))
