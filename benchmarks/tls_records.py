"""What a TLS receiver pays per MB for the records it is sent, with the broker's own SSL
stack (Python's `ssl` over OpenSSL, memory BIOs as asyncio's SSL protocol uses them).

The same plaintext is encrypted twice: in full 16 KiB records, and in the records librdkafka
sends for a ~1 MB produce request of 1 KiB values (seen with strace of librdkafka 2.16 over
SASL_SSL: the first ~290 KB of the request's buffer as 16 KiB records, then, for each further
record, its ~10 B header and its 1 KiB value as a TLS record each). Each stream is then
decrypted as the broker decrypts a connection's bytes: 256 KiB written to the incoming BIO,
read out into a 1 MiB buffer. The figures are milliseconds per MB of plaintext.
"""

from __future__ import annotations

import contextlib
import ssl
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.security import Pki, make_pki

REQUESTS = 20  # ~1 MB produce requests per stream
COPIED_BYTES = 290_000  # the part of each request librdkafka sends in full records
SPLIT_RECORDS = 680  # then this many (header, value) pairs, each its own TLS record
HEADER_BYTES, VALUE_BYTES = 10, 1024
SOCKET_READ = 256 * 1024  # asyncio's SSL protocol reads the socket this much at a time
PATTERNS = ("full_records", "librdkafka_produce")


def decrypt_figures(rounds: int = 5) -> dict[str, float]:
    """ms per MB to decrypt each pattern (medians of `rounds`), and their ratio."""
    with tempfile.TemporaryDirectory(prefix="onceflow-tls-records-") as directory:
        pki = make_pki(Path(directory))
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(pki.keystore)
        timings: dict[str, list[float]] = {pattern: [] for pattern in PATTERNS}
        for _ in range(rounds):
            for pattern in PATTERNS:
                timings[pattern].append(_decrypt_ms_per_mb(pki, server_context, pattern))
    out = {
        f"security_tls_decrypt_{pattern}_ms_per_MB": statistics.median(timings[pattern])
        for pattern in PATTERNS
    }
    out["security_tls_decrypt_librdkafka_produce_ratio_to_full_records"] = (
        out["security_tls_decrypt_librdkafka_produce_ms_per_MB"]
        / out["security_tls_decrypt_full_records_ms_per_MB"]
    )
    return out


def _decrypt_ms_per_mb(pki: Pki, server_context: ssl.SSLContext, pattern: str) -> float:
    server, incoming, client, sent = _connected(pki, server_context)
    plaintext = 0
    for _ in range(REQUESTS):
        if pattern == "full_records":
            client.write(b"x" * (COPIED_BYTES + SPLIT_RECORDS * (HEADER_BYTES + VALUE_BYTES)))
        else:
            client.write(b"x" * COPIED_BYTES)
            for _ in range(SPLIT_RECORDS):
                client.write(b"h" * HEADER_BYTES)
                client.write(b"v" * VALUE_BYTES)
        plaintext += COPIED_BYTES + SPLIT_RECORDS * (HEADER_BYTES + VALUE_BYTES)
    stream = memoryview(sent.read())
    out = memoryview(bytearray(1 << 20))
    received = 0
    start = time.perf_counter()
    for at in range(0, len(stream), SOCKET_READ):
        incoming.write(stream[at : at + SOCKET_READ])
        while True:
            try:
                count = server.read(len(out), out)  # into `out`: the count read
            except ssl.SSLWantReadError:
                break
            received += count if isinstance(count, int) else len(count)
    seconds = time.perf_counter() - start
    if received != plaintext:
        raise RuntimeError(f"decrypted {received} bytes of {plaintext}")
    return seconds * 1000 / (plaintext / 1e6)


def _connected(
    pki: Pki, server_context: ssl.SSLContext
) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.SSLObject, ssl.MemoryBIO]:
    """A server and a client SSLObject over memory BIOs, handshake done (TLS 1.3)."""
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.load_verify_locations(pki.ca)
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    client = client_context.wrap_bio(client_in, client_out, server_hostname="localhost")
    for _ in range(8):
        for side in (client, server):
            with contextlib.suppress(ssl.SSLWantReadError):  # the peer's turn
                side.do_handshake()
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    client.write(b"ready")  # both handshakes done once the server reads this
    server_in.write(client_out.read())
    if server.read(5) != b"ready":
        raise RuntimeError("the TLS handshake did not finish")
    return server, server_in, client, client_out
