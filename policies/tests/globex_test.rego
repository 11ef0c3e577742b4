# METADATA
# title: Tenant tests of policies/globex.yaml
# description: |
#   Rego tests run by `engram-memory policy test` against the data compiled from
#   policies/*.yaml (data.engram.config), so they test the tenant as built.
package tenant_tests.globex_test

import data.engram.authz
import data.engram.discovery

carol := {
	"tenant": "globex",
	"workspace": "main",
	"principal": "user:carol",
	"purpose_ref": "purpose:any",
	"agent_id": "agent:test",
	"host_id": "host:test",
}

test_carol_sees_every_tool if {
	listed := discovery.decision with input as object.union(carol, {"host_memory_enabled": true})
	count(listed.visible_tools) == 6
}

test_carol_may_forget_with_the_full_view if {
	decision := authz.decision with input as object.union(carol, {"tool": "engram_memory_forget"})
	decision.allow
	decision.reasons == ["redaction_rule:stewards-see-everything", "tool_granted"]
}

test_an_acme_principal_holds_nothing_at_globex if {
	bob := object.union(carol, {"principal": "user:bob", "tool": "engram_memory_get"})
	not authz.decision.allow with input as bob
}
