"""The agent's manual: the `instructions` both MCP servers (`serve`, the gateway) send in their
`initialize` result.

An agent cannot ask us what we meant; this text is what it learns of when memory is worth
using, how admission and idempotency work, what never to store and what every error code
of SPEC §5 asks of it. It agrees with the tool descriptions (contract/schemas.py) and is
given in English by default and in French by configuration (`ENGRAM_INSTRUCTIONS_LANGUAGE`;
the connector guidance this product follows was written in French). Both languages say the
same things: a test compares them section by section and code by code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from engram_memory.contract.errors import ErrorCode
from engram_memory.contract.exceptions import ConfigurationError

LANGUAGES = ("en", "fr")
LANGUAGE_VARIABLE = "ENGRAM_INSTRUCTIONS_LANGUAGE"

# Each section: (English, French), in the order they are shown.
SECTIONS: tuple[tuple[str, str], ...] = (
    (
        "engram-memory is a governed memory shared with your team under your organisation's "
        "policy. Every call is authorized by policy, audited, and bound to the tenant, "
        "workspace, principal and purpose your host signed; you cannot change them.",
        "engram-memory est une mémoire gouvernée, partagée avec votre équipe selon la "
        "politique de votre organisation. Chaque appel est autorisé par la politique, audité, "
        "et lié au tenant, à l'espace de travail, au principal et à la finalité que votre hôte "
        "a signés ; vous ne pouvez pas les changer.",
    ),
    (
        "What to remember: durable, reusable knowledge that others will need again and that "
        "you can cite (a decision and its reason, a confirmed fact with its source, a "
        "procedure that worked). Never store working state, transcripts, raw tool output, "
        "speculation, or anything you could not cite.",
        "Quoi mémoriser : un savoir durable et réutilisable, dont d'autres auront de nouveau "
        "besoin et que vous pouvez citer (une décision et sa raison, un fait confirmé avec sa "
        "source, une procédure qui a marché). Ne stockez jamais d'état de travail, de "
        "transcriptions, de sorties brutes d'outils, de spéculations, ni rien que vous ne "
        "puissiez citer.",
    ),
    (
        "Never store secrets, credentials, keys, tokens or personal data the policy does not "
        "allow: a capture that contains one is refused (INVALID_SCHEMA) and nothing is kept.",
        "Ne stockez jamais de secrets, identifiants, clés, jetons ni de données personnelles "
        "que la politique n'autorise pas : une capture qui en contient est refusée "
        "(INVALID_SCHEMA) et rien n'est conservé.",
    ),
    (
        "Search before you capture (engram_memory_search, then engram_memory_get for one "
        "record): if the knowledge is already there, cite it instead of capturing it again.",
        "Cherchez avant de capturer (engram_memory_search, puis engram_memory_get pour un "
        "enregistrement) : si le savoir existe déjà, citez-le au lieu de le capturer à "
        "nouveau.",
    ),
    (
        "A capture (engram_memory_capture) is only a pending candidate: it is never found by "
        "search until you request admission (engram_memory_request_admission) and policy "
        "accepts it. Admission may also be rejected or held for a human to adjudicate; "
        "never presume it.",
        "Une capture (engram_memory_capture) n'est qu'une candidate en attente : la recherche "
        "ne la trouve pas tant que vous n'avez pas demandé son admission "
        "(engram_memory_request_admission) et que la politique ne l'a pas acceptée. "
        "L'admission peut aussi être rejetée ou mise en attente d'un arbitrage humain ; ne la "
        "présumez jamais.",
    ),
    (
        "Every mutating call takes an idempotency_key you choose. Keep it with the operation: "
        "a retry of the same operation uses the same key and the same arguments and gets the "
        "first result back (replayed); a new key means a new operation.",
        "Chaque appel qui modifie prend une idempotency_key que vous choisissez. Gardez-la "
        "avec l'opération : une nouvelle tentative de la même opération reprend la même clé "
        "et les mêmes arguments et reçoit le premier résultat (rejoué) ; une nouvelle clé "
        "signifie une nouvelle opération.",
    ),
    (
        "Withdraw (engram_memory_withdraw) and forget (engram_memory_forget) destroy content "
        "for good and always need a human's confirmation through your host; policy may ask "
        "for one on capture and admission too. Ask the human; never try to get around it.",
        "Le retrait (engram_memory_withdraw) et l'oubli (engram_memory_forget) détruisent le "
        "contenu définitivement et demandent toujours la confirmation d'un humain via votre "
        "hôte ; la politique peut en exiger une aussi pour la capture et l'admission. "
        "Demandez à l'humain ; n'essayez jamais de la contourner.",
    ),
    (
        "Every failure is an envelope with a code and a constant message. What each code asks "
        "of you:",
        "Chaque échec est une enveloppe avec un code et un message constant. Ce que chaque "
        "code attend de vous :",
    ),
)

_FIX = ("fix the arguments and call again.", "corrigez les arguments et rappelez.")
_STOP = (
    "stop and report to the user; never retry under another identity.",
    "arrêtez et signalez-le à l'utilisateur ; ne réessayez jamais sous une autre identité.",
)
_RETRY = (
    "retry after a short wait, with the same idempotency_key and arguments for a mutation; "
    "report it if it persists.",
    "réessayez après une courte attente, avec la même idempotency_key et les mêmes arguments "
    "pour une modification ; signalez-le si cela persiste.",
)
_OPS = (
    "stop and report to the operator of the memory service; do not retry.",
    "arrêtez et signalez-le à l'opérateur du service de mémoire ; ne réessayez pas.",
)
_RECHECK = (
    "check the current state with search or get; do not loop.",
    "vérifiez l'état actuel avec search ou get ; ne bouclez pas.",
)

# One action for every code of SPEC §5 (a test checks none is missing).
ACTIONS: dict[ErrorCode, tuple[str, str]] = {
    ErrorCode.INVALID_SCHEMA: _FIX,
    ErrorCode.INVALID_DIGEST: _FIX,
    ErrorCode.UNAUTHORIZED: _STOP,
    ErrorCode.AUTHORIZATION_EXPIRED: _STOP,
    ErrorCode.AUTHORIZATION_REVOKED: _STOP,
    ErrorCode.NOT_FOUND: (
        "treat the target as unavailable; never probe for it.",
        "considérez la cible comme indisponible ; ne la sondez jamais.",
    ),
    ErrorCode.DIGEST_CONFLICT: (
        "this key was used for another operation: find out why; use a new key only for a new "
        "operation.",
        "cette clé a servi à une autre opération : cherchez pourquoi ; n'utilisez une "
        "nouvelle clé que pour une nouvelle opération.",
    ),
    ErrorCode.ILLEGAL_TRANSITION: _RECHECK,
    ErrorCode.ALREADY_TERMINAL: _RECHECK,
    ErrorCode.MUTATION_OUTCOME_UNKNOWN: (
        "retry with the same idempotency_key and arguments until the answer is definite; "
        "never assume nothing happened.",
        "réessayez avec la même idempotency_key et les mêmes arguments jusqu'à une réponse "
        "définitive ; ne supposez jamais que rien ne s'est passé.",
    ),
    ErrorCode.gate_failed: (
        "a human confirmation or a policy gate was not satisfied: ask the human through your "
        "host, then call again with a fresh confirmation.",
        "une confirmation humaine ou une condition de la politique n'est pas remplie : "
        "demandez à l'humain via votre hôte, puis rappelez avec une nouvelle confirmation.",
    ),
    ErrorCode.STALE_PAGE: (
        "search again without page_cursor.",
        "relancez la recherche sans page_cursor.",
    ),
    ErrorCode.RESULT_TOO_LARGE: (
        "ask for less: lower limit or max_packet_bytes.",
        "demandez moins : baissez limit ou max_packet_bytes.",
    ),
    ErrorCode.PROJECTION_OVERSIZED: (
        "adjust max_packet_bytes within its bounds.",
        "ajustez max_packet_bytes dans ses bornes.",
    ),
    ErrorCode.RATE_LIMITED: _RETRY,
    ErrorCode.DEADLINE_EXCEEDED: _RETRY,
    ErrorCode.CANCELLED: _RETRY,
    ErrorCode.STORE_UNAVAILABLE: _RETRY,
    ErrorCode.FENCE_LOST: _RETRY,
    ErrorCode.CURSOR_GAP: _RETRY,
    ErrorCode.POLICY_UNAVAILABLE: _RETRY,
    ErrorCode.POLICY_STALE: _RETRY,
    ErrorCode.PROJECTION_STALE: _RETRY,
    ErrorCode.RANKING_UNAVAILABLE: (
        "retry later, or search with ranking 'lexical'.",
        "réessayez plus tard, ou cherchez avec le classement 'lexical'.",
    ),
    ErrorCode.CAPABILITY_UNAVAILABLE: _OPS,
    ErrorCode.JOURNAL_CORRUPT: _OPS,
    ErrorCode.BLOB_MISSING: _OPS,
    ErrorCode.REGISTRY_VERSION_UNAVAILABLE: _OPS,
    ErrorCode.BACKUP_INVALID: _OPS,
    ErrorCode.RESTORE_REFUSED: _OPS,
    ErrorCode.MIGRATION_LEDGER_INVALID: _OPS,
}

_CLOSING = (
    "A refusal before the call is judged (a JSON-RPC error, not an envelope) means your host's "
    "binding is missing, expired or does not allow that tool: report it to the user.",
    "Un refus avant que l'appel soit jugé (une erreur JSON-RPC, pas une enveloppe) signifie "
    "que la liaison de votre hôte manque, a expiré ou n'autorise pas cet outil : "
    "signalez-le à l'utilisateur.",
)


def instructions(language: str = "en") -> str:
    """The manual in `language` ("en" or "fr").

    Raises:
        ValueError: another language.
    """
    if language not in LANGUAGES:
        raise ValueError(f"instructions language must be one of {', '.join(LANGUAGES)}")
    which = LANGUAGES.index(language)
    lines = [section[which] for section in SECTIONS]
    lines += [f"- {code.name}: {ACTIONS[code][which]}" for code in ErrorCode]
    lines.append(_CLOSING[which])
    return "\n".join(lines)


def configured_language(environ: Mapping[str, str] = os.environ) -> str:
    """The manual's language `ENGRAM_INSTRUCTIONS_LANGUAGE` names ("en" when unset).

    Raises:
        ConfigurationError: another value (checked at start, before anything is served).
    """
    language = environ.get(LANGUAGE_VARIABLE, "en")
    if language not in LANGUAGES:
        raise ConfigurationError(
            f"{LANGUAGE_VARIABLE} must be one of {', '.join(LANGUAGES)} (the agent's manual)"
        )
    return language
