package engram.maintenance_test

import data.engram.maintenance

config := {"tenants": {"acme": {
	"memory_enabled": true,
	"workspaces": {"support": {
		"memory_enabled": false,
		"maintenance": {"operators": {
			"human:dana": ["maintain", "read"],
			"human:erin": ["read"],
			"service:cron": ["maintain"],
		}},
	}},
}}}

request := {
	"tenant": "acme",
	"workspace": "support",
	"operator": "human:dana",
	"authority": "maintain",
	"operation": "dispute",
}

test_an_operator_with_the_authority_may_maintain_even_with_memory_disabled if {
	d := maintenance.decision with input as request with data.engram.config as config
	d == {"allow": true, "reasons": ["operator_holds_maintain"]}
}

test_read_authority_allows_inspection if {
	d := maintenance.decision with input as object.union(request, {"operator": "human:erin", "authority": "read"})
		with data.engram.config as config
	d == {"allow": true, "reasons": ["operator_holds_read"]}
}

test_read_authority_does_not_allow_changes if {
	d := maintenance.decision with input as object.union(request, {"operator": "human:erin"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["authority_not_held"]}
}

test_an_unknown_operator_holds_nothing if {
	d := maintenance.decision with input as object.union(request, {"operator": "human:mallory"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["authority_not_held"]}
}

test_an_operator_that_is_not_a_human_is_refused_even_if_listed if {
	d := maintenance.decision with input as object.union(request, {"operator": "service:cron"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["operator_not_human"]}
}

test_an_unknown_authority_is_refused if {
	d := maintenance.decision with input as object.union(request, {"authority": "admin"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["default_deny"]}
}

test_an_unknown_workspace_is_refused if {
	d := maintenance.decision with input as object.union(request, {"workspace": "other"})
		with data.engram.config as config
	d == {"allow": false, "reasons": ["default_deny"]}
}

test_a_workspace_without_maintenance_data_is_refused if {
	d := maintenance.decision with input as request
		with data.engram.config as {"tenants": {"acme": {"workspaces": {"support": {}}}}}
	d == {"allow": false, "reasons": ["authority_not_held"]}
}

test_a_missing_operator_is_refused if {
	d := maintenance.decision with input as object.remove(request, ["operator"])
		with data.engram.config as config
	d == {"allow": false, "reasons": ["default_deny"]}
}
