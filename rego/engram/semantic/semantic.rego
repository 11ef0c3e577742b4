# METADATA
# title: Engram semantic channel
# description: |
#   May this binding's searches use the semantic channel (semantic_v1, SPEC §10.2)? Only
#   when memory is enabled, the tenant opted in (semantic_search: true) and the workspace
#   lists the declared purpose under semantic_search.purposes. The channel runs locally,
#   so the request's network flag grants nothing. Default: not permitted.
# scope: package
package engram.semantic

import data.engram.common

# METADATA
# title: Semantic channel decision
# description: '{"allow": bool, "reasons": [sorted rule names]}. Fail-closed.'
# entrypoint: true
# scope: document
default decision := {"allow": false, "reasons": ["default_deny"]}

decision := {"allow": false, "reasons": sort(deny)} if count(deny) > 0

decision := {"allow": true, "reasons": ["semantic_purpose_permitted"]} if {
	common.memory_enabled
	count(deny) == 0
}

deny contains reason if some reason in common.disabled

deny contains "tenant_semantic_not_enabled" if {
	common.memory_enabled
	not common.tenant.semantic_search == true
}

deny contains "purpose_not_permitted" if {
	common.memory_enabled
	not common.workspace.semantic_search.purposes[input.purpose_ref] == true
}
