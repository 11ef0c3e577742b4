"""Fixtures of the tool-level tests."""

from tests.tools.semantic_support import researcher, semantic_services

__all__ = ["researcher", "semantic_services"]
