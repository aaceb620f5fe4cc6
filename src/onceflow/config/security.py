"""TLS, SASL and ACL keys. Each ssl.*, sasl.* and connections.max.reauth.ms key may also be set
per listener as listener.name.<listener>.<key>; JAAS configs only per listener and mechanism.

The names the values may take (the authorizer class names, the SASL mechanisms) are written
here rather than imported from onceflow.security, so config stays a leaf module: security
implements what these keys switch on, and a unit test holds the two lists together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from onceflow.config.kinds import (
    BOOL,
    LIST,
    LONG,
    NON_NEGATIVE,
    OPTIONAL_NAME,
    PASSWORD,
    SECURITY_PROTOCOLS,
    STRING,
    UPPER_LIST,
    one_of,
)
from onceflow.config.spec import Check, Key, key, keys_of

#: `authorizer.class.name` values that mean the built-in authorizer, so an existing
#: `server.properties` (ZooKeeper or KRaft era) works unchanged.
AUTHORIZER_CLASS_NAMES = frozenset(
    {
        "kafka.security.authorizer.AclAuthorizer",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
        "onceflow.security.authorizer.Authorizer",
    }
)

#: The SASL mechanisms sasl.enabled.mechanisms may name: those onceflow.security.sasl
#: implements (its SUPPORTED_MECHANISMS, which a unit test compares with this).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
PEM_ONLY = Check("PEM (convert JKS or PKCS12 stores to PEM files)", lambda v: v.upper() == "PEM")
_PRINCIPAL_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*:.+")
_SUPER_USERS = Check(
    "principals such as User:admin, semicolon-separated",
    lambda v: all(_PRINCIPAL_RE.fullmatch(p.strip()) for p in v.split(";") if p.strip()),
)
_AUTHORIZERS = Check(
    "the built-in authorizer (empty, or one of " + ", ".join(sorted(AUTHORIZER_CLASS_NAMES)) + ")",
    lambda v: v == "" or v in AUTHORIZER_CLASS_NAMES,
)


@dataclass(frozen=True)
class SecurityKeys:
    """Part of `BrokerConfig`: how listeners encrypt, authenticate and authorize."""

    # fmt: off
    inter_broker_listener_name: str = key(
        "inter.broker.listener.name", OPTIONAL_NAME, "", None,
        "The listener brokers of a cluster use to reach each other (and authenticate on). "
        "Unset: the one whose security protocol is security.inter.broker.protocol.",
    )
    security_inter_broker_protocol: str = key(
        "security.inter.broker.protocol", STRING, "PLAINTEXT", one_of(*SECURITY_PROTOCOLS),
        "Security protocol of the inter-broker listener when inter.broker.listener.name is "
        "unset.",
    )
    ssl_keystore_type: str = key(
        "ssl.keystore.type", STRING, "PEM", PEM_ONLY,
        "Format of the broker's key and certificate: PEM.",
    )
    ssl_keystore_location: str = key(
        "ssl.keystore.location", STRING, "", None,
        "PEM file with the broker's private key and certificate chain.",
    )
    ssl_keystore_certificate_chain: str = key(
        "ssl.keystore.certificate.chain", PASSWORD, "", None,
        "The broker's certificate chain as PEM text (instead of ssl.keystore.location).",
    )
    ssl_keystore_key: str = key(
        "ssl.keystore.key", PASSWORD, "", None,
        "The broker's private key as PEM text (instead of ssl.keystore.location).",
    )
    ssl_key_password: str = key(
        "ssl.key.password", PASSWORD, "", None,
        "Password of an encrypted private key.",
    )
    ssl_keystore_password: str = key(
        "ssl.keystore.password", PASSWORD, "", None,
        "Accepted for compatibility; a PEM keystore's key is decrypted with ssl.key.password.",
    )
    ssl_truststore_type: str = key(
        "ssl.truststore.type", STRING, "PEM", PEM_ONLY,
        "Format of the trusted certificates: PEM.",
    )
    ssl_truststore_location: str = key(
        "ssl.truststore.location", STRING, "", None,
        "PEM file of the CA certificates client certificates (and, between brokers, broker "
        "certificates) must be signed by.",
    )
    ssl_truststore_certificates: str = key(
        "ssl.truststore.certificates", PASSWORD, "", None,
        "Trusted CA certificates as PEM text (instead of ssl.truststore.location).",
    )
    ssl_truststore_password: str = key(
        "ssl.truststore.password", PASSWORD, "", None,
        "Accepted for compatibility; PEM truststores have no password.",
    )
    ssl_client_auth: str = key(
        "ssl.client.auth", STRING, "none", one_of("none", "requested", "required"),
        "Client certificates on SSL listeners: required, requested (used when sent) or none. "
        "The principal of a certificate is User:<its subject>, after ssl.principal.mapping.rules.",
    )
    ssl_enabled_protocols: tuple[str, ...] = key(
        "ssl.enabled.protocols", LIST,
        TLS_PROTOCOLS,
        Check("TLSv1.2 and/or TLSv1.3", lambda v: bool(v) and set(v) <= set(TLS_PROTOCOLS)),
        "TLS versions accepted; nothing older than TLS 1.2.",
    )
    ssl_protocol: str = key(
        "ssl.protocol", STRING, "TLSv1.3", one_of("TLSv1.2", "TLSv1.3", "TLS"),
        "Accepted for compatibility; the versions are ssl.enabled.protocols.",
    )
    ssl_cipher_suites: tuple[str, ...] = key(
        "ssl.cipher.suites", LIST, (), None,
        "OpenSSL cipher names for TLS 1.2 (empty: OpenSSL's secure defaults).",
    )
    ssl_endpoint_identification_algorithm: str = key(
        "ssl.endpoint.identification.algorithm", STRING, "https", one_of("https", ""),
        "https: a broker connecting to another checks the host name in its certificate.",
    )
    ssl_principal_mapping_rules: str = key(
        "ssl.principal.mapping.rules", STRING, "DEFAULT", None,
        "Rules mapping a certificate's subject to a user name (Kafka's RULE:pattern/replace/[LU] "
        "syntax, comma-separated, DEFAULT keeps the whole subject).",
    )
    sasl_enabled_mechanisms: tuple[str, ...] = key(
        "sasl.enabled.mechanisms", UPPER_LIST, ("GSSAPI",), None,
        "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI and "
        "OAUTHBEARER are not supported).",
    )
    sasl_mechanism_inter_broker_protocol: str = key(
        "sasl.mechanism.inter.broker.protocol", OPTIONAL_NAME, "GSSAPI", None,
        "Mechanism brokers use to authenticate to each other on a SASL inter-broker listener; "
        "the credentials are the username and password of that listener's JAAS config.",
    )
    connections_max_reauth_ms: int = key(
        "connections.max.reauth.ms", LONG, 0, NON_NEGATIVE,
        "Lifetime of a SASL session (KIP-368): a client must re-authenticate before it ends or "
        "its connection is closed. 0: sessions never expire.",
    )
    authorizer_class_name: str = key(
        "authorizer.class.name", STRING, "", _AUTHORIZERS,
        "Switches ACLs on. Kafka's AclAuthorizer and StandardAuthorizer class names (and "
        "onceflow.security.authorizer.Authorizer) all mean the built-in authorizer. Empty: every "
        "request is allowed.",
    )
    super_users: str = key(
        "super.users", STRING, "", _SUPER_USERS,
        "Principals allowed everything, semicolon-separated (User:admin;User:broker).",
    )
    allow_everyone_if_no_acl_found: bool = key(
        "allow.everyone.if.no.acl.found", BOOL, False, None,
        "Allow any principal on a resource that has no ACL at all.",
    )
    # fmt: on
    #: listener.name.<listener>.<key> settings: (listener, key, parsed value); JAAS configs
    #: are kept raw, keyed <mechanism>.sasl.jaas.config.
    listener_settings: tuple[tuple[str, str, Any], ...] = field(default=(), repr=False)

    def listener_value(self, listener_name: str, key: str) -> Any:
        """A security key's value for one listener: listener.name.<listener>.<key> if set,
        else the broker-wide key."""
        name = listener_name.upper()
        for listener, set_key, value in self.listener_settings:
            if listener == name and set_key == key:
                return value
        return getattr(self, SECURITY_KEYS[key].attr)

    def jaas_config(self, listener_name: str, mechanism: str) -> str | None:
        """listener.name.<listener>.<mechanism>.sasl.jaas.config, raw, if set."""
        wanted = f"{mechanism.lower()}.sasl.jaas.config"
        for listener, set_key, value in self.listener_settings:
            if listener == listener_name.upper() and set_key == wanted:
                return str(value)
        return None


#: The security keys by name: the only keys a listener may override.
SECURITY_KEYS: dict[str, Key] = {row.name: row for row in keys_of(SecurityKeys)}
