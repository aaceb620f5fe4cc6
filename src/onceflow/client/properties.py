"""Client properties files (`--command-config`): read as Kafka's tools read them, and
turned into the security of Onceflow's own client (`ClientSecurity`).

As with Kafka's tools, the file is a Java properties file (`security.protocol`, `ssl.*`,
`sasl.*`), Java's names or librdkafka's; `librdkafka.py` turns the same properties into
librdkafka's settings for confluent-kafka's clients.
"""

from __future__ import annotations

from collections.abc import Mapping

from onceflow.client.errors import ConfigError
from onceflow.config import ConfigError as PropertiesError
from onceflow.config import read_properties
from onceflow.security.client_config import ClientSecurity
from onceflow.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, parse_jaas_config

__all__ = ["client_security", "jaas_credentials", "read_command_config"]


def read_command_config(path: str | None) -> dict[str, str]:
    """The file's properties, values trimmed as Kafka trims them; {} without a file."""
    if path is None:
        return {}
    try:
        return {k: v.strip() for k, v in read_properties(path).items()}
    except PropertiesError as exc:
        raise ConfigError(str(exc)) from None


def client_security(props: Mapping[str, str], source: str | None) -> ClientSecurity | None:
    """`props` as the security of Onceflow's own client (None without properties); errors
    name the file."""
    if not props:
        return None
    try:
        return ClientSecurity.from_properties(props)
    except ValueError as exc:  # names the key, never a password
        raise ConfigError(f"{source}: {exc}") from None


def jaas_credentials(jaas: str) -> tuple[str, str]:
    """The username and password of a PLAIN or SCRAM `sasl.jaas.config`."""
    try:
        entry = parse_jaas_config(jaas)
    except ValueError as exc:
        raise ConfigError(f"sasl.jaas.config: {exc}") from None
    if entry.login_module not in (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE):
        raise ConfigError(
            f"sasl.jaas.config: {entry.login_module} is not supported; use PlainLoginModule "
            "or ScramLoginModule (or sasl.username and sasl.password)"
        )
    if entry.username is None or entry.password is None:
        raise ConfigError("sasl.jaas.config needs both username and password")
    return entry.username, entry.password
