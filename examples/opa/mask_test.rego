# METADATA
# title: tests of the decision-log masking
package system.log_test

import rego.v1

import data.system.log

test_masks_the_identifiers_of_an_authz_input if {
	decision := {"input": {
		"tenant": "acme", "workspace": "support", "principal": "user:alice",
		"agent_id": "agent-1", "purpose_ref": "purpose:support", "host_id": "host-a",
		"tool": "engram_memory_search",
	}}
	log.mask == {
		"/input/principal", "/input/agent_id", "/input/purpose_ref", "/input/host_id",
	} with input as decision
}

test_masks_groups_families_and_the_operator if {
	decision := {"input": {
		"principal": "user:bob", "groups": ["group:advisors"],
		"family_refs": ["family:x"], "operator": "ops:carol",
	}}
	log.mask == {
		"/input/principal", "/input/groups", "/input/family_refs", "/input/operator",
	} with input as decision
}

test_masks_the_outside_references_of_an_admission_candidate if {
	decision := {"input": {"candidate": {
		"candidate_id": "c1", "record_digest": "sha256:00",
		"evidence_ref": "ticket:42", "source_refs": ["doc:1"],
	}}}
	log.mask == {"/input/candidate/evidence_ref", "/input/candidate/source_refs"} with input as decision
}

test_keeps_an_input_without_identifiers_whole if {
	log.mask == set() with input as {"input": {"tenant": "acme", "tool": "engram_memory_get"}}
}

test_removes_an_input_it_cannot_read if {
	log.mask == {"/input"} with input as {"input": "not an object"}
}

test_removes_the_input_of_a_decision_without_one if {
	log.mask == {"/input"} with input as {"result": true}
}
