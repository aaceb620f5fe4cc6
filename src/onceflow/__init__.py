"""Onceflow: exactly-once streaming for Python."""

__version__ = "0.1.0"
