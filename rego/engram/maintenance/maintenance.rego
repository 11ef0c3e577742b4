# METADATA
# title: Engram host maintenance authority
# description: |
#   Host-only maintenance (adjudication, dispute, supersession, rewind, expiry, trust
#   invalidation, history and candidate inspection, key rotation, backup) is never an agent
#   capability (SPEC §1.6). An operator may act on a workspace only with the authority the
#   workspace's policy data grants it: `read` for inspection, `maintain` for changes.
#   Operators are humans (`human:<subject>`).
# scope: package
package engram.maintenance

import data.engram.common

authorities := {"read", "maintain"}

# METADATA
# title: Maintenance decision
# description: '{"allow": bool, "reasons": [sorted rule names]}. Fail-closed.'
# entrypoint: true
# scope: document
default decision := {"allow": false, "reasons": ["default_deny"]}

decision := {"allow": true, "reasons": [reason]} if {
	authority_held
	reason := concat("", ["operator_holds_", input.authority])
}

decision := {"allow": false, "reasons": ["authority_not_held"]} if {
	common.workspace
	input.authority in authorities
	startswith(input.operator, "human:")
	not authority_held
}

decision := {"allow": false, "reasons": ["operator_not_human"]} if {
	common.workspace
	is_string(input.operator)
	not startswith(input.operator, "human:")
}

authority_held if {
	startswith(input.operator, "human:")
	input.authority in authorities
	input.authority in common.workspace.maintenance.operators[input.operator]
}
