"""Security: who a connection is (TLS and SASL) and what it may do (ACLs).

Pure and sans-IO, below the protocol layer: the broker's server feeds it handshakes and
tokens, the handlers ask its authorizer, and clients (the CLI, the brokers' own links)
use its client side. Kafka's security model is the reference throughout: its config keys,
its principals (`User:alice`), its resource types, operations and error codes.
"""
