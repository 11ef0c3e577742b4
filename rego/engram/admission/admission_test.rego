package engram.admission_test

import data.engram.admission

policy := {
	"policy_id": "acme-support-admission",
	"policy_version": "2026.1",
	"reject": {"evidence_ref_prefixes": ["evidence:untrusted/"]},
	"adjudicate": {
		"component_kinds": ["context"],
		"min_citations": 2,
		"source_ref_prefixes": ["source:external/"],
	},
	"accept": {"evidence_ref_prefixes": ["evidence:ticket/"], "require_attestation": true},
	"otherwise": "reject",
}

config := {"tenants": {"acme": {
	"memory_enabled": true,
	"workspaces": {
		"support": {"memory_enabled": true, "admission": policy},
		"minimal": {"memory_enabled": true, "admission": {"policy_id": "min", "policy_version": "1"}},
		"lenient": {"memory_enabled": true, "admission": {
			"policy_id": "lenient",
			"policy_version": "1",
			"accept": {"evidence_ref_prefixes": ["evidence:ticket/"]},
		}},
		"unconfigured": {"memory_enabled": true},
	},
}}}

candidate := {
	"candidate_id": "candidate_00",
	"payload_digest": "sha256:aa",
	"record_digest": "sha256:bb",
	"evidence_ref": "evidence:ticket/42",
	"evidence_digest": "sha256:cc",
	"component_kinds": ["decision"],
	"citation_count": 2,
	"source_refs": ["source:case"],
	"has_attestation": true,
	"trust_class": "asserted",
}

request(workspace, changes) := {
	"tenant": "acme",
	"workspace": workspace,
	"principal": "user:alice",
	"agent_id": "agent:1",
	"purpose_ref": "purpose:support-case",
	"host_id": "host:1",
	"now_ms": 1000,
	"candidate": object.union(candidate, changes),
}

test_accepted_evidence_with_attestation_is_accepted if {
	admission.decision == {
		"decision": "accept",
		"policy_id": "acme-support-admission",
		"policy_version": "2026.1",
		"record_digest": "sha256:bb",
		"issued_at_ms": 1000,
		"reasons": ["accept_evidence_prefix"],
	} with input as request("support", {}) with data.engram.config as config
}

test_rejected_evidence_wins_over_everything if {
	d := admission.decision with input as request("support", {
		"evidence_ref": "evidence:untrusted/1",
		"component_kinds": ["context"],
	})
		with data.engram.config as config
	d.decision == "reject"
	d.reasons == ["reject_evidence_prefix"]
}

test_review_conditions_need_adjudication if {
	d := admission.decision with input as request("support", {
		"component_kinds": ["context", "decision"],
		"citation_count": 1,
		"source_refs": ["source:external/wiki"],
	})
		with data.engram.config as config
	d.decision == "adjudication_required"
	d.reasons == ["adjudicate_component_kind", "adjudicate_min_citations", "adjudicate_source_prefix"]
}

test_missing_attestation_falls_to_otherwise if {
	d := admission.decision with input as request("support", {"has_attestation": false})
		with data.engram.config as config
	d.decision == "reject"
	d.reasons == ["attestation_missing", "otherwise"]
}

test_unknown_evidence_falls_to_otherwise if {
	d := admission.decision with input as request("support", {"evidence_ref": "evidence:mail/1"})
		with data.engram.config as config
	d.decision == "reject"
	d.reasons == ["otherwise"]
}

test_otherwise_defaults_to_adjudication if {
	d := admission.decision with input as request("minimal", {})
		with data.engram.config as config
	d.decision == "adjudication_required"
	d.policy_id == "min"
	d.reasons == ["otherwise"]
}

test_a_workspace_without_admission_policy_is_unconfigured if {
	admission.decision == {"decision": "unconfigured", "reasons": ["no_admission_policy"]}
		with input as request("unconfigured", {}) with data.engram.config as config
}

test_a_malformed_candidate_is_unconfigured if {
	d := admission.decision with input as request("support", {"citation_count": "2"})
		with data.engram.config as config
	d.decision == "unconfigured"
}

test_a_missing_clock_is_unconfigured if {
	d := admission.decision with input as object.remove(request("support", {}), ["now_ms"])
		with data.engram.config as config
	d.decision == "unconfigured"
}

test_attestation_is_optional_unless_required if {
	d := admission.decision with input as request("lenient", {"has_attestation": false})
		with data.engram.config as config
	d.decision == "accept"
	d.reasons == ["accept_evidence_prefix"]
}

test_a_non_string_source_ref_is_unconfigured if {
	d := admission.decision with input as request("support", {"source_refs": [7]})
		with data.engram.config as config
	d.decision == "unconfigured"
}

classifying_config := json.patch(config, [{
	"op": "add",
	"path": "/tenants/acme/workspaces/lenient/admission/adjudicate",
	"value": {"classifiers": ["customer", "iban"]},
}])

classified(facts) := object.union(request("lenient", {}), {"classifiers": facts})

test_a_named_classifier_that_matched_needs_adjudication if {
	d := admission.decision with input as classified({"context": ["customer"], "primary": ["email"]})
		with data.engram.config as classifying_config
	d.decision == "adjudication_required"
	d.reasons == ["adjudicate_classifier:customer"]
}

test_every_named_classifier_that_matched_is_a_reason if {
	d := admission.decision with input as classified({"citations": ["iban"], "primary": ["customer"]})
		with data.engram.config as classifying_config
	d.reasons == ["adjudicate_classifier:customer", "adjudicate_classifier:iban"]
}

test_classifiers_not_named_do_not_hold if {
	d := admission.decision with input as classified({"primary": ["email"]})
		with data.engram.config as classifying_config
	d.decision == "accept"
}

test_no_classifier_facts_means_nothing_matched if {
	d := admission.decision with input as request("lenient", {}) with data.engram.config as classifying_config
	d.decision == "accept"
}

test_malformed_classifier_facts_are_unconfigured if {
	every facts in [["customer"], {"primary": "customer"}, {"primary": [1]}] {
		d := admission.decision with input as classified(facts) with data.engram.config as classifying_config
		d.decision == "unconfigured"
	}
}
