# METADATA
# title: engram-memory decision-log masking
# description: >-
#   What OPA removes from every decision-log entry before it is written or shipped.
#   engram-memory's decision inputs carry identifiers and digests only (tenant, workspace,
#   principal, agent, purpose reference, candidate and record digests), never memory text;
#   the identifiers that name a person, an agent, a purpose or a group are masked anyway,
#   so a decision log is never a directory of who asked what for which purpose.
# authors:
#   - engram-memory
package system.log

import rego.v1

# The input fields masked wherever they occur at the top level of a decision's input.
masked_input_fields := {
	"agent_id",
	"family_refs",
	"groups",
	"host_id",
	"operator",
	"principal",
	"purpose_ref",
}

# The candidate fields (admission decisions) that point outside the service.
masked_candidate_fields := {"evidence_ref", "source_refs"}

# METADATA
# description: >-
#   Fail closed: an input this policy cannot read (not an object) is removed whole.
# entrypoint: true
default mask := {"/input"}

mask := top_level | candidate if {
	is_object(input.input)
	top_level := {sprintf("/input/%s", [field]) |
		some field in masked_input_fields
		field in object.keys(input.input)
	}
	candidate := {sprintf("/input/candidate/%s", [field]) |
		some field in masked_candidate_fields
		field in object.keys(object.get(input.input, "candidate", {}))
	}
}
