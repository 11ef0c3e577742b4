package engram.common_test

import data.engram.common

config := {"tenants": {
	"acme": {
		"memory_enabled": true,
		"workspaces": {
			"support": {
				"memory_enabled": true,
				"roles": {
					"steward": ["engram_memory_get", "engram_memory_forget", "not_a_tool"],
					"reader": ["engram_memory_search"],
				},
				"principals": {"user:alice": [
					{"roles": ["steward"]},
					{"roles": ["reader"], "purposes": ["purpose:support-case"]},
				]},
			},
			"archive": {"memory_enabled": false},
		},
	},
	"dormant": {"memory_enabled": false, "workspaces": {}},
}}

subject := {
	"tenant": "acme",
	"workspace": "support",
	"principal": "user:alice",
	"purpose_ref": "purpose:support-case",
}

test_memory_is_enabled_when_tenant_and_workspace_opt_in if {
	common.memory_enabled with input as subject with data.engram.config as config
	count(common.disabled) == 0 with input as subject with data.engram.config as config
}

test_an_unknown_tenant_is_not_configured if {
	common.disabled == {"tenant_not_configured"} with input as object.union(subject, {"tenant": "other"})
		with data.engram.config as config
}

test_a_disabled_tenant_is_named if {
	reasons := common.disabled with input as object.union(subject, {"tenant": "dormant"})
		with data.engram.config as config
	reasons == {"tenant_memory_disabled", "workspace_not_configured"}
}

test_a_disabled_workspace_is_named if {
	reasons := common.disabled with input as object.union(subject, {"workspace": "archive"})
		with data.engram.config as config
	reasons == {"workspace_memory_disabled"}
	not common.memory_enabled with input as object.union(subject, {"workspace": "archive"})
		with data.engram.config as config
}

test_roles_follow_the_declared_purpose if {
	common.roles == {"steward", "reader"} with input as subject with data.engram.config as config
	common.roles == {"steward"} with input as object.union(subject, {"purpose_ref": "purpose:other"})
		with data.engram.config as config
}

test_granted_tools_ignore_unknown_tool_names if {
	tools := common.granted_tools with input as subject with data.engram.config as config
	tools == {"engram_memory_get", "engram_memory_forget", "engram_memory_search"}
}

test_a_selector_naming_nobody_selects_everyone if {
	common.selects({}) with input as subject with data.engram.config as config
}

test_a_selector_matches_a_named_principal if {
	common.selects({"principals": ["user:alice"]}) with input as subject with data.engram.config as config
	not common.selects({"principals": ["user:bob"]}) with input as subject with data.engram.config as config
}

test_a_selector_matches_a_held_role if {
	common.named({"roles": ["reader"]}) with input as subject with data.engram.config as config
	not common.named({"roles": ["auditor"]}) with input as subject with data.engram.config as config
	not common.named({}) with input as subject with data.engram.config as config
}
