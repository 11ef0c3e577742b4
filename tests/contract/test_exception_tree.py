"""The one exception tree: every class lives in contract/exceptions.py and is mapped to a code.

DESIGN "Conventions": one module holds the hierarchy, its docstring draws the tree, and a
test proves every class is mapped to a contract code (or a CLI exit status).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from enum import Enum

import pytest
from mcp.shared.exceptions import MCPError

import engram_memory
from engram_memory.cli import main as cli_main
from engram_memory.contract import exceptions
from engram_memory.contract.errors import ErrorCode, ProtocolCode
from engram_memory.contract.exception_codes import EXIT_CONFIG, MAPPED_TO
from engram_memory.contract.refusals import RefusalReason
from engram_memory.core.failures import known_failure

HOME = exceptions.__name__


def _subclasses(root: type[BaseException]) -> Iterator[type[BaseException]]:
    for sub in root.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _ours() -> set[type[BaseException]]:
    """Every exception class any module of the package defines (imports them all)."""
    for info in pkgutil.walk_packages(engram_memory.__path__, "engram_memory."):
        if not info.name.endswith("__main__"):  # __main__ runs the CLI when imported
            importlib.import_module(info.name)
    return {
        cls for cls in _subclasses(BaseException) if cls.__module__.startswith("engram_memory.")
    }


def _tree() -> set[type[BaseException]]:
    """The classes of the exceptions module, found by walking down from each of its roots."""
    defined = {
        value
        for value in vars(exceptions).values()
        if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == HOME
    }
    roots = {cls for cls in defined if not any(base in defined for base in cls.__bases__)}
    found = set(roots)
    for root in roots:
        found.update(_subclasses(root))
    assert found == defined
    return found


def test_no_exception_class_is_defined_outside_the_exceptions_module() -> None:
    elsewhere = {
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _ours()
        if cls.__module__ != HOME
        # Warning categories are not failures; the SDK's error type cannot move into
        # contract (which never imports the MCP SDK), so its subclasses stay at the adapter.
        and not issubclass(cls, Warning | MCPError)
    }
    assert elsewhere == set()


def test_every_class_of_the_tree_is_mapped_to_a_code_or_an_exit_status() -> None:
    tree = _tree()
    assert exceptions.EngramError in tree
    assert set(MAPPED_TO) == tree
    for cls, mapped in MAPPED_TO.items():
        if isinstance(mapped, type):
            assert mapped in (ErrorCode, ProtocolCode), cls
        else:
            assert isinstance(mapped, ErrorCode | ProtocolCode | RefusalReason | int), cls


def test_the_docstring_draws_every_class_of_the_tree() -> None:
    drawn = exceptions.__doc__ or ""
    missing = {cls.__name__ for cls in _tree() if f" {cls.__name__} " not in drawn}
    assert missing == set()


def test_the_cli_exit_statuses_agree_with_the_mapping() -> None:
    assert cli_main.EXIT_CONFIG == EXIT_CONFIG
    for cls in (exceptions.ConfigurationError, *_subclasses(exceptions.ConfigurationError)):
        assert MAPPED_TO[cls] == EXIT_CONFIG, cls
    for cls in (exceptions.StoreRefusal, *_subclasses(exceptions.StoreRefusal)):
        assert issubclass(cls, exceptions.StoreRefusal)
        assert MAPPED_TO[cls] == cls.exit_code, cls


@pytest.mark.parametrize("cls", sorted(MAPPED_TO, key=lambda cls: cls.__name__), ids=str)
def test_the_call_path_maps_a_failure_to_the_code_the_tree_names(
    cls: type[BaseException],
) -> None:
    mapped = MAPPED_TO[cls]
    if not isinstance(mapped, ErrorCode) or not issubclass(cls, Exception):
        return
    # No __init__: the call path's mapping looks at the type only.
    error = known_failure(cls.__new__(cls))
    if error is not None:
        assert error.code is mapped


@pytest.mark.parametrize(
    "cls", [exceptions.StoreCorrupt, exceptions.JournalCorrupt, exceptions.SealBroken]
)
def test_corruption_is_never_retriable(cls: type[Exception]) -> None:
    mapped = MAPPED_TO[cls]
    assert isinstance(mapped, ErrorCode)
    assert mapped.retriable is False
    error = known_failure(cls.__new__(cls))
    assert error is not None
    assert error.code is mapped


def test_every_damage_the_tree_names_maps_to_a_code_that_is_not_retriable() -> None:
    damage = ("Corrupt", "Broken", "Damaged", "Tampered", "Invalid")
    for cls, mapped in MAPPED_TO.items():
        if any(word in cls.__name__ for word in damage) and isinstance(mapped, ErrorCode):
            assert mapped.retriable is False, cls


def test_the_refusal_and_code_enums_are_the_contracts_own() -> None:
    # The mapping names only contract vocabulary: nothing a domain package defines.
    for mapped in MAPPED_TO.values():
        kind = mapped if isinstance(mapped, type) else type(mapped)
        if issubclass(kind, Enum):
            assert kind.__module__.startswith("engram_memory.contract."), kind
