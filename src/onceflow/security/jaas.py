"""Kafka's `sasl.jaas.config` values: `<LoginModule> <flag> (<key>=<value>)*;`.

Kafka reads them with `java.io.StreamTokenizer` (JaasConfig.java), whose quirks a
`server.properties` may rely on, so the tokenizer below follows it: `//`, `/* */` and a lone
`/` start comments; words are letters, digits, `.`, `-`, `_` and `$` (and any character from
U+00A0 up); a token that starts with a digit, `.` or `-` is a number and is no value at all, so
such values must be quoted; quoted strings take `'` or `"`, end at a line break, and know Java's
escapes. Error messages name keys, never values: a value may be a password.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "LOGIN_MODULES",
    "PLAIN_LOGIN_MODULE",
    "SCRAM_LOGIN_MODULE",
    "JaasEntry",
    "parse_jaas_config",
]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
#: The login module Kafka expects in a mechanism's JAAS config.
LOGIN_MODULES = {
    "PLAIN": PLAIN_LOGIN_MODULE,
    "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
    "SCRAM-SHA-512": SCRAM_LOGIN_MODULE,
}

_CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
_PLAIN_USER_PREFIX = "user_"


@dataclass(frozen=True)
class JaasEntry:
    """One login module entry. `repr` shows option names only: values hold passwords."""

    login_module: str
    control_flag: str
    options: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"JaasEntry(login_module={self.login_module!r}, control_flag={self.control_flag!r}, "
            f"options=<{', '.join(sorted(self.options))}>)"
        )

    @property
    def username(self) -> str | None:
        """The `username` option: who this side logs in as (clients, inter-broker links)."""
        return self.options.get("username")

    @property
    def password(self) -> str | None:
        return self.options.get("password")

    def plain_users(self) -> dict[str, str]:
        """The `user_<name>="<password>"` options of a broker's PLAIN config. Like Kafka's
        PlainServerCallbackHandler, only a PlainLoginModule entry defines users."""
        if self.login_module != PLAIN_LOGIN_MODULE:
            return {}
        n = len(_PLAIN_USER_PREFIX)
        return {k[n:]: v for k, v in self.options.items() if k.startswith(_PLAIN_USER_PREFIX)}


# --- the tokenizer: java.io.StreamTokenizer as JaasConfig configures it ---------------------

_EOF, _WORD, _QUOTED, _NUMBER, _CHAR = "eof", "word", "quoted", "number", "char"


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str = ""  # the word or string (sval), or the ordinary character

    @property
    def sval(self) -> str | None:
        """StreamTokenizer's sval: set only for words and quoted strings."""
        return self.text if self.kind in (_WORD, _QUOTED) else None

    def is_char(self, c: str) -> bool:
        return self.kind == _CHAR and self.text == c


def _is_digit(c: str) -> bool:
    return c.isascii() and c.isdigit()


def _is_word_start(c: str) -> bool:
    return (c.isascii() and (c.isalpha() or c in "_$")) or ord(c) >= 0xA0


def _is_word_part(c: str) -> bool:
    return _is_word_start(c) or _is_digit(c) or c in ".-"


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_OCTAL = "01234567"


class _Tokenizer:
    def __init__(self, text: str) -> None:
        self._s = text
        self._i = 0

    def _peek(self, ahead: int = 0) -> str:
        i = self._i + ahead
        return self._s[i] if i < len(self._s) else ""

    def next(self) -> _Token:
        s = self._s
        while True:
            while self._i < len(s) and ord(s[self._i]) <= 0x20:
                self._i += 1
            c = self._peek()
            if not c:
                return _Token(_EOF)
            if c == "/" and self._peek(1) == "*":
                end = s.find("*/", self._i + 2)
                if end < 0:
                    return _Token(_EOF)
                self._i = end + 2
            elif c == "/":  # `//`, and a lone `/` (the default comment character)
                while self._i < len(s) and s[self._i] not in "\r\n":
                    self._i += 1
            else:
                break
        if _is_digit(c) or c in ".-":
            return self._number(c)
        if _is_word_start(c):
            start = self._i
            while self._i < len(s) and _is_word_part(s[self._i]):
                self._i += 1
            return _Token(_WORD, s[start : self._i])
        self._i += 1
        if c in "\"'":
            return _Token(_QUOTED, self._quoted(c))
        return _Token(_CHAR, c)

    def _number(self, c: str) -> _Token:
        if c == "-":
            nxt = self._peek(1)
            if not (nxt == "." or _is_digit(nxt)):
                self._i += 1
                return _Token(_CHAR, "-")
            self._i += 1
        seen_dot = False
        while (c := self._peek()) and (_is_digit(c) or (c == "." and not seen_dot)):
            seen_dot = seen_dot or c == "."
            self._i += 1
        return _Token(_NUMBER)

    def _quoted(self, quote: str) -> str:
        out: list[str] = []
        while (c := self._peek()) and c not in (quote, "\n", "\r"):
            self._i += 1
            if c != "\\":
                out.append(c)
                continue
            e = self._peek()
            self._i += 1
            if e and e in _OCTAL:
                digits = e
                while len(digits) < (3 if e <= "3" else 2) and (d := self._peek()) and d in _OCTAL:
                    digits += d
                    self._i += 1
                out.append(chr(int(digits, 8)))
            else:
                out.append(_ESCAPES.get(e, e))
        if self._peek() == quote:
            self._i += 1
        return "".join(out)


# --- the grammar: JaasConfig.parseAppConfigurationEntry ---------------------------------


def parse_jaas_config(text: str) -> JaasEntry:
    """Parse a `sasl.jaas.config` value holding exactly one login module entry (as Kafka
    requires of the property). Raises ValueError, naming keys but never values."""
    tokens = _Tokenizer(text)
    entries: list[JaasEntry] = []
    tok = tokens.next()
    while tok.kind != _EOF:
        entries.append(_parse_entry(tok, tokens))
        tok = tokens.next()
    if not entries:
        raise ValueError("Login module not specified in JAAS config")
    if len(entries) != 1:
        raise ValueError(
            f"JAAS config property contains {len(entries)} login modules, should be 1 module"
        )
    return entries[0]


def _parse_entry(first: _Token, tokens: _Tokenizer) -> JaasEntry:
    module = first.sval
    if not module:
        raise ValueError("Login module name not specified in JAAS config")
    tok = tokens.next()
    if tok.kind == _EOF:
        raise ValueError("Login module control flag not specified in JAAS config")
    if tok.sval is None:
        raise ValueError("Login module control flag is not available in the JAAS config")
    flag = tok.sval.lower()
    if flag not in _CONTROL_FLAGS:
        shown = f" '{tok.sval}'" if tok.kind == _WORD else ""
        raise ValueError(f"Invalid login module control flag{shown} in JAAS config")
    options: dict[str, str] = {}
    tok = tokens.next()
    while tok.kind != _EOF and not tok.is_char(";"):
        key = tok.sval
        if key is None:
            raise ValueError("Option name expected in JAAS config")
        named = f"key '{key}'" if tok.kind == _WORD else "a quoted key"
        if not tokens.next().is_char("="):
            raise ValueError(f"Value not specified for {named} in JAAS config")
        value = tokens.next()
        if value.sval is None:
            hint = ""
            if value.kind == _NUMBER or value.is_char("-"):
                hint = " (a value starting with a digit, '.' or '-' must be quoted)"
            raise ValueError(f"Value not specified for {named} in JAAS config{hint}")
        options[key] = value.sval
        tok = tokens.next()
    if not tok.is_char(";"):
        raise ValueError("JAAS config entry not terminated by semi-colon")
    return JaasEntry(module, flag, options)
