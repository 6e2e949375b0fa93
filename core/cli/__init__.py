"""The `kinject` command line (typer + rich)."""
