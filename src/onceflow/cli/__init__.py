"""The `onceflow` command line; `main.py` is the entry point, one module per command."""
