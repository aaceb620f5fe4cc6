"""The broker's side of one SASL exchange (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), sans-IO:
the SaslAuthenticate handler feeds each client token to `SaslServer.step` and sends back what
it returns, until `complete`.

Anything wrong, from bytes that are not a SASL message to a bad password, raises SaslFailed
with the message Kafka's broker would send (SaslServerAuthenticator, PlainSaslServer,
ScramSaslServer): specific where Kafka is specific, otherwise Kafka's generic "invalid
credentials" sentence, which says nothing about whether the user exists.

Onceflow's extension: PLAIN checks the listener's JAAS `user_<name>` options first and, for a
user not there, the user's stored SCRAM credentials, so one user database (managed with
AlterUserScramCredentials) serves both mechanisms.

SCRAM runs on scramp, whose server takes what Kafka's clients send (`n,,` with no authzid and
no extensions). It differs from Kafka's in three corners: an authzid in the GS2 header is
refused (Kafka accepts one equal to the user name), so are SCRAM extensions (Kafka ignores
unknown ones, and `tokenauth` needs delegation tokens, which Onceflow lacks), and an unknown
user gets a made-up salt and fails at the proof, like a wrong password (Kafka fails at once).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping

import scramp  # type: ignore[import-untyped]

from onceflow.security.scram import MIN_ITERATIONS, SCRAM_MECHANISMS, ScramCredential
from onceflow.security.session import principal_name

__all__ = [
    "SUPPORTED_MECHANISMS",
    "CredentialLookup",
    "SaslFailed",
    "SaslServer",
    "make_sasl_server",
]

SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)

#: (user, mechanism) -> that user's stored credential, or None.
CredentialLookup = Callable[[str, str], ScramCredential | None]


class SaslFailed(Exception):
    """An exchange failed. `message` is safe to send to the client (SaslAuthenticate's
    error_message); `reason` is for the broker's audit log; `user` is the name the client
    claimed, once known. None of them holds a secret."""

    def __init__(self, message: str, *, reason: str | None = None, user: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason or message
        self.user = user


class _State(enum.Enum):
    EXPECT_FIRST = "expect-first"
    EXPECT_FINAL = "expect-final"  # SCRAM's client-final message
    COMPLETE = "complete"
    FAILED = "failed"


_TRANSITIONS: Mapping[_State, frozenset[_State]] = {
    _State.EXPECT_FIRST: frozenset({_State.EXPECT_FINAL, _State.COMPLETE, _State.FAILED}),
    _State.EXPECT_FINAL: frozenset({_State.COMPLETE, _State.FAILED}),
    _State.COMPLETE: frozenset({_State.FAILED}),  # a token after completion breaks it
    _State.FAILED: frozenset({_State.FAILED}),
}


class SaslServer:
    """One exchange. Use `make_sasl_server`; subclasses implement `_step`."""

    def __init__(self, mechanism: str, *, reauthentication: bool = False) -> None:
        self.mechanism = mechanism
        self._state = _State.EXPECT_FIRST
        self._user: str | None = None
        phase = "re-authentication" if reauthentication else "authentication"
        #: SaslServerAuthenticator's answer to anything that is not a SaslAuthenticationException.
        self._generic = (
            f"Authentication failed during {phase} due to invalid credentials "
            f"with SASL mechanism {mechanism}"
        )

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def user(self) -> str | None:
        """The authenticated user name, once complete."""
        return self._user if self.complete else None

    @property
    def principal(self) -> str | None:
        """`User:<user>`, once complete."""
        return principal_name(self._user) if self.complete and self._user is not None else None

    def step(self, token: bytes) -> bytes:
        """Take the client's next token and return the response token. Raises SaslFailed, and
        nothing else, for any input; the exchange is then over."""
        if self._state in (_State.COMPLETE, _State.FAILED):
            state = self._state.name
            self._move(_State.FAILED)
            raise SaslFailed(f"Unexpected challenge in Sasl server state {state}")
        try:
            return self._step(bytes(token))
        except SaslFailed:
            self._move(_State.FAILED)
            raise
        except Exception as e:  # the exchange must fail closed, whatever went wrong
            self._move(_State.FAILED)
            raise SaslFailed(self._generic, reason=f"internal error: {type(e).__name__}") from e

    def _step(self, token: bytes) -> bytes:
        raise NotImplementedError

    def _move(self, to: _State) -> None:
        if to not in _TRANSITIONS[self._state]:
            raise RuntimeError(f"SASL server: no transition from {self._state.name} to {to.name}")
        self._state = to

    def _succeed(self, user: str) -> None:
        self._move(_State.COMPLETE)
        self._user = user

    def _fail(self, reason: str, user: str | None = None) -> SaslFailed:
        return SaslFailed(self._generic, reason=reason, user=user)


class _PlainServer(SaslServer):
    """RFC 4616 `authzid NUL user NUL password`, with PlainSaslServer's checks and wording."""

    def __init__(
        self,
        credentials: CredentialLookup,
        plain_users: Mapping[str, str],
        *,
        reauthentication: bool = False,
    ) -> None:
        super().__init__("PLAIN", reauthentication=reauthentication)
        self._credentials = credentials
        self._plain_users = plain_users

    def _step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailed(
                "Authentication failed: Invalid username or password", reason="token is not UTF-8"
            ) from None
        parts = text.split("\0", 3)  # Kafka counts at most 4 tokens
        if len(parts) != 3:
            raise SaslFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise SaslFailed("Authentication failed: username not specified")
        if not password:
            raise SaslFailed("Authentication failed: password not specified", user=user)
        try:
            ok = self._authenticate(user, password)
        except Exception as e:
            raise SaslFailed(
                "Authentication failed: credentials for user could not be verified",
                reason=f"credential lookup failed: {type(e).__name__}",
                user=user,
            ) from e
        if not ok:
            raise SaslFailed("Authentication failed: Invalid username or password", user=user)
        if authzid and authzid != user:
            raise SaslFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username",
                user=user,
            )
        self._succeed(user)
        return b""

    def _authenticate(self, user: str, password: str) -> bool:
        expected = self._plain_users.get(user)
        if expected is not None:
            # Digests first, so the comparison's time does not depend on the lengths either.
            return hmac.compare_digest(_sha256(password), _sha256(expected))
        stored = [c for m in SCRAM_MECHANISMS if (c := self._credentials(user, m)) is not None]
        if not stored:
            _decoy(password)  # as slow as a real check, so timing does not tell who exists
            return False
        return any([c.verify_password(password) for c in stored])  # all, not first match


def _sha256(s: str) -> bytes:
    return hashlib.sha256(s.encode("utf-8", "surrogatepass")).digest()


_DECOY: ScramCredential | None = None


def _decoy(password: str) -> None:
    global _DECOY
    if _DECOY is None:
        _DECOY = ScramCredential.from_password("SCRAM-SHA-256", secrets.token_hex(16))
    _DECOY.verify_password(password)


#: Salts of users that do not exist derive from this, so asking twice gives the same salt.
_UNKNOWN_USER_KEY = secrets.token_bytes(32)


class _ScramServer(SaslServer):
    """RFC 5802 through scramp's ScramServer, with Kafka's checks around it."""

    def __init__(
        self, mechanism: str, credentials: CredentialLookup, *, reauthentication: bool = False
    ) -> None:
        super().__init__(mechanism, reauthentication=reauthentication)
        self._credentials = credentials
        self._claimed: str | None = None
        self._unknown = False
        self._scram = scramp.ScramMechanism(mechanism).make_server(self._auth_info)

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        """scramp's auth_fn: (salt, StoredKey, ServerKey, iterations) of `user`."""
        self._claimed = user
        cred = self._credentials(user, self.mechanism)
        if cred is not None:
            return cred.salt, cred.stored_key, cred.server_key, cred.iterations
        self._unknown = True
        salt = hmac.digest(_UNKNOWN_USER_KEY, f"{self.mechanism}\0{user}".encode(), "sha256")
        size = SCRAM_MECHANISMS[self.mechanism].digest_size
        return salt, secrets.token_bytes(size), secrets.token_bytes(size), MIN_ITERATIONS

    def _step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("token is not UTF-8", self._claimed) from None
        if self._state is _State.EXPECT_FIRST:
            return self._client_first(text)
        return self._client_final(text)

    def _client_first(self, text: str) -> bytes:
        if any(attr.startswith("tokenauth=") for attr in text.split(",")):
            raise self._fail("delegation tokens (SCRAM extension tokenauth) are not supported")
        try:
            self._scram.set_client_first(text)
            server_first: str = self._scram.get_server_first()
        except scramp.ScramException as e:
            raise self._fail(f"client-first: {e}", self._claimed) from None
        if self._claimed != _client_first_user(text):
            # scramp SASLprepped the name; Kafka does not, so its principal would differ.
            raise self._fail("user name is not in SASLprep normal form", self._claimed)
        self._move(_State.EXPECT_FINAL)
        return server_first.encode("utf-8")

    def _client_final(self, text: str) -> bytes:
        try:
            self._scram.set_client_final(text)
            server_final: str = self._scram.get_server_final()
        except scramp.ScramException as e:
            reason = "unknown user" if self._unknown else f"client-final: {e}"
            raise self._fail(reason, self._claimed) from None
        if self._unknown or self._claimed is None:  # cannot pass the proof; never let it by
            raise self._fail("unknown user", self._claimed)
        self._succeed(self._claimed)
        return server_final.encode("utf-8")


def _client_first_user(client_first: str) -> str:
    """The `n=` user name of a client-first message scramp accepted, unescaped as RFC 5802
    (and Kafka's ScramFormatter.username) say."""
    bare = client_first.split(",", 2)[2]
    name = bare.split(",", 1)[0][2:]
    return name.replace("=2C", ",").replace("=3D", "=")


def make_sasl_server(
    mechanism: str,
    credentials: CredentialLookup,
    plain_users: Mapping[str, str],
    *,
    reauthentication: bool = False,
) -> SaslServer:
    """A server for one exchange of `mechanism` (one of SUPPORTED_MECHANISMS; the handshake
    has already refused others). `plain_users` are the `user_<name>` options of the
    listener's PLAIN JAAS config; `reauthentication` only changes Kafka's failure wording."""
    if mechanism == "PLAIN":
        return _PlainServer(credentials, plain_users, reauthentication=reauthentication)
    if mechanism in SCRAM_MECHANISMS:
        return _ScramServer(mechanism, credentials, reauthentication=reauthentication)
    raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
