"""Utilities for the integration and chaos tests: a broker subprocess and client helpers."""
