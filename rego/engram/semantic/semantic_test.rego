package engram.semantic_test

import data.engram.semantic

config := {"tenants": {
	"acme": {
		"memory_enabled": true,
		"semantic_search": true,
		"workspaces": {
			"support": {
				"memory_enabled": true,
				"semantic_search": {"purposes": {"purpose:support-case": true}},
			},
			"legal": {"memory_enabled": true, "semantic_search": {"purposes": {}}},
			"off": {"memory_enabled": false},
		},
	},
	"globex": {
		"memory_enabled": true,
		"semantic_search": false,
		"workspaces": {"support": {
			"memory_enabled": true,
			"semantic_search": {"purposes": {"purpose:support-case": true}},
		}},
	},
}}

request := {
	"tenant": "acme",
	"workspace": "support",
	"principal": "user:bob",
	"agent_id": "agent:1",
	"purpose_ref": "purpose:support-case",
	"host_id": "host:1",
}

test_a_listed_purpose_of_an_opted_in_tenant_is_permitted if {
	semantic.decision == {"allow": true, "reasons": ["semantic_purpose_permitted"]}
		with input as request with data.engram.config as config
}

test_another_purpose_is_refused if {
	d := semantic.decision with input as object.union(request, {"purpose_ref": "purpose:hr"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["purpose_not_permitted"]}
}

test_a_workspace_listing_no_purpose_permits_none if {
	d := semantic.decision with input as object.union(request, {"workspace": "legal"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["purpose_not_permitted"]}
}

test_a_tenant_that_did_not_opt_in_is_refused_whatever_its_workspaces_say if {
	d := semantic.decision with input as object.union(request, {"tenant": "globex"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["tenant_semantic_not_enabled"]}
}

test_disabled_memory_is_refused_with_its_reason if {
	d := semantic.decision with input as object.union(request, {"workspace": "off"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["workspace_memory_disabled"]}
}

test_an_unknown_tenant_is_refused if {
	d := semantic.decision with input as object.union(request, {"tenant": "initech"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["tenant_not_configured"]}
}

test_no_policy_data_at_all_is_refused if {
	d := semantic.decision with input as request with data.engram.config as {}
	d == {"allow": false, "reasons": ["tenant_not_configured"]}
}

test_the_default_decision_refuses_when_no_rule_decides if {
	d := semantic.decision with input as request with data.engram.config as config
		with data.engram.semantic.deny as {"forced"}
		with data.engram.common.memory_enabled as false
	d == {"allow": false, "reasons": ["forced"]}
	e := semantic.decision with input as object.union(request, {"workspace": "off"})
		with data.engram.config as config
		with data.engram.semantic.deny as set()
	e == {"allow": false, "reasons": ["default_deny"]}
}
