# METADATA
# title: Engram retention
# description: |
#   Resolves the retention of a capture once (SPEC §11). `retain` needs explicit permission
#   (principals or roles in policy data); a given expires_at_ms must lie within the capture
#   instant plus the workspace ceiling; without one the workspace default TTL (or else the
#   ceiling) sets the expiry; with neither, the record never expires.
# scope: package
package engram.retention

import data.engram.common

# METADATA
# title: Retention decision
# description: |
#   {"allow": bool, "expires_at_ms"?: int, "reasons": [sorted rule names]}. Fail-closed.
# entrypoint: true
# scope: document
default decision := {"allow": false, "reasons": ["default_deny"]}

decision := {"allow": false, "reasons": sort(deny)} if {
	common.workspace
	count(deny) > 0
}

decision := {"allow": true, "expires_at_ms": expires_at_ms, "reasons": sort(allowed)} if {
	acceptable
	expires_at_ms
}

decision := {"allow": true, "reasons": sort(allowed)} if {
	acceptable
	not expires_at_ms
}

acceptable if {
	common.workspace
	capture_ok
	rule_ok
	count(deny) == 0
}

rules := object.get(common.workspace, "retention", {})

capture_ms := input.capture_instant_ms

rule := input.retention.derivative_rule

# `expires_at_ms` is optional; any present value (even `false`) counts as given.
given := object.get(input.retention, "expires_at_ms", null)

has_given if given != null

# Negations only ever apply to rules: `not f(ref)` is undefined, not true, when `ref` is.
capture_ok if is_number(capture_ms)

rule_ok if rule in {"retain", "make-ineligible"}

retain_permitted if common.named(rules.retain)

given_ok if is_number(given)

deny contains "invalid_capture_instant" if not capture_ok

deny contains "invalid_derivative_rule" if not rule_ok

deny contains "retain_not_permitted" if {
	rule == "retain"
	not retain_permitted
}

deny contains "invalid_expires_at" if {
	has_given
	not given_ok
}

deny contains "expires_not_after_capture" if {
	has_given
	given <= capture_ms
}

deny contains "expires_beyond_ceiling" if {
	has_given
	given > capture_ms + rules.ceiling_ms
}

allowed contains "make_ineligible" if rule == "make-ineligible"

allowed contains "retain_permitted" if rule == "retain"

allowed contains "expires_within_ceiling" if {
	has_given
	rules.ceiling_ms
}

allowed contains "expires_without_ceiling" if {
	has_given
	not rules.ceiling_ms
}

allowed contains "default_ttl_applied" if {
	not has_given
	rules.default_ttl_ms
}

allowed contains "ceiling_applied" if {
	not has_given
	not rules.default_ttl_ms
	rules.ceiling_ms
}

allowed contains "no_expiry" if {
	not has_given
	not rules.default_ttl_ms
	not rules.ceiling_ms
}

expires_at_ms := given if has_given

expires_at_ms := capture_ms + rules.default_ttl_ms if not has_given

expires_at_ms := capture_ms + rules.ceiling_ms if {
	not has_given
	not rules.default_ttl_ms
}
