package engram.discovery_test

import data.engram.discovery

config := {"tenants": {
	"acme": {
		"memory_enabled": true,
		"workspaces": {"support": {
			"memory_enabled": true,
			"roles": {"reader": ["engram_memory_search", "engram_memory_get"]},
			"principals": {
				"user:bob": [{"roles": ["reader"], "purposes": ["purpose:support-case"]}],
				"user:nobody": [],
			},
			"never_store_patterns": ["\\bEMP-[0-9]{6}\\b"],
		}},
	},
	"dormant": {"memory_enabled": false, "workspaces": {"support": {"memory_enabled": true}}},
}}

request := {
	"tenant": "acme",
	"workspace": "support",
	"principal": "user:bob",
	"agent_id": "agent:1",
	"purpose_ref": "purpose:support-case",
	"host_id": "host:1",
	"host_memory_enabled": true,
}

test_granted_tools_are_visible_when_memory_is_enabled if {
	discovery.decision == {
		"visible_tools": ["engram_memory_get", "engram_memory_search"],
		"never_store_patterns": ["\\bEMP-[0-9]{6}\\b"],
		"rate_limits": [],
		"reasons": ["memory_enabled", "tools_granted"],
	} with input as request with data.engram.config as config
}

test_nothing_is_visible_when_the_host_disables_memory if {
	d := discovery.decision with input as object.union(request, {"host_memory_enabled": false})
		with data.engram.config as config
	d == {"visible_tools": [], "never_store_patterns": [], "rate_limits": [], "reasons": ["host_memory_disabled"]}
}

test_nothing_is_visible_when_the_tenant_disables_memory if {
	d := discovery.decision with input as object.union(request, {"tenant": "dormant"})
		with data.engram.config as config
	d == {"visible_tools": [], "never_store_patterns": [], "rate_limits": [], "reasons": ["tenant_memory_disabled"]}
}

test_nothing_is_visible_for_another_purpose if {
	d := discovery.decision with input as object.union(request, {"purpose_ref": "purpose:other"})
		with data.engram.config as config
	d == {
		"visible_tools": [],
		"never_store_patterns": ["\\bEMP-[0-9]{6}\\b"],
		"rate_limits": [],
		"reasons": ["memory_enabled", "no_tools_granted"],
	}
}

test_nothing_is_visible_to_an_unknown_principal if {
	d := discovery.decision with input as object.union(request, {"principal": "user:mallory"})
		with data.engram.config as config
	d.visible_tools == []
}

test_a_non_object_input_shows_nothing if {
	d := discovery.decision with input as "nonsense" with data.engram.config as config
	d == {"visible_tools": [], "never_store_patterns": [], "rate_limits": [], "reasons": ["host_memory_disabled", "tenant_not_configured"]}
}

test_a_missing_host_flag_shows_nothing if {
	d := discovery.decision with input as object.remove(request, ["host_memory_enabled"])
		with data.engram.config as config
	d == {"visible_tools": [], "never_store_patterns": [], "rate_limits": [], "reasons": ["host_memory_disabled"]}
}

test_the_default_decision_shows_nothing_when_no_rule_decides if {
	d := discovery.decision with input as object.remove(request, ["host_memory_enabled"])
		with data.engram.config as config
		with data.engram.discovery.off as set()
	d == {"visible_tools": [], "never_store_patterns": [], "rate_limits": [], "reasons": ["default_deny"]}
}

test_a_workspace_without_shapes_adds_none if {
	plain := json.remove(config, ["tenants/acme/workspaces/support/never_store_patterns"])
	d := discovery.decision with input as request with data.engram.config as plain
	d.never_store_patterns == []
	d.visible_tools == ["engram_memory_get", "engram_memory_search"]
}

limited := json.patch(config, [{
	"op": "add",
	"path": "/tenants/acme/workspaces/support/rate_limits",
	"value": [
		{"name": "everyone", "calls": 600, "per_ms": 60000},
		{"name": "forgets", "calls": 5, "per_ms": 3600000, "tools": ["engram_memory_forget"]},
		{"name": "readers", "calls": 100, "per_ms": 60000, "roles": ["reader"]},
		{"name": "stewards", "calls": 9, "per_ms": 1000, "roles": ["steward"]},
	],
}])

test_rate_limits_are_the_rules_selecting_the_caller_with_their_tools if {
	d := discovery.decision with input as request with data.engram.config as limited
	d.rate_limits == [
		{"name": "everyone", "calls": 600, "per_ms": 60000, "tools": []},
		{"name": "forgets", "calls": 5, "per_ms": 3600000, "tools": ["engram_memory_forget"]},
		{"name": "readers", "calls": 100, "per_ms": 60000, "tools": []},
	]
}

test_no_rate_limit_applies_while_memory_is_off if {
	d := discovery.decision with input as object.union(request, {"host_memory_enabled": false})
		with data.engram.config as limited
	d.rate_limits == []
}

test_the_scope_classifiers_are_handed_to_the_service if {
	customer := {"name": "customer", "terms": ["customer"], "case_sensitive": false, "whole_words": true}
	classified := json.patch(config, [{
		"op": "add",
		"path": "/tenants/acme/workspaces/support/classifiers",
		"value": [customer],
	}])
	d := discovery.decision with input as request with data.engram.config as classified
	d.classifiers == [customer]
	d.visible_tools == ["engram_memory_get", "engram_memory_search"]
}

test_no_classifiers_key_without_classifiers if {
	d := discovery.decision with input as request with data.engram.config as config
	not "classifiers" in object.keys(d)
}
