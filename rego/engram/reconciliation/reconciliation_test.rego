package engram.reconciliation_test

import data.engram.reconciliation

config := {"tenants": {"acme": {
	"memory_enabled": true,
	"workspaces": {"support": {
		"memory_enabled": true,
		"reconciliation": {"consented_families": {"family:case-notes": true, "family:tickets": true}},
	}},
}}}

request := {
	"tenant": "acme",
	"workspace": "support",
	"principal": "user:bob",
	"agent_id": "agent:1",
	"purpose_ref": "purpose:support-case",
	"host_id": "host:1",
	"family_refs": [],
}

test_an_empty_family_list_needs_no_consent if {
	reconciliation.decision == {"allow": true, "reasons": ["no_families"]}
		with input as request with data.engram.config as config
}

test_consented_families_are_allowed if {
	d := reconciliation.decision with input as object.union(request, {"family_refs": ["family:case-notes", "family:tickets"]})
		with data.engram.config as config
	d == {"allow": true, "reasons": ["all_families_consented"]}
}

test_one_unconsented_family_refuses_the_list if {
	d := reconciliation.decision with input as object.union(request, {"family_refs": ["family:case-notes", "family:hr"]})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["family_not_consented"]}
}

test_a_family_list_that_is_not_an_array_is_refused if {
	d := reconciliation.decision with input as object.union(request, {"family_refs": "family:case-notes"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["default_deny"]}
}

test_an_unknown_workspace_is_refused if {
	d := reconciliation.decision with input as object.union(request, {"workspace": "other"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["default_deny"]}
}

test_a_missing_family_list_is_refused if {
	d := reconciliation.decision with input as object.remove(request, ["family_refs"])
		with data.engram.config as config
	d == {"allow": false, "reasons": ["default_deny"]}
}
