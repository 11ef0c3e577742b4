# METADATA
# title: Engram shared lookups
# description: |
#   Helpers every engram domain uses: the caller's tenant and workspace, looked up by
#   key so evaluation cost does not grow with the number of tenants; memory enablement;
#   and the roles and tools the principal holds for the declared purpose, from its own
#   grants and from the grants of the groups the host asserts for it.
#   Policy data lives at data.engram.config (compiled from policies/*.yaml).
# scope: package
package engram.common

# The six agent tools (contract/types.py ToolName), the only place Rego spells them;
# anything else in policy data is ignored. Grouped as SPEC §7 confirms them: reads never,
# withdraw and forget always, capture and request_admission when the workspace selects them.
known_tools := (read_only_tools | always_confirmed_tools) | selectable_tools

read_only_tools := {"engram_memory_search", "engram_memory_get"}

always_confirmed_tools := {"engram_memory_withdraw", "engram_memory_forget"}

selectable_tools := {"engram_memory_capture", "engram_memory_request_admission"}

tenant := data.engram.config.tenants[input.tenant]

workspace := tenant.workspaces[input.workspace]

memory_enabled if {
	tenant.memory_enabled == true
	workspace.memory_enabled == true
}

# METADATA
# title: Why memory is off
# description: Names every reason memory is disabled for the caller's tenant and workspace.
disabled contains "tenant_not_configured" if not tenant

disabled contains "tenant_memory_disabled" if {
	tenant
	not tenant.memory_enabled == true
}

disabled contains "workspace_not_configured" if {
	tenant
	not workspace
}

disabled contains "workspace_memory_disabled" if {
	workspace
	not workspace.memory_enabled == true
}

# A grant without purposes applies to every purpose.
grant_applies(grant) if not grant.purposes

grant_applies(grant) if input.purpose_ref in grant.purposes

# METADATA
# title: Roles of the principal
# description: |
#   Roles that apply to the declared purpose from the principal's own grants and from
#   the grants of every group in the host's signed groups claim (absent = none), unioned.
roles contains role if {
	some grant in workspace.principals[input.principal]
	grant_applies(grant)
	some role in grant.roles
}

roles contains role if some [_, role] in group_roles

# METADATA
# title: Roles that came from groups
# description: |
#   [group, role] pairs: a grant of a group the caller belongs to (input.groups) gave
#   the role for the declared purpose. Decisions name them as grant:<group>:<role>.
group_roles contains [group, role] if {
	some group in input.groups
	some grant in workspace.groups[group]
	grant_applies(grant)
	some role in grant.roles
}

# METADATA
# title: Tools granted to the principal
# description: Union of the tools of every role the principal holds for this purpose.
granted_tools contains tool if {
	some role in roles
	some tool in workspace.roles[role]
	tool in known_tools
}

# named(selector) holds when the selector names the principal or one of its roles.
named(selector) if input.principal in selector.principals

named(selector) if {
	some role in selector.roles
	role in roles
}

# selects(selector) also holds for a selector that names nobody: it applies to everyone.
selects(selector) if {
	not selector.principals
	not selector.roles
}

selects(selector) if named(selector)
