package engram.confirmation_test

import data.engram.confirmation

config := {"tenants": {"acme": {
	"memory_enabled": true,
	"workspaces": {
		"support": {
			"memory_enabled": true,
			"roles": {"reader": ["engram_memory_capture"]},
			"principals": {"user:bob": [{"roles": ["reader"]}]},
			"confirmation": {
				"ttl_seconds": 120,
				"require": {
					"engram_memory_capture": [{"roles": ["reader"]}],
					"engram_memory_request_admission": [{}],
				},
			},
		},
		"records": {
			"memory_enabled": true,
			"confirmation": {
				"require": {},
				"approval": [
					{"name": "second-person", "tools": ["engram_memory_forget"], "not_requester": true, "groups": []},
					{
						"name": "records-officers",
						"tools": ["engram_memory_forget"],
						"not_requester": false,
						"groups": ["group:records-officers", "group:dpo"],
					},
					{"name": "withdraw-second-person", "tools": ["engram_memory_withdraw"], "not_requester": true, "groups": []},
				],
			},
		},
		"lenient": {"memory_enabled": true, "confirmation": {"ttl_seconds": 0}},
		"long": {"memory_enabled": true, "confirmation": {"ttl_seconds": 900}},
	},
}}}

request := {
	"tenant": "acme",
	"workspace": "support",
	"principal": "user:bob",
	"agent_id": "agent:1",
	"purpose_ref": "purpose:support-case",
	"host_id": "host:1",
	"tool": "engram_memory_capture",
}

test_withdraw_and_forget_always_need_a_confirmation if {
	every tool in ["engram_memory_withdraw", "engram_memory_forget"] {
		confirmation.decision == {"required": true, "ttl_seconds": 120, "reasons": ["always_required"]}
			with input as object.union(request, {"tool": tool})
			with data.engram.config as config
	}
}

test_a_selected_role_needs_a_confirmation_for_capture if {
	confirmation.decision == {"required": true, "ttl_seconds": 120, "reasons": ["selected_by_policy"]}
		with input as request with data.engram.config as config
}

test_a_selector_naming_nobody_applies_to_everyone if {
	d := confirmation.decision with input as object.union(request, {
		"principal": "user:alice",
		"tool": "engram_memory_request_admission",
	})
		with data.engram.config as config
	d.required
}

test_an_unselected_principal_needs_no_confirmation if {
	confirmation.decision == {"required": false, "ttl_seconds": 120, "reasons": ["not_selected"]}
		with input as object.union(request, {"principal": "user:alice"})
		with data.engram.config as config
}

test_read_only_tools_need_no_confirmation if {
	confirmation.decision == {"required": false, "ttl_seconds": 120, "reasons": ["read_only_tool"]}
		with input as object.union(request, {"tool": "engram_memory_search"})
		with data.engram.config as config
}

test_an_unusable_ttl_falls_back_to_300_seconds if {
	d := confirmation.decision with input as object.union(request, {"workspace": "lenient"})
		with data.engram.config as config
	d == {"required": false, "ttl_seconds": 300, "reasons": ["not_selected"]}
}

test_the_ttl_never_exceeds_300_seconds if {
	d := confirmation.decision with input as object.union(request, {"workspace": "long"})
		with data.engram.config as config
	d.ttl_seconds == 300
}

test_an_unknown_tool_requires_a_confirmation if {
	confirmation.decision == {"required": true, "ttl_seconds": 300, "reasons": ["default_require"]}
		with input as object.union(request, {"tool": "engram_memory_admin"})
		with data.engram.config as config
}

test_an_unknown_workspace_requires_a_confirmation if {
	d := confirmation.decision with input as object.union(request, {"workspace": "other"})
		with data.engram.config as config
	d == {"required": true, "ttl_seconds": 300, "reasons": ["default_require"]}
}

test_a_request_without_a_tool_requires_a_confirmation if {
	d := confirmation.decision with input as object.remove(request, ["tool"])
		with data.engram.config as config
	d.required
}

forget := object.union(request, {"workspace": "records", "principal": "user:alice", "tool": "engram_memory_forget"})

officer := {"approver": "human:carol", "approver_groups": ["group:records-officers"]}

test_without_approval_facts_the_decision_has_no_approval if {
	d := confirmation.decision with input as forget with data.engram.config as config
	not "approved" in object.keys(d)
}

test_an_officer_other_than_the_requester_may_approve if {
	d := confirmation.decision with input as object.union(forget, {"approval": officer})
		with data.engram.config as config
	d == {
		"required": true, "ttl_seconds": 300, "reasons": ["always_required"],
		"approved": true, "refused_by": [],
	}
}

test_the_requester_may_not_approve_their_own_forget if {
	every approver in ["human:alice", "human:ALICE", "user:alice"] {
		d := confirmation.decision with input as object.union(forget, {"approval": object.union(officer, {"approver": approver})})
			with data.engram.config as config
		d.approved == false
		d.refused_by == ["second-person"]
	}
}

test_an_approver_outside_the_group_is_refused if {
	d := confirmation.decision with input as object.union(forget, {"approval": {"approver": "human:carol", "approver_groups": ["group:sales"]}})
		with data.engram.config as config
	d.approved == false
	d.refused_by == ["records-officers"]
}

test_an_approver_whose_groups_the_host_did_not_assert_is_refused if {
	d := confirmation.decision with input as object.union(forget, {"approval": {"approver": "human:alice"}})
		with data.engram.config as config
	d.refused_by == ["records-officers", "second-person"]
}

test_rules_apply_only_to_their_tools if {
	d := confirmation.decision with input as object.union(forget, {
		"tool": "engram_memory_withdraw",
		"approval": {"approver": "human:carol"},
	})
		with data.engram.config as config
	d.approved
}

test_a_prefixless_principal_is_compared_whole if {
	d := confirmation.decision with input as object.union(forget, {"principal": "carol", "approval": {"approver": "carol"}, "tool": "engram_memory_withdraw"})
		with data.engram.config as config
	d.refused_by == ["withdraw-second-person"]
}

test_a_workspace_without_approval_rules_approves_anyone if {
	d := confirmation.decision with input as object.union(request, {"tool": "engram_memory_forget", "approval": {"approver": "human:bob"}})
		with data.engram.config as config
	d.approved
}

test_no_approval_in_an_unknown_workspace if {
	d := confirmation.decision with input as object.union(forget, {"workspace": "other", "approval": officer})
		with data.engram.config as config
	d == {
		"required": true, "ttl_seconds": 300, "reasons": ["always_required"],
		"approved": false, "refused_by": [],
	}
}

test_malformed_approval_facts_get_the_default_without_an_approval if {
	d := confirmation.decision with input as object.union(forget, {"approval": "human:carol"})
		with data.engram.config as config
	d == {"required": true, "ttl_seconds": 300, "reasons": ["default_require"]}
}
