# METADATA
# title: Engram tool authorization
# description: |
#   May the caller use this tool, and with which redaction allowlist, packet cap and
#   response ceiling. Allowed iff memory is enabled for the tenant and the workspace and
#   one of the principal's roles (for the declared purpose) grants the tool. Redaction is
#   the first redaction rule of the workspace matching the purpose, the principal or one
#   of its roles, and (for a rule naming classifiers) the content classifiers that matched
#   the record about to be returned; without one only record_id is disclosed. Rate limits ride on the
#   discovery decision instead, so that they apply before the arguments are validated.
# scope: package
package engram.authz

import data.engram.common

# METADATA
# title: Authorization decision
# description: |
#   {"allow": bool, "redaction": {"mode": "field-allowlist", "allowed_fields": [...],
#   "allow_derivation_lineage": bool, "max_packet_bytes": int},
#   "response_ceiling_bytes": int, "reasons": [sorted rule names]}. Fail-closed.
# entrypoint: true
# scope: document
default decision := {
	"allow": false,
	"redaction": {
		"mode": "field-allowlist",
		"allowed_fields": [],
		"allow_derivation_lineage": false,
		"max_packet_bytes": 65536,
	},
	"response_ceiling_bytes": 2097152,
	"reasons": ["default_deny"],
}

decision := {
	"allow": false,
	"redaction": unset_redaction,
	"response_ceiling_bytes": response_ceiling,
	"reasons": sort(deny),
} if count(deny) > 0

decision := {
	"allow": true,
	"redaction": redaction,
	"response_ceiling_bytes": response_ceiling,
	"reasons": sort({"tool_granted", redaction_reason} | group_grants_used),
} if {
	common.memory_enabled
	tool_granted
	count(deny) == 0
}

deny contains reason if some reason in common.disabled

# Negations only ever apply to rules: `not f(ref)` is undefined, not true, when `ref` is.
tool_granted if input.tool in common.granted_tools

# METADATA
# title: Group grants behind the tool
# description: |
#   grant:<group>:<role> for each group grant whose role grants the tool, so a receipt
#   shows when access came from the host's groups claim rather than a grant by name.
group_grants_used contains concat(":", ["grant", group, role]) if {
	some [group, role] in common.group_roles
	input.tool in common.workspace.roles[role]
}

deny contains "tool_not_granted" if {
	common.memory_enabled
	not tool_granted
}

# SPEC §12: with no redaction rule only record_id is disclosed, within 65,536 bytes.
unset_redaction := {
	"mode": "field-allowlist",
	"allowed_fields": [],
	"allow_derivation_lineage": false,
	"max_packet_bytes": 65536,
}

# SPEC §4.1: the response ceiling defaults to 2,097,152 bytes.
default response_ceiling := 2097152

response_ceiling := common.workspace.response_ceiling_bytes

purpose_matches(rule) if not rule.purposes

purpose_matches(rule) if input.purpose_ref in rule.purposes

# A rule naming classifiers applies only to a record one of them matched, in any component
# kind. Search and get ask once per distinct set of names in a page (input.classifiers:
# kind -> sorted names; absent or {} when nothing matched), so such a rule never applies
# to the decision taken before any record is opened.
classifiers_match(rule) if not rule.classifiers

classifiers_match(rule) if {
	some names in object.get(input, "classifiers", {})
	some name in names
	name in rule.classifiers
}

# METADATA
# title: Matching redaction rules
# description: Positions of the workspace redaction rules that match the caller.
matching contains i if {
	some i, rule in common.workspace.redaction
	purpose_matches(rule)
	classifiers_match(rule)
	common.selects(rule)
}

first_rule := common.workspace.redaction[min(matching)]

redaction := {
	"mode": "field-allowlist",
	"allowed_fields": sort({field | some field in first_rule.allowed_fields}),
	"allow_derivation_lineage": object.get(first_rule, "allow_derivation_lineage", false),
	"max_packet_bytes": object.get(first_rule, "max_packet_bytes", 65536),
} if first_rule

default redaction := {
	"mode": "field-allowlist",
	"allowed_fields": [],
	"allow_derivation_lineage": false,
	"max_packet_bytes": 65536,
}

redaction_reason := concat("", ["redaction_rule:", first_rule.name])

default redaction_reason := "redaction_unset"
