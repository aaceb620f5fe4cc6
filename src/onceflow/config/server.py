"""The server's own keys: its id, its listeners and the sizes of what it reads from sockets."""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass

from onceflow.config.kinds import (
    DEFAULT_LISTENER,
    INT,
    LIST,
    LISTENERS,
    LONG,
    NON_EMPTY,
    NON_NEGATIVE,
    POSITIVE,
    PROTOCOL_MAP,
    Listener,
    render_listeners,
)
from onceflow.config.spec import Synonym, invalid, key


def _local_hostname() -> str:
    """What a wildcard listener advertises when advertised.listeners is unset (as Kafka does)."""
    return socket.gethostname()


@dataclass(frozen=True)
class ServerKeys:
    """Part of `BrokerConfig`: who the broker is and where it listens."""

    # fmt: off
    node_id: int = key(
        "node.id", INT, 0, NON_NEGATIVE,
        "This broker's id, as clients see it in Metadata.",
        Synonym("broker.id",
                "Legacy synonym of node.id; must agree with it if both are set."),
    )
    listeners: tuple[Listener, ...] = key(
        "listeners", LISTENERS, (DEFAULT_LISTENER,), NON_EMPTY,
        "Sockets to listen on: HOST:PORT or Kafka's NAME://HOST:PORT, comma-separated. An empty "
        "host or 0.0.0.0 listens on every interface; listeners named in controller.listener.names "
        "are ignored.",
    )
    advertised_listeners: tuple[Listener, ...] = key(
        "advertised.listeners", LISTENERS, (), None,
        "Addresses given to clients in Metadata, matched to listeners by name. Unset: the "
        "listeners themselves, with this machine's host name in place of a wildcard host.",
    )
    listener_security_protocol_map: tuple[tuple[str, str], ...] = key(
        "listener.security.protocol.map", PROTOCOL_MAP,
        (("CONTROLLER", "PLAINTEXT"), ("PLAINTEXT", "PLAINTEXT"), ("SSL", "SSL"),
         ("SASL_PLAINTEXT", "SASL_PLAINTEXT"), ("SASL_SSL", "SASL_SSL")),
        None,
        "Listener name to security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.",
    )
    controller_listener_names: tuple[str, ...] = key(
        "controller.listener.names", LIST, (), None,
        "KRaft controller listeners. Onceflow runs no controller quorum; listeners with these "
        "names are skipped so a KRaft server.properties loads unchanged.",
    )
    socket_request_max_bytes: int = key(
        "socket.request.max.bytes", INT, 104_857_600, POSITIVE,
        "Largest request the broker reads; a bigger size prefix closes the connection.",
    )
    queued_max_requests: int = key(
        "queued.max.requests", INT, 500, POSITIVE,
        "Requests queued per broker before the server stops reading from sockets.",
    )
    connections_max_idle_ms: int = key(
        "connections.max.idle.ms", LONG, 600_000, POSITIVE,
        "Idle connections are closed after this long.",
    )
    # fmt: on

    def effective_advertised_listeners(self) -> tuple[Listener, ...]:
        """advertised.listeners, or the listeners with this host's name for wildcard hosts."""
        if self.advertised_listeners:
            return tuple(
                dataclasses.replace(ad, host=_local_hostname()) if ad.host == "" else ad
                for ad in self.advertised_listeners
            )
        return tuple(
            dataclasses.replace(listener, host=_local_hostname())
            if listener.is_wildcard
            else listener
            for listener in self.listeners
        )

    def advertised_listener_for(self, listener_name: str) -> Listener:
        """The address to give clients that connected through the listener `listener_name`."""
        advertised = self.effective_advertised_listeners()
        for listener in advertised:
            if listener.name == listener_name.upper():
                return listener
        return advertised[0]

    def security_protocol(self, listener_name: str) -> str:
        """The security protocol of a listener (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."""
        return dict(self.listener_security_protocol_map)[listener_name.upper()]


def check_listeners(cfg: ServerKeys) -> None:
    """Each listener has a protocol, a name and a socket of its own; advertised listeners
    name listeners and give addresses a client can connect to."""
    protocols = dict(cfg.listener_security_protocol_map)
    seen_names: set[str] = set()
    seen_sockets: set[tuple[str, int]] = set()
    for listener in cfg.listeners:
        if listener.name not in protocols:
            reason = (
                f"no security protocol for listener name {listener.name} in "
                "listener.security.protocol.map"
            )
            raise invalid("listeners", render_listeners(cfg.listeners), reason)
        if listener.name in seen_names:
            raise invalid("listeners", render_listeners(cfg.listeners), "each listener name once")
        if listener.port != 0 and (listener.host, listener.port) in seen_sockets:
            raise invalid("listeners", render_listeners(cfg.listeners), "each HOST:PORT once")
        seen_names.add(listener.name)
        seen_sockets.add((listener.host, listener.port))
    for ad in cfg.advertised_listeners:
        shown = render_listeners(cfg.advertised_listeners)
        if ad.name not in seen_names:
            raise invalid(
                "advertised.listeners",
                shown,
                f"only listener names defined in listeners ({', '.join(sorted(seen_names))})",
            )
        if ad.host in ("0.0.0.0", "::"):
            raise invalid(
                "advertised.listeners", shown, "an address clients can connect to, not a wildcard"
            )
        if ad.port == 0:
            raise invalid("advertised.listeners", shown, "a port from 1 to 65535")
