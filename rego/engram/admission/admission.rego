# METADATA
# title: Engram admission
# description: |
#   Decides whether a pending candidate becomes a record (SPEC §4.4). The workspace's
#   admission policy names prefixes of evidence_ref to reject or accept, and conditions
#   that need a human adjudication (component kinds, too few citations, source_ref
#   prefixes, content classifiers that matched). Precedence: reject > adjudication_required > accept > `otherwise`.
#   A workspace without an admission policy yields "unconfigured" (POLICY_UNAVAILABLE).
# scope: package
package engram.admission

import data.engram.common

# METADATA
# title: Admission decision
# description: |
#   {"decision": "accept"|"reject"|"adjudication_required", "policy_id", "policy_version",
#   "record_digest" (echoed), "issued_at_ms" (input.now_ms), "reasons"}; without an
#   admission policy {"decision": "unconfigured", "reasons": ["no_admission_policy"]}.
# entrypoint: true
# scope: document
default decision := {"decision": "unconfigured", "reasons": ["no_admission_policy"]}

decision := {
	"decision": verdict.decision,
	"policy_id": policy.policy_id,
	"policy_version": policy.policy_version,
	"record_digest": candidate.record_digest,
	"issued_at_ms": input.now_ms,
	"reasons": verdict.reasons,
} if {
	is_number(input.now_ms)
	well_formed
}

policy := common.workspace.admission

candidate := input.candidate

well_formed if {
	is_string(candidate.record_digest)
	is_string(candidate.evidence_ref)
	is_array(candidate.component_kinds)
	is_number(candidate.citation_count)
	is_array(candidate.source_refs)
	is_boolean(candidate.has_attestation)

	# A builtin error (startswith on a non-string) is undefined, not false: it would
	# silently skip a reject or adjudicate rule, so non-strings never reach them.
	every value in array.concat(candidate.component_kinds, candidate.source_refs) {
		is_string(value)
	}

	classifier_facts_well_formed
}

# The names of the content classifiers that matched, per component kind (the service runs
# them on the plaintext; nothing else of the text reaches policy). Absent: none defined.
classifier_facts := object.get(input, "classifiers", {})

default classifier_facts_well_formed := false

classifier_facts_well_formed if {
	is_object(classifier_facts)
	every names in classifier_facts {
		is_array(names)
		every name in names {
			is_string(name)
		}
	}
}

verdict := {"decision": "reject", "reasons": sort(reject)} if count(reject) > 0

else := {"decision": "adjudication_required", "reasons": sort(adjudicate)} if count(adjudicate) > 0

else := {"decision": "accept", "reasons": sort(accept)} if count(accept) > 0

else := {"decision": object.get(policy, "otherwise", "adjudication_required"), "reasons": sort(otherwise)}

reject contains "reject_evidence_prefix" if {
	some prefix in policy.reject.evidence_ref_prefixes
	startswith(candidate.evidence_ref, prefix)
}

adjudicate contains "adjudicate_component_kind" if {
	some kind in candidate.component_kinds
	kind in policy.adjudicate.component_kinds
}

adjudicate contains "adjudicate_min_citations" if {
	candidate.citation_count < policy.adjudicate.min_citations
}

adjudicate contains "adjudicate_source_prefix" if {
	some source in candidate.source_refs
	some prefix in policy.adjudicate.source_ref_prefixes
	startswith(source, prefix)
}

# Any component kind: `adjudicate_classifier:<name>` for each classifier named that matched.
adjudicate contains concat(":", ["adjudicate_classifier", name]) if {
	some name in policy.adjudicate.classifiers
	some names in classifier_facts
	name in names
}

evidence_accepted if {
	some prefix in policy.accept.evidence_ref_prefixes
	startswith(candidate.evidence_ref, prefix)
}

attested if not policy.accept.require_attestation == true

attested if candidate.has_attestation == true

accept contains "accept_evidence_prefix" if {
	evidence_accepted
	attested
}

otherwise contains "otherwise"

otherwise contains "attestation_missing" if {
	evidence_accepted
	not attested
}
