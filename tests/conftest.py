"""Fixtures shared by every test package (the in-process service lives in tests/harness.py).

It also keeps a module's tests on one xdist worker when they share a module- or class-scoped
fixture (most of them a running server, an OPA process or a built store): under
`--dist loadgroup` ungrouped tests are spread one by one, so each worker that runs one of them
would build the shared fixture again. A module that already names its group keeps it.
"""

import pytest

from tests.harness import alice, engine, services

__all__ = ["alice", "engine", "services"]

_SHARED_SCOPES = frozenset({"module", "class"})


def shares_a_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture built once per module or class."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        definition.scope in _SHARED_SCOPES
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )


@pytest.hookimpl(tryfirst=True)  # before xdist turns the marks into node-id suffixes
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None and shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module else ""))
