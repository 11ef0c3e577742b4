"""The side map from compiled policy data paths to the YAML entries they came from."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engram_memory.contract.exceptions import PolicyDataError
from engram_memory.policy.authoring.data_compiler import compile_policies
from engram_memory.policy.authoring.source_map import SourceLocation, SourceMap, build_source_map
from tests.policy.conftest import POLICIES_DIR, TEST_POLICIES_DIR

TENANT = """\
schema_version: 1
tenant: bank
memory_enabled: true
retention:
  ceiling: 30d
workspaces:
  advice:
    memory_enabled: true
    roles:
      reader: [engram_memory_get]
      writer: [engram_memory_capture]
    grants:
      - principal: "user:ann"
        roles: [reader]
      - principal: "user:bo"
        roles: [reader]
      - principal: "user:ann"
        roles: [writer]
        purposes: ["purpose:kyc"]
    rate_limits:
      - name: zeta
        calls: 1
        per: 1s
      - name: alpha
        calls: 2
        per: 1s
"""
WS = ("tenants", "bank", "workspaces", "advice")


@pytest.fixture
def source_map(tmp_path: Path) -> SourceMap:
    (tmp_path / "bank.yaml").write_text(TENANT)
    return build_source_map(tmp_path)


def _at(source_map: SourceMap, *path: str | int) -> SourceLocation:
    found = source_map.get((*WS, *path))
    assert found is not None, path
    return found


def test_each_grant_of_a_principal_maps_to_its_own_line(source_map: SourceMap) -> None:
    first, second = (
        source_map.get((*WS, "principals", "user:ann", 0)),
        source_map.get((*WS, "principals", "user:ann", 1)),
    )
    assert (first.line, second.line) == (13, 17)
    assert second.path == "workspaces.advice.grants[2]"


def test_an_inherited_tenant_retention_maps_to_the_tenant_block(source_map: SourceMap) -> None:
    ceiling = _at(source_map, "retention", "ceiling_ms")
    assert (ceiling.line, ceiling.path, ceiling.present) == (5, "retention.ceiling", True)


def test_rate_limits_map_in_the_compiled_order_sorted_by_name(source_map: SourceMap) -> None:
    assert _at(source_map, "rate_limits", 0).path == "workspaces.advice.rate_limits[1]"


def test_an_unset_key_is_marked_as_a_default(source_map: SourceMap) -> None:
    assert _at(source_map, "response_ceiling_bytes").present is False


def test_invalid_policy_data_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bank.yaml").write_text("schema_version: 1\ntenant: bank\nflavour: x\n")
    with pytest.raises(PolicyDataError):
        build_source_map(tmp_path)


def _entries(compiled: dict[str, Any]) -> Iterator[tuple[str | int, ...]]:
    """The compiled paths explain points at, for every workspace of `compiled`."""
    for tenant, tenant_data in compiled["engram"]["config"]["tenants"].items():
        for name, ws in tenant_data["workspaces"].items():
            base = ("tenants", tenant, "workspaces", name)
            yield (*base, "memory_enabled")
            yield from ((*base, "roles", role) for role in ws["roles"])
            for kind in ("principals", "groups"):
                for who, grants in ws.get(kind, {}).items():
                    yield from ((*base, kind, who, i) for i in range(len(grants)))
            yield from ((*base, "redaction", i) for i in range(len(ws["redaction"])))
            yield from ((*base, "rate_limits", i) for i in range(len(ws["rate_limits"])))
            for tool, selectors in ws["confirmation"]["require"].items():
                yield from (
                    (*base, "confirmation", "require", tool, i) for i in range(len(selectors))
                )
            families = ws["reconciliation"]["consented_families"]
            yield from ((*base, "reconciliation", "consented_families", f) for f in families)
            operators = ws.get("maintenance", {}).get("operators", {})
            yield from ((*base, "maintenance", "operators", op) for op in operators)
            yield from ((*base, "retention", key) for key in ws["retention"])


@pytest.mark.parametrize("policies", [POLICIES_DIR, TEST_POLICIES_DIR], ids=["shipped", "assets"])
def test_every_compiled_entry_explain_names_has_a_written_source_line(policies: Path) -> None:
    source_map = build_source_map(policies)
    missing = [
        path
        for path in _entries(compile_policies(policies))
        if (found := source_map.get(path)) is None or not found.present
    ]
    assert missing == []
