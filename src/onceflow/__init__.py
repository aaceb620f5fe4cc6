"""Onceflow: exactly-once streaming for Python."""

import sys

__version__ = "0.1.0"


def _import_kio_without_hypothesis() -> None:
    """Import kio with hypothesis hidden. kio's types register property-test strategies
    whenever hypothesis is installed, and importing it took 0.2 s of the 0.45 s a broker,
    a CLI command or a Spark worker spent importing Onceflow. Onceflow never uses those
    strategies; a process that imported hypothesis first (a test run) keeps them."""
    if "hypothesis" in sys.modules or "kio" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # `import` raises ImportError
    try:
        import kio.static.primitive  # noqa: F401  (its types import hypothesis)
    finally:
        del sys.modules["hypothesis"]


_import_kio_without_hypothesis()
