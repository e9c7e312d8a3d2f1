"""The decode loop, the runner and the CLI."""
