# METADATA
# title: Engram reconciliation consent
# description: |
#   A capture may name reconciliation families only if the workspace consents to every
#   listed family (SPEC §11). An empty list needs no consent.
# scope: package
package engram.reconciliation

import data.engram.common

# METADATA
# title: Reconciliation decision
# description: '{"allow": bool, "reasons": [sorted rule names]}. Fail-closed.'
# entrypoint: true
# scope: document
default decision := {"allow": false, "reasons": ["default_deny"]}

decision := {"allow": true, "reasons": ["no_families"]} if {
	common.workspace
	count(families) == 0
}

decision := {"allow": true, "reasons": ["all_families_consented"]} if {
	common.workspace
	count(families) > 0
	count(unconsented) == 0
}

decision := {"allow": false, "reasons": ["family_not_consented"]} if {
	common.workspace
	count(unconsented) > 0
}

families := input.family_refs if is_array(input.family_refs)

unconsented contains family if {
	some family in families
	not common.workspace.reconciliation.consented_families[family] == true
}
