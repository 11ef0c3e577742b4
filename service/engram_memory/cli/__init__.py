"""`engram-memory`: one entry point (`main.main`), one module per command group.

Each command's module is imported only when that command runs (see `main.COMMANDS`), so
`--help` and a gateway launched by a desktop client start at once.
"""
