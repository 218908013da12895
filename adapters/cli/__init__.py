"""The ``ctxledger`` command line: one module per command group (typer + rich)."""
