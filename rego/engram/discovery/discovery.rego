# METADATA
# title: Engram tool discovery
# description: |
#   Which of the six tools `tools/list` shows to the caller. Memory is off unless the
#   host configuration, the tenant and the workspace all enable it; then the caller sees
#   exactly the tools its roles grant for the declared purpose (deny-as-missing), the
#   never-store shapes the tenant and workspace add to the built-in ones (SPEC §11), and
#   the workspace's rate-limit rules that select the caller (SPEC §12): every call is
#   decided here before its arguments are validated, so the limits apply before the schema.
# scope: package
package engram.discovery

import data.engram.common

# METADATA
# title: Discovery decision
# description: |
#   {"visible_tools": [sorted tool names], "never_store_patterns": [sorted regular
#   expressions], "rate_limits": [{"name", "calls", "per_ms", "tools": [tool names, none
#   meaning every tool]}], "reasons": [sorted rule names]}, and "classifiers" (the
#   scope's content classifier definitions, which the service runs in-process) when the
#   scope defines any.
#   Fail-closed: nothing is visible unless a rule below grants it.
# entrypoint: true
# scope: document
default decision := {
	"visible_tools": [],
	"never_store_patterns": [],
	"rate_limits": [],
	"reasons": ["default_deny"],
}

decision := {
	"visible_tools": [],
	"never_store_patterns": [],
	"rate_limits": [],
	"reasons": sort(off),
} if count(off) > 0

decision := object.union(
	{
		"visible_tools": sort(common.granted_tools),
		"never_store_patterns": object.get(common.workspace, "never_store_patterns", []),
		"rate_limits": rate_limits,
		"reasons": sort(on),
	},
	classifiers,
) if {
	input.host_memory_enabled == true
	common.memory_enabled
	count(off) == 0
}

off contains "host_memory_disabled" if not input.host_memory_enabled == true

off contains reason if some reason in common.disabled

on contains "memory_enabled"

on contains "tools_granted" if count(common.granted_tools) > 0

on contains "no_tools_granted" if count(common.granted_tools) == 0

# A group grant whose role lists at least one tool is named: grant:<group>:<role>.
on contains concat(":", ["grant", group, role]) if {
	some [group, role] in common.group_roles
	some tool in common.workspace.roles[role]
	tool in common.known_tools
}

# Issue 22: content classifiers run in the service, on the plaintext; policy gets back
# only the names that matched. Absent when the scope defines none.
classifiers := {"classifiers": common.workspace.classifiers} if {
	count(common.workspace.classifiers) > 0
} else := {}

# SPEC §12: no rate limit unless policy data sets one. Policy data lists the rules by name;
# the service counts a call against the rules whose `tools` name its tool (or are empty).
rate_limits := [limit |
	some rule in object.get(common.workspace, "rate_limits", [])
	common.selects(rule)
	limit := {
		"name": rule.name,
		"calls": rule.calls,
		"per_ms": rule.per_ms,
		"tools": object.get(rule, "tools", []),
	}
]
