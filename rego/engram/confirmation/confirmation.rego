# METADATA
# title: Engram confirmation requirement and four-eyes approval
# description: |
#   Whether a call needs a host-issued human confirmation, and its TTL (SPEC §7).
#   withdraw and forget always need one; capture and request_admission need one when the
#   workspace selects the tool (for everyone, or only for named principals or roles);
#   search and get never do. The TTL comes from policy data and never exceeds 300 s.
#   Once the host's confirmation verifies, the service asks again with input.approval
#   ({"approver": "human:<subject>", "approver_groups": [...] when the host asserts
#   them}); input.principal is the requester. The workspace's approval rules (four-eyes)
#   then decide whether that human may approve this principal's call.
# scope: package
package engram.confirmation

import data.engram.common

# METADATA
# title: Confirmation decision
# description: |
#   Without input.approval: {"required": bool, "ttl_seconds": 1..300, "reasons": [...]}.
#   With input.approval, also "approved": bool and "refused_by": [sorted rule names].
#   Fail-closed: an unknown tool or workspace requires a confirmation, no approval is
#   given in a workspace that is not configured, and approval facts that are not an
#   object get the default, which carries no approval at all.
# entrypoint: true
# scope: document
default decision := {"required": true, "ttl_seconds": 300, "reasons": ["default_require"]}

decision := requirement if not input.approval

decision := object.union(requirement, {"approved": approved, "refused_by": sorted_refusals}) if {
	is_object(input.approval)
}

default requirement := {"required": true, "ttl_seconds": 300, "reasons": ["default_require"]}

requirement := {"required": true, "ttl_seconds": ttl, "reasons": ["always_required"]} if {
	input.tool in common.always_confirmed_tools
}

requirement := {"required": true, "ttl_seconds": ttl, "reasons": ["selected_by_policy"]} if {
	input.tool in common.selectable_tools
	selected
}

requirement := {"required": false, "ttl_seconds": ttl, "reasons": ["not_selected"]} if {
	input.tool in common.selectable_tools
	common.workspace
	not selected
}

requirement := {"required": false, "ttl_seconds": ttl, "reasons": ["read_only_tool"]} if {
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

# METADATA
# title: Four-eyes approval
# description: |
#   Approved only in a configured workspace and only when no approval rule for the tool
#   refuses the approver. refused_by names every rule that refused, so the audit can say
#   which one did.
default approved := false

approved if {
	common.workspace
	count(refused_by) == 0
}

sorted_refusals := sort([name | some name in refused_by])

# The approval rules of the workspace that apply to the tool being confirmed.
applicable contains rule if {
	some rule in common.workspace.confirmation.approval
	input.tool in rule.tools
}

# METADATA
# title: Rules that refuse the approver
# description: |
#   A rule with not_requester refuses an approver who is the requesting principal (the
#   same subject under any prefix, compared case-insensitively: human:alice approving for
#   user:alice is self-approval). A rule with groups refuses an approver the host does not
#   assert to be in one of them (no assertion: in none).
refused_by contains rule.name if {
	some rule in applicable
	rule.not_requester == true
	same_person(input.approval.approver, input.principal)
}

refused_by contains rule.name if {
	some rule in applicable
	count(rule.groups) > 0
	not in_some_group(rule.groups)
}

same_person(approver, principal) if lower(approver) == lower(principal)

same_person(approver, principal) if lower(subject(approver)) == lower(subject(principal))

subject(ref) := concat(":", array.slice(parts, 1, count(parts))) if {
	parts := split(ref, ":")
	count(parts) > 1
}

in_some_group(groups) if {
	some group in groups
	group in input.approval.approver_groups
}
