package engram.retention_test

import data.engram.retention

config := {"tenants": {"acme": {
	"memory_enabled": true,
	"workspaces": {
		"support": {
			"memory_enabled": true,
			"roles": {"steward": []},
			"principals": {"user:alice": [{"roles": ["steward"]}]},
			"retention": {"ceiling_ms": 1000, "default_ttl_ms": 400, "retain": {"roles": ["steward"]}},
		},
		"capped": {"memory_enabled": true, "retention": {"ceiling_ms": 1000}},
		"open": {"memory_enabled": true},
	},
}}}

request := {
	"tenant": "acme",
	"workspace": "support",
	"principal": "user:bob",
	"agent_id": "agent:1",
	"purpose_ref": "purpose:support-case",
	"host_id": "host:1",
	"capture_instant_ms": 5000,
	"retention": {"derivative_rule": "make-ineligible"},
}

with_retention(workspace, principal, rule) := object.union(request, {
	"workspace": workspace,
	"principal": principal,
	"retention": rule,
})

test_the_default_ttl_sets_the_expiry if {
	retention.decision == {"allow": true, "expires_at_ms": 5400, "reasons": ["default_ttl_applied", "make_ineligible"]}
		with input as request with data.engram.config as config
}

test_the_ceiling_sets_the_expiry_without_a_default_ttl if {
	d := retention.decision with input as object.union(request, {"workspace": "capped"})
		with data.engram.config as config
	d == {"allow": true, "expires_at_ms": 6000, "reasons": ["ceiling_applied", "make_ineligible"]}
}

test_without_ceiling_or_default_there_is_no_expiry if {
	d := retention.decision with input as object.union(request, {"workspace": "open"})
		with data.engram.config as config
	d == {"allow": true, "reasons": ["make_ineligible", "no_expiry"]}
}

test_a_given_expiry_within_the_ceiling_is_echoed if {
	d := retention.decision with input as with_retention("support", "user:bob", {"derivative_rule": "make-ineligible", "expires_at_ms": 6000})
		with data.engram.config as config
	d == {"allow": true, "expires_at_ms": 6000, "reasons": ["expires_within_ceiling", "make_ineligible"]}
}

test_a_given_expiry_without_a_ceiling_is_echoed if {
	d := retention.decision with input as with_retention("open", "user:bob", {"derivative_rule": "make-ineligible", "expires_at_ms": 99999})
		with data.engram.config as config
	d == {"allow": true, "expires_at_ms": 99999, "reasons": ["expires_without_ceiling", "make_ineligible"]}
}

test_a_given_expiry_beyond_the_ceiling_is_refused if {
	d := retention.decision with input as with_retention("support", "user:bob", {"derivative_rule": "make-ineligible", "expires_at_ms": 6001})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["expires_beyond_ceiling"]}
}

test_an_expiry_not_after_the_capture_is_refused if {
	d := retention.decision with input as with_retention("open", "user:bob", {"derivative_rule": "make-ineligible", "expires_at_ms": 5000})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["expires_not_after_capture"]}
}

test_a_non_numeric_expiry_is_refused if {
	d := retention.decision with input as with_retention("open", "user:bob", {"derivative_rule": "make-ineligible", "expires_at_ms": false})
		with data.engram.config as config
	"invalid_expires_at" in d.reasons
	not d.allow
}

test_retain_is_allowed_for_a_permitted_role if {
	d := retention.decision with input as with_retention("support", "user:alice", {"derivative_rule": "retain"})
		with data.engram.config as config
	d == {"allow": true, "expires_at_ms": 5400, "reasons": ["default_ttl_applied", "retain_permitted"]}
}

test_retain_without_permission_is_refused if {
	d := retention.decision with input as with_retention("support", "user:bob", {"derivative_rule": "retain"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["retain_not_permitted"]}
}

test_retain_is_refused_where_nobody_is_permitted if {
	d := retention.decision with input as with_retention("open", "user:alice", {"derivative_rule": "retain"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["retain_not_permitted"]}
}

test_an_unknown_derivative_rule_is_refused if {
	d := retention.decision with input as with_retention("open", "user:bob", {"derivative_rule": "keep-forever"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["invalid_derivative_rule"]}
}

test_a_missing_capture_instant_is_refused if {
	d := retention.decision with input as object.remove(request, ["capture_instant_ms"])
		with data.engram.config as config
	d.reasons == ["invalid_capture_instant"]
}

test_an_unknown_workspace_is_refused if {
	d := retention.decision with input as object.union(request, {"workspace": "other"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["default_deny"]}
}

test_a_missing_retention_is_refused if {
	d := retention.decision with input as object.remove(request, ["retention"])
		with data.engram.config as config
	d == {"allow": false, "reasons": ["invalid_derivative_rule"]}
}
