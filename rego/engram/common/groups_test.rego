package engram.groups_test

# Grants by group: roles come from the principal's own grants and from the grants of every
# group in the host's signed `groups` claim, each grant with its own purposes restriction.

import data.engram.authz
import data.engram.common
import data.engram.confirmation
import data.engram.discovery
import data.engram.retention

config := {"tenants": {"acme": {
	"memory_enabled": true,
	"workspaces": {"support": {
		"memory_enabled": true,
		"roles": {
			"reader": ["engram_memory_get", "engram_memory_search"],
			"contributor": ["engram_memory_capture"],
			"curator": ["engram_memory_withdraw"],
			"retainer": [],
		},
		"principals": {"user:bob": [{"roles": ["contributor"]}]},
		"groups": {
			"group:advisors": [{"roles": ["reader"]}],
			"group:case-team": [{"roles": ["contributor"], "purposes": ["purpose:support-case"]}],
			"group:curators": [{"roles": ["curator", "retainer"]}],
		},
		"redaction": [
			{"name": "readers-view", "roles": ["reader"], "allowed_fields": ["/valid_time"]},
			{"name": "everyone-else", "allowed_fields": ["/purpose_ref"]},
		],
		"confirmation": {"require": {"engram_memory_capture": [{"roles": ["contributor"]}]}},
		"retention": {"retain": {"roles": ["retainer"]}},
	}},
}}}

# user:zoe has no grant of her own: everything she may do comes from her groups.
request := {
	"tenant": "acme",
	"workspace": "support",
	"principal": "user:zoe",
	"agent_id": "agent:1",
	"purpose_ref": "purpose:support-case",
	"host_id": "host:1",
	"tool": "engram_memory_get",
}

as_member(groups) := object.union(request, {"groups": groups})

test_a_group_grant_allows_a_principal_without_grants_of_its_own if {
	d := authz.decision with input as as_member(["group:advisors"]) with data.engram.config as config
	d.allow
	d.reasons == ["grant:group:advisors:reader", "redaction_rule:readers-view", "tool_granted"]
}

test_without_the_groups_claim_the_same_principal_is_denied if {
	d := authz.decision with input as request with data.engram.config as config
	not d.allow
	d.reasons == ["tool_not_granted"]
}

test_a_group_the_policy_does_not_grant_gives_nothing if {
	d := authz.decision with input as as_member(["group:strangers"]) with data.engram.config as config
	not d.allow
	d.reasons == ["tool_not_granted"]
}

test_a_group_grant_restricted_to_a_purpose_applies_only_to_that_purpose if {
	capture := as_member(["group:case-team"])
	allowed := authz.decision with input as object.union(capture, {"tool": "engram_memory_capture"})
		with data.engram.config as config
	allowed.allow
	"grant:group:case-team:contributor" in allowed.reasons
	other := object.union(capture, {"tool": "engram_memory_capture", "purpose_ref": "purpose:other"})
	denied := authz.decision with input as other with data.engram.config as config
	not denied.allow
}

test_principal_and_group_roles_are_unioned if {
	bob := object.union(as_member(["group:advisors"]), {"principal": "user:bob"})
	own := authz.decision with input as object.union(bob, {"tool": "engram_memory_capture"})
		with data.engram.config as config
	own.allow
	own.reasons == ["redaction_rule:readers-view", "tool_granted"]
	via_group := authz.decision with input as bob with data.engram.config as config
	via_group.allow
	common.roles == {"contributor", "reader"} with input as bob with data.engram.config as config
}

test_redaction_selects_by_a_role_that_came_from_a_group if {
	member := authz.decision with input as as_member(["group:advisors"]) with data.engram.config as config
	member.redaction.allowed_fields == ["/valid_time"]
	bob := object.union(request, {"principal": "user:bob", "tool": "engram_memory_capture"})
	outsider := authz.decision with input as bob with data.engram.config as config
	outsider.redaction.allowed_fields == ["/purpose_ref"]
}

test_confirmation_selects_by_a_role_that_came_from_a_group if {
	capture := object.union(as_member(["group:case-team"]), {"tool": "engram_memory_capture"})
	confirmation.decision.required with input as capture with data.engram.config as config
	not confirmation.decision.required with input as object.union(capture, {"groups": ["group:advisors"]})
		with data.engram.config as config
}

test_discovery_lists_group_tools_and_names_the_grants if {
	d := discovery.decision with input as object.union(as_member(["group:advisors", "group:case-team"]), {"host_memory_enabled": true})
		with data.engram.config as config
	d.visible_tools == ["engram_memory_capture", "engram_memory_get", "engram_memory_search"]
	d.reasons == [
		"grant:group:advisors:reader",
		"grant:group:case-team:contributor",
		"memory_enabled",
		"tools_granted",
	]
}

test_a_group_role_without_tools_is_not_named_by_discovery if {
	d := discovery.decision with input as object.union(as_member(["group:curators"]), {"host_memory_enabled": true})
		with data.engram.config as config
	d.reasons == ["grant:group:curators:curator", "memory_enabled", "tools_granted"]
}

test_retention_permits_retain_for_a_role_that_came_from_a_group if {
	retain := object.union(request, {
		"capture_instant_ms": 1000,
		"retention": {"derivative_rule": "retain"},
	})
	retention.decision.allow with input as object.union(retain, {"groups": ["group:curators"]})
		with data.engram.config as config
	not retention.decision.allow with input as retain with data.engram.config as config
}
