"""Fixtures shared by every test package (the in-process service lives in tests/harness.py)."""

from tests.harness import alice, engine, services

__all__ = ["alice", "engine", "services"]
