"""The broker's security state: each listener's TLS and SASL setup, the ACLs and the SCRAM
credentials, and where they are kept.

ACLs and credentials are small, changed rarely and read on every request or login, so the
broker holds them in memory and writes every change through a `SecurityStore` before it
takes effect: files in the data dir on a single broker, znodes in ZooKeeper on a cluster
(every broker watches them). A change a client was told succeeded is durable.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from onceflow.config import BrokerConfig, Listener
from onceflow.errors import ErrorCode
from onceflow.security.acl import AclBinding, AclBindingFilter
from onceflow.security.authorizer import (
    Authorizer,
    decode_bindings,
    encode_bindings,
    filter_matches,
    parse_super_users,
    validate_binding,
    validate_filter,
)
from onceflow.security.client_config import ClientSecurity
from onceflow.security.jaas import parse_jaas_config
from onceflow.security.principal import SslPrincipalMapper, parse_mapping_rules
from onceflow.security.scram import ScramCredential, decode_credentials, encode_credentials
from onceflow.security.tls import TlsSettings, server_context
from onceflow.storage.fs import FileSystem

log = logging.getLogger(__name__)

ACLS_FILE = "security-acls.json"
CREDENTIALS_FILE = "security-scram-credentials.json"

Credentials = dict[str, dict[str, ScramCredential]]


class SecuritySetupError(Exception):
    """A listener's security settings cannot be used (a missing file, a bad key...)."""


@dataclass(frozen=True)
class ListenerSecurity:
    """How connections on one listener are secured and authenticated."""

    name: str
    protocol: str
    tls: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    #: The `user_<name>="<password>"` options of the listener's PLAIN JAAS config.
    plain_users: Mapping[str, str] = field(default_factory=dict)
    reauth_ms: int = 0
    principal_mapper: SslPrincipalMapper | None = None

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def listener_security(config: BrokerConfig, listener: Listener) -> ListenerSecurity:
    """Build a listener's security from the config; raises SecuritySetupError."""
    name = listener.name
    protocol = config.security_protocol(name)
    tls = None
    mapper = None
    try:
        if protocol in ("SSL", "SASL_SSL"):
            tls = server_context(_tls_settings(config, name))
            mapper = parse_mapping_rules(config.listener_value(name, "ssl.principal.mapping.rules"))
    except ValueError as exc:  # TlsConfigError and bad mapping rules are ValueErrors
        raise SecuritySetupError(f"listener {name}: {exc}") from exc
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = {}
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanisms = tuple(config.listener_value(name, "sasl.enabled.mechanisms"))
        jaas = config.jaas_config(name, "PLAIN")
        if jaas is not None:
            try:
                plain_users = parse_jaas_config(jaas).plain_users()
            except ValueError as exc:
                raise SecuritySetupError(
                    f"listener.name.{name.lower()}.plain.sasl.jaas.config: {exc}"
                ) from exc
    return ListenerSecurity(
        name=name,
        protocol=protocol,
        tls=tls,
        mechanisms=mechanisms,
        plain_users=plain_users,
        reauth_ms=config.listener_value(name, "connections.max.reauth.ms"),
        principal_mapper=mapper,
    )


def _tls_settings(config: BrokerConfig, name: str) -> TlsSettings:
    def value(key: str) -> str | None:
        return str(config.listener_value(name, key)) or None  # empty: unset

    return TlsSettings(
        keystore_location=value("ssl.keystore.location"),
        keystore_certificate_chain=value("ssl.keystore.certificate.chain"),
        keystore_key=value("ssl.keystore.key"),
        key_password=value("ssl.key.password"),
        truststore_location=value("ssl.truststore.location"),
        truststore_certificates=value("ssl.truststore.certificates"),
        client_auth=config.listener_value(name, "ssl.client.auth"),
        enabled_protocols=tuple(config.listener_value(name, "ssl.enabled.protocols")),
        cipher_suites=tuple(config.listener_value(name, "ssl.cipher.suites")) or None,
    )


def inter_broker_security(config: BrokerConfig) -> ClientSecurity | None:
    """How this broker connects and authenticates to the others: the inter-broker
    listener's protocol; its own certificate (for mutual TLS) and truststore; for SASL,
    sasl.mechanism.inter.broker.protocol with the username and password of that listener's
    JAAS config for the mechanism, as Kafka brokers do. None for PLAINTEXT."""
    listener = config.inter_broker_listener()
    protocol = config.security_protocol(listener.name)
    if protocol == "PLAINTEXT":
        return None
    tls = None
    if protocol in ("SSL", "SASL_SSL"):
        settings = _tls_settings(config, listener.name)
        tls = dataclasses.replace(
            settings,
            client_auth="none",
            endpoint_identification=config.ssl_endpoint_identification_algorithm,
        )
    mechanism = username = password = None
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = config.sasl_mechanism_inter_broker_protocol
        jaas = config.jaas_config(listener.name, mechanism)
        if jaas is None:
            raise SecuritySetupError(
                f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config "
                "must give the username and password brokers authenticate to each other with"
            )
        try:
            entry = parse_jaas_config(jaas)
        except ValueError as exc:
            raise SecuritySetupError(str(exc)) from exc
        username, password = entry.username, entry.password
    try:
        return ClientSecurity(protocol, tls, mechanism, username, password)
    except ValueError as exc:
        raise SecuritySetupError(f"inter-broker listener {listener.name}: {exc}") from exc


class SecurityStore(Protocol):
    """Where ACLs and SCRAM credentials live. `update_*` applies a change to what the store
    holds (atomically, also against other brokers) and returns the new set once durable."""

    def load(self) -> tuple[frozenset[AclBinding], Credentials]: ...

    async def update_acls(
        self, change: Callable[[frozenset[AclBinding]], frozenset[AclBinding]]
    ) -> frozenset[AclBinding]: ...

    async def update_credentials(
        self, change: Callable[[Credentials], Credentials]
    ) -> Credentials: ...


class LocalSecurityStore:
    """Two small files in the data dir, each replaced atomically (write, fsync, rename).
    Only this broker writes them, so its memory is the current content."""

    def __init__(self, fs: FileSystem, log_dir: str) -> None:
        self.fs = fs
        self.acls_path = os.path.join(log_dir, ACLS_FILE)
        self.credentials_path = os.path.join(log_dir, CREDENTIALS_FILE)
        self._acls: frozenset[AclBinding] = frozenset()
        self._credentials: Credentials = {}

    def load(self) -> tuple[frozenset[AclBinding], Credentials]:
        if self.fs.exists(self.acls_path):
            self._acls = decode_bindings(self.fs.read_file(self.acls_path))
        if self.fs.exists(self.credentials_path):
            self._credentials = decode_credentials(self.fs.read_file(self.credentials_path))
        return self._acls, self._credentials

    async def update_acls(
        self, change: Callable[[frozenset[AclBinding]], frozenset[AclBinding]]
    ) -> frozenset[AclBinding]:
        updated = change(self._acls)
        self.fs.write_file_atomic(self.acls_path, encode_bindings(updated))
        self._acls = updated
        return updated

    async def update_credentials(self, change: Callable[[Credentials], Credentials]) -> Credentials:
        updated = change(self._credentials)
        self.fs.write_file_atomic(self.credentials_path, encode_credentials(updated))
        self._credentials = updated
        return updated


AclError = tuple[ErrorCode, str]


class SecurityState:
    """ACLs and credentials in memory, changed only through the store."""

    def __init__(self, config: BrokerConfig, store: SecurityStore) -> None:
        self.store = store
        self.authorizer: Authorizer | None = None
        if config.authorizer_class_name:
            self.authorizer = Authorizer(
                parse_super_users(config.super_users), config.allow_everyone_if_no_acl_found
            )
        self._bindings: frozenset[AclBinding] = frozenset()
        self._credentials: Credentials = {}

    def load(self) -> None:
        """Take what the store holds (at startup)."""
        bindings, credentials = self.store.load()
        self.set_acls(bindings)
        self.set_credentials(credentials)

    def set_acls(self, bindings: frozenset[AclBinding]) -> None:
        """The current ACLs, as written here or seen changed by another broker."""
        self._bindings = bindings
        if self.authorizer is not None:
            self.authorizer.replace_all(bindings)

    def set_credentials(self, credentials: Credentials) -> None:
        self._credentials = credentials

    # ---- SCRAM credentials ------------------------------------------------------------

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._credentials.get(user, {}).get(mechanism)

    @property
    def credentials(self) -> Mapping[str, Mapping[str, ScramCredential]]:
        return self._credentials

    async def change_credentials(
        self,
        upserts: Iterable[ScramCredentialUpsert],
        deletions: Iterable[tuple[str, str]],
    ) -> None:
        """Apply upserts and (user, mechanism) deletions at once, durably."""
        upserts, deletions = list(upserts), list(deletions)

        def change(current: Credentials) -> Credentials:
            updated = {user: dict(mechs) for user, mechs in current.items()}
            for user, credential in upserts:
                updated.setdefault(user, {})[credential.mechanism] = credential
            for user, mechanism in deletions:
                mechs = updated.get(user, {})
                mechs.pop(mechanism, None)
                if not mechs:
                    updated.pop(user, None)
            return updated

        self.set_credentials(await self.store.update_credentials(change))

    # ---- ACLs -------------------------------------------------------------------------

    @property
    def bindings(self) -> frozenset[AclBinding]:
        return self._bindings

    async def create_acls(self, bindings: list[AclBinding]) -> list[AclError | None]:
        """Add the valid bindings (all in one durable write); one result per binding."""
        results: list[AclError | None] = [validate_binding(b) for b in bindings]
        added = frozenset(b for b, error in zip(bindings, results, strict=True) if error is None)
        if added:
            self.set_acls(await self.store.update_acls(lambda current: current | added))
        return results

    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding] | AclError:
        error = validate_filter(acl_filter)
        if error is not None:
            return error
        return _matching(acl_filter, self._bindings)

    async def delete_acls(
        self, filters: list[AclBindingFilter]
    ) -> list[list[AclBinding] | AclError]:
        """Remove what each filter matches (all in one durable write), against the store's
        current set, so what is reported deleted is what was deleted."""
        errors = [validate_filter(f) for f in filters]
        valid = [f for f, error in zip(filters, errors, strict=True) if error is None]
        matched: dict[int, list[AclBinding]] = {}

        def change(current: frozenset[AclBinding]) -> frozenset[AclBinding]:
            matched.clear()
            removed: set[AclBinding] = set()
            for i, acl_filter in enumerate(valid):
                matched[i] = _matching(acl_filter, current)
                removed.update(matched[i])
            return current - removed

        if valid:
            self.set_acls(await self.store.update_acls(change))
        results: list[list[AclBinding] | AclError] = []
        index = 0
        for error in errors:
            if error is not None:
                results.append(error)
            else:
                results.append(matched[index])
                index += 1
        return results


def _matching(acl_filter: AclBindingFilter, bindings: Iterable[AclBinding]) -> list[AclBinding]:
    return sorted((b for b in bindings if filter_matches(acl_filter, b)), key=_binding_order)


ScramCredentialUpsert = tuple[str, ScramCredential]


def _binding_order(b: AclBinding) -> tuple[object, ...]:
    return (
        b.pattern.resource_type,
        b.pattern.name,
        b.pattern.pattern_type,
        b.entry.principal,
        b.entry.host,
        b.entry.operation,
        b.entry.permission,
    )
