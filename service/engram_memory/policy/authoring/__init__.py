"""Policy authoring: build, sign, lint, explain, diff, effective grants, tenant tests.

Used by the `policy` commands and the tests; the runtime (`policy/`) never imports it.
"""
