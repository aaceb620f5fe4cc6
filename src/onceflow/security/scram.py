"""SCRAM credentials as Kafka keeps them: salt, StoredKey, ServerKey and iterations per user
and mechanism (RFC 5802), never a password; Kafka's mechanism codes and its
AlterUserScramCredentials rules (KIP-554); and a versioned JSON form for the broker's store.

Passwords are hashed as raw UTF-8 with no SASLprep, as Kafka's ScramFormatter and the
clients (Java, librdkafka, kafka-python) do: a credential made here must match what a client
derives from the same password. The primitives (Hi, HMAC, H) are scramp's.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac as std_hmac
import json
import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from scramp.utils import h, hi, hmac  # type: ignore[import-untyped]

from onceflow.errors import ErrorCode

__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "MIN_SALT_BYTES",
    "SCRAM_MECHANISMS",
    "ScramCredential",
    "ScramDeletion",
    "ScramMechanism",
    "ScramMechanismSpec",
    "ScramUpsertion",
    "decode_credentials",
    "encode_credentials",
    "salted_password",
    "user_alteration_error",
    "validate_deletion",
    "validate_upsertion",
]

#: Kafka's bounds (ScramMechanism.minIterations, ScramControlManager.MAX_ITERATIONS).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
#: Onceflow's floor: scramp refuses shorter salts at login. Kafka's own clients send 26 bytes.
MIN_SALT_BYTES = 12
_DEFAULT_SALT_BYTES = 32


class ScramMechanism(enum.IntEnum):
    """Kafka's wire codes in AlterUserScramCredentials and DescribeUserScramCredentials."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @classmethod
    def from_code(cls, code: int) -> ScramMechanism:
        """Like Kafka's ScramMechanism.fromType: any other code is UNKNOWN."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ScramMechanismSpec:
    name: str
    code: ScramMechanism
    hash_name: str
    min_iterations: int = MIN_ITERATIONS
    max_iterations: int = MAX_ITERATIONS

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hash_factory(self) -> Callable[..., Any]:
        """The hashlib constructor scramp's primitives take."""
        return getattr(hashlib, self.hash_name)  # type: ignore[no-any-return]


SCRAM_MECHANISMS: Mapping[str, ScramMechanismSpec] = MappingProxyType(
    {
        "SCRAM-SHA-256": ScramMechanismSpec(
            "SCRAM-SHA-256", ScramMechanism.SCRAM_SHA_256, "sha256"
        ),
        "SCRAM-SHA-512": ScramMechanismSpec(
            "SCRAM-SHA-512", ScramMechanism.SCRAM_SHA_512, "sha512"
        ),
    }
)


def _spec(mechanism: str) -> ScramMechanismSpec:
    spec = SCRAM_MECHANISMS.get(mechanism)
    if spec is None:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
    return spec


def _check_iterations(spec: ScramMechanismSpec, iterations: int) -> None:
    if type(iterations) is not int or not spec.min_iterations <= iterations <= spec.max_iterations:
        raise ValueError(
            f"iterations must be {spec.min_iterations}..{spec.max_iterations}, not {iterations!r}"
        )


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword = Hi(password, salt, i): what a client sends in an upsertion."""
    return bytes(hi(_spec(mechanism).hash_factory(), password.encode("utf-8"), salt, iterations))


@dataclass(frozen=True)
class ScramCredential:
    """One user's credential for one mechanism. `repr` hides the keys and salt: StoredKey
    with the salt allows an offline guessing attack, ServerKey lets one pose as the broker."""

    mechanism: str
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def __post_init__(self) -> None:
        spec = _spec(self.mechanism)
        _check_iterations(spec, self.iterations)
        if len(self.salt) < MIN_SALT_BYTES:
            raise ValueError(f"a salt must have at least {MIN_SALT_BYTES} bytes")
        if len(self.stored_key) != spec.digest_size or len(self.server_key) != spec.digest_size:
            raise ValueError(f"{self.mechanism} keys must have {spec.digest_size} bytes")

    @classmethod
    def from_password(
        cls,
        mechanism: str,
        password: str,
        iterations: int = MIN_ITERATIONS,
        salt: bytes | None = None,
    ) -> ScramCredential:
        _check_iterations(_spec(mechanism), iterations)  # before spending them on Hi
        salt = secrets.token_bytes(_DEFAULT_SALT_BYTES) if salt is None else salt
        salted = salted_password(mechanism, password, salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """What the broker keeps of an AlterUserScramCredentials upsertion."""
        if not salted_password:
            raise ValueError("a salted password must not be empty")
        hf = _spec(mechanism).hash_factory()
        stored_key = bytes(h(hf, hmac(hf, salted_password, b"Client Key")))
        server_key = bytes(hmac(hf, salted_password, b"Server Key"))
        return cls(mechanism, salt, stored_key, server_key, iterations)

    def verify_password(self, password: str) -> bool:
        """Whether `password` derives this credential (constant-time in the keys); SASL/PLAIN
        checks stored SCRAM credentials with it."""
        try:
            salted = salted_password(self.mechanism, password, self.salt, self.iterations)
        except UnicodeEncodeError:
            return False
        hf = _spec(self.mechanism).hash_factory()
        stored_key = bytes(h(hf, hmac(hf, salted, b"Client Key")))
        return std_hmac.compare_digest(stored_key, self.stored_key)


# --- AlterUserScramCredentials (KIP-554), as Kafka's ScramControlManager decides ------------


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    name: str
    mechanism: int


_OK: tuple[ErrorCode, str | None] = (ErrorCode.none, None)
_DUPLICATE = "A user credential cannot be altered twice in the same request"


def _validate_user_and_mechanism(name: str, mechanism: int) -> tuple[ErrorCode, str | None]:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if ScramMechanism.from_code(mechanism) is ScramMechanism.UNKNOWN:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return _OK


def validate_upsertion(upsertion: ScramUpsertion) -> tuple[ErrorCode, str | None]:
    """(error code, message) Kafka answers for one upsertion; (none, None) if acceptable.
    The salt and salted-password checks are Onceflow's: Kafka stores an unusable credential
    for a short salt, and fails an empty salted password with UNKNOWN_SERVER_ERROR."""
    error = _validate_user_and_mechanism(upsertion.name, upsertion.mechanism)
    if error != _OK:
        return error
    if upsertion.iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if upsertion.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    if len(upsertion.salt) < MIN_SALT_BYTES:
        return ErrorCode.unacceptable_credential, f"Salt must have at least {MIN_SALT_BYTES} bytes"
    if not upsertion.salted_password:
        return ErrorCode.unacceptable_credential, "Salted password must not be empty"
    return _OK


def validate_deletion(deletion: ScramDeletion, exists: bool) -> tuple[ErrorCode, str | None]:
    error = _validate_user_and_mechanism(deletion.name, deletion.mechanism)
    if error != _OK:
        return error
    if not exists:
        return (
            ErrorCode.resource_not_found,
            "Attempt to delete a user credential that does not exist",
        )
    return _OK


def user_alteration_error(
    name: str,
    deletions: Sequence[ScramDeletion],
    upsertions: Sequence[ScramUpsertion],
    stored: Collection[str],
) -> tuple[ErrorCode, str | None]:
    """Kafka's answer for one user's alterations in a request, which succeed or fail
    together; `stored` names the mechanisms the user has credentials for. A request may set
    both mechanisms of a user, as kafka-configs.sh sends them; one mechanism twice is
    DUPLICATE_RESOURCE."""
    mechanisms = [d.mechanism for d in deletions] + [u.mechanism for u in upsertions]
    for mechanism in mechanisms:
        error = _validate_user_and_mechanism(name, mechanism)
        if error != _OK:
            return error
    if len(set(mechanisms)) < len(mechanisms):
        return ErrorCode.duplicate_resource, _DUPLICATE
    for d in deletions:
        exists = ScramMechanism.from_code(d.mechanism).mechanism_name in stored
        error = validate_deletion(d, exists)
        if error != _OK:
            return error
    for u in upsertions:
        error = validate_upsertion(u)
        if error != _OK:
            return error
    return _OK


# --- the store's form: versioned JSON, base64 for bytes ------------------------------------

_FORMAT_VERSION = 1
_BYTES_FIELDS = ("salt", "stored_key", "server_key")


def encode_credentials(mapping: Mapping[str, Mapping[str, ScramCredential]]) -> bytes:
    users: dict[str, dict[str, dict[str, Any]]] = {}
    for user, by_mechanism in mapping.items():
        users[user] = {}
        for mechanism, cred in by_mechanism.items():
            if cred.mechanism != mechanism:
                raise ValueError(f"a {cred.mechanism} credential filed under {mechanism}")
            entry: dict[str, Any] = {
                name: base64.b64encode(getattr(cred, name)).decode("ascii")
                for name in _BYTES_FIELDS
            }
            entry["iterations"] = cred.iterations
            users[user][mechanism] = entry
    doc = {"version": _FORMAT_VERSION, "users": users}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def decode_credentials(raw: bytes | str) -> dict[str, dict[str, ScramCredential]]:
    """The inverse of `encode_credentials`; ValueError on anything corrupt."""
    try:
        doc = json.loads(raw)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise ValueError("SCRAM credentials are not valid JSON") from e
    if not isinstance(doc, dict) or set(doc) != {"version", "users"}:
        raise ValueError("SCRAM credentials: expected an object with version and users")
    if doc["version"] != _FORMAT_VERSION or type(doc["version"]) is not int:
        raise ValueError(f"SCRAM credentials: unsupported format version {doc['version']!r}")
    users = doc["users"]
    if not isinstance(users, dict):
        raise ValueError("SCRAM credentials: users must be an object")
    out: dict[str, dict[str, ScramCredential]] = {}
    for user, by_mechanism in users.items():
        if not isinstance(by_mechanism, dict):
            raise ValueError(f"SCRAM credentials of {user!r}: expected an object")
        out[user] = {m: _decode_one(user, m, entry) for m, entry in by_mechanism.items()}
    return out


def _decode_one(user: str, mechanism: str, entry: object) -> ScramCredential:
    where = f"SCRAM credentials of {user!r} for {mechanism!r}"
    if not isinstance(entry, dict) or set(entry) != {*_BYTES_FIELDS, "iterations"}:
        raise ValueError(f"{where}: expected salt, stored_key, server_key and iterations")
    try:
        salt, stored_key, server_key = (
            base64.b64decode(entry[name], validate=True) for name in _BYTES_FIELDS
        )
        return ScramCredential(mechanism, salt, stored_key, server_key, entry["iterations"])
    except (ValueError, TypeError, binascii.Error) as e:
        raise ValueError(f"{where}: {e}") from e
