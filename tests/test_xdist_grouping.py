"""The suite's parallel layout holds: `--dist loadgroup` really keeps a group on one worker.

xdist puts a test on its group's worker by suffixing the node id with `@group`. pytest 9 moved
node ids to `Node._id` and xdist 3.8 still writes `Node._nodeid`, so under pytest 9 every
`xdist_group` mark was silently ignored and the "timing" tests ran beside each other (that is
why pyproject pins pytest below 9). This test is itself in the group and fails if the suffix is
missing while the suite runs distributed by group.
"""

import pytest

pytestmark = pytest.mark.xdist_group("timing")


def test_a_grouped_test_carries_its_group_in_its_node_id(request: pytest.FixtureRequest) -> None:
    if not request.config.getoption("loadgroup", default=False):
        pytest.skip("runs only under pytest-xdist with --dist loadgroup (as ./scripts/test does)")
    assert request.node.nodeid.endswith("@timing")


@pytest.fixture(scope="module")
def built_once() -> str:
    return "shared"


def test_a_test_sharing_a_module_fixture_is_grouped_by_its_module(
    request: pytest.FixtureRequest, built_once: str
) -> None:
    # The module's own "timing" mark wins over the module grouping (a group is kept, not
    # replaced), so what is checked here is the rule, through the conftest's own predicate.
    from tests.conftest import shares_a_fixture

    assert built_once == "shared"
    assert shares_a_fixture(request.node)
