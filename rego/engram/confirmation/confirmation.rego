# METADATA
# title: Engram confirmation requirement
# description: |
#   Whether a call needs a host-issued human confirmation, and its TTL (SPEC §7).
#   withdraw and forget always need one; capture and request_admission need one when the
#   workspace selects the tool (for everyone, or only for named principals or roles);
#   search and get never do. The TTL comes from policy data and never exceeds 300 s.
# scope: package
package engram.confirmation

import data.engram.common

# METADATA
# title: Confirmation decision
# description: |
#   {"required": bool, "ttl_seconds": 1..300, "reasons": [sorted rule names]}.
#   Fail-closed: an unknown tool or workspace requires a confirmation.
# entrypoint: true
# scope: document
default decision := {"required": true, "ttl_seconds": 300, "reasons": ["default_require"]}

decision := {"required": true, "ttl_seconds": ttl, "reasons": ["always_required"]} if {
	input.tool in common.always_confirmed_tools
}

decision := {"required": true, "ttl_seconds": ttl, "reasons": ["selected_by_policy"]} if {
	input.tool in common.selectable_tools
	selected
}

decision := {"required": false, "ttl_seconds": ttl, "reasons": ["not_selected"]} if {
	input.tool in common.selectable_tools
	common.workspace
	not selected
}

decision := {"required": false, "ttl_seconds": ttl, "reasons": ["read_only_tool"]} if {
	input.tool in common.read_only_tools
	common.workspace
}

selected if {
	some selector in common.workspace.confirmation.require[input.tool]
	common.selects(selector)
}

# Policy may shorten the TTL, never extend it past 300 s.
default ttl := 300

ttl := min([configured, 300]) if {
	configured := common.workspace.confirmation.ttl_seconds
	is_number(configured)
	configured >= 1
}
