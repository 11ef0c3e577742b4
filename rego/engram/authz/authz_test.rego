package engram.authz_test

import data.engram.authz

config := {"tenants": {"acme": {
	"memory_enabled": true,
	"workspaces": {
		"support": {
			"memory_enabled": true,
			"response_ceiling_bytes": 1048576,
			"roles": {
				"steward": ["engram_memory_get", "engram_memory_search", "engram_memory_forget"],
				"reader": ["engram_memory_get", "engram_memory_search"],
			},
			"principals": {
				"user:alice": [{"roles": ["steward"]}],
				"user:bob": [{"roles": ["reader"]}],
				"user:dave": [{"roles": ["reader"]}],
			},
			"redaction": [
				{
					"name": "support-readers",
					"purposes": ["purpose:support-case"],
					"roles": ["reader"],
					"allowed_fields": ["/valid_time", "/components", "/valid_time"],
					"max_packet_bytes": 32768,
				},
				{
					"name": "stewards",
					"principals": ["user:alice"],
					"allowed_fields": [""],
					"allow_derivation_lineage": true,
				},
				{
					"name": "customer-records",
					"classifiers": ["customer", "iban"],
					"purposes": ["purpose:customer-care"],
					"allowed_fields": ["/record_digest"],
				},
				{"name": "everyone-else", "allowed_fields": ["/purpose_ref"]},
			],
		},
		"plain": {
			"memory_enabled": true,
			"roles": {"reader": ["engram_memory_get"]},
			"principals": {"user:bob": [{"roles": ["reader"]}]},
		},
	},
}}}

unset := {
	"mode": "field-allowlist",
	"allowed_fields": [],
	"allow_derivation_lineage": false,
	"max_packet_bytes": 65536,
}

request := {
	"tenant": "acme",
	"workspace": "support",
	"principal": "user:bob",
	"agent_id": "agent:1",
	"purpose_ref": "purpose:support-case",
	"host_id": "host:1",
	"tool": "engram_memory_get",
}

test_a_granted_tool_is_allowed_with_the_first_matching_redaction if {
	authz.decision == {
		"allow": true,
		"redaction": {
			"mode": "field-allowlist",
			"allowed_fields": ["/components", "/valid_time"],
			"allow_derivation_lineage": false,
			"max_packet_bytes": 32768,
		},
		"response_ceiling_bytes": 1048576,
		"reasons": ["redaction_rule:support-readers", "tool_granted"],
	} with input as request with data.engram.config as config
}

test_a_rule_naming_the_principal_applies_to_any_purpose if {
	d := authz.decision with input as object.union(request, {"principal": "user:alice", "purpose_ref": "purpose:x"})
		with data.engram.config as config
	d.allow
	d.redaction.allowed_fields == [""]
	d.redaction.allow_derivation_lineage
	d.redaction.max_packet_bytes == 65536
	d.reasons == ["redaction_rule:stewards", "tool_granted"]
}

test_a_rule_naming_nobody_catches_everyone_else if {
	d := authz.decision with input as object.union(request, {"purpose_ref": "purpose:other"})
		with data.engram.config as config
	d.reasons == ["redaction_rule:everyone-else", "tool_granted"]
}

test_without_a_redaction_rule_only_record_id_is_disclosed if {
	d := authz.decision with input as object.union(request, {"workspace": "plain"})
		with data.engram.config as config
	d.allow
	d.redaction == unset
	d.response_ceiling_bytes == 2097152
	d.reasons == ["redaction_unset", "tool_granted"]
}

test_an_ungranted_tool_is_denied if {
	d := authz.decision with input as object.union(request, {"tool": "engram_memory_forget"})
		with data.engram.config as config
	d == {
		"allow": false,
		"redaction": unset,
		"response_ceiling_bytes": 1048576,
		"reasons": ["tool_not_granted"],
	}
}

test_an_unknown_tenant_is_denied if {
	d := authz.decision with input as object.union(request, {"tenant": "globex"})
		with data.engram.config as config
	not d.allow
	d.reasons == ["tenant_not_configured"]
	d.response_ceiling_bytes == 2097152
}

test_a_request_without_a_tool_is_denied if {
	d := authz.decision with input as object.remove(request, ["tool"])
		with data.engram.config as config
	d.allow == false
	d.reasons == ["tool_not_granted"]
}

test_the_default_decision_denies_when_no_rule_decides if {
	d := authz.decision with input as request with data.engram.config as config
		with data.engram.authz.deny as set()
		with data.engram.authz.tool_granted as false
	d == {
		"allow": false,
		"redaction": unset,
		"response_ceiling_bytes": 2097152,
		"reasons": ["default_deny"],
	}
}

care := object.union(request, {"purpose_ref": "purpose:customer-care"})

test_a_rule_naming_classifiers_applies_when_one_of_them_matched_in_any_kind if {
	d := authz.decision with input as object.union(care, {"classifiers": {"evidence": ["email", "iban"]}})
		with data.engram.config as config
	d.allow
	d.redaction.allowed_fields == ["/record_digest"]
	d.reasons == ["redaction_rule:customer-records", "tool_granted"]
}

test_a_rule_naming_classifiers_is_skipped_when_none_of_them_matched if {
	d := authz.decision with input as object.union(care, {"classifiers": {"primary": ["email"]}})
		with data.engram.config as config
	d.reasons == ["redaction_rule:everyone-else", "tool_granted"]
}

test_a_rule_naming_classifiers_is_skipped_when_nothing_matched_or_nothing_was_classified if {
	empty := authz.decision with input as object.union(care, {"classifiers": {}})
		with data.engram.config as config
	empty.reasons == ["redaction_rule:everyone-else", "tool_granted"]
	absent := authz.decision with input as care with data.engram.config as config
	absent.reasons == ["redaction_rule:everyone-else", "tool_granted"]
}

test_an_earlier_rule_still_wins_over_a_matching_classifier_rule if {
	d := authz.decision with input as object.union(care, {"principal": "user:alice", "classifiers": {"primary": ["customer"]}})
		with data.engram.config as config
	d.reasons == ["redaction_rule:stewards", "tool_granted"]
}
