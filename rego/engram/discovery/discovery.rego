# METADATA
# title: Engram tool discovery
# description: |
#   Which of the six tools `tools/list` shows to the caller. Memory is off unless the
#   host configuration, the tenant and the workspace all enable it; then the caller sees
#   exactly the tools its roles grant for the declared purpose (deny-as-missing), and the
#   never-store shapes the tenant and workspace add to the built-in ones (SPEC §11).
# scope: package
package engram.discovery

import data.engram.common

# METADATA
# title: Discovery decision
# description: |
#   {"visible_tools": [sorted tool names], "never_store_patterns": [sorted regular
#   expressions], "reasons": [sorted rule names]}.
#   Fail-closed: nothing is visible unless a rule below grants it.
# entrypoint: true
# scope: document
default decision := {"visible_tools": [], "never_store_patterns": [], "reasons": ["default_deny"]}

decision := {"visible_tools": [], "never_store_patterns": [], "reasons": sort(off)} if count(off) > 0

decision := {
	"visible_tools": sort(common.granted_tools),
	"never_store_patterns": object.get(common.workspace, "never_store_patterns", []),
	"reasons": sort(on),
} if {
	input.host_memory_enabled == true
	common.memory_enabled
	count(off) == 0
}

off contains "host_memory_disabled" if not input.host_memory_enabled == true

off contains reason if some reason in common.disabled

on contains "memory_enabled"

on contains "tools_granted" if count(common.granted_tools) > 0

on contains "no_tools_granted" if count(common.granted_tools) == 0
