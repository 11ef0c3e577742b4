"""A generated corpus of ordinary support prose, the same on every run: what `policy
validate` runs never-store patterns (mistakes.py) and classifiers (classifier_checks.py)
against, so a pattern that would refuse or mark ordinary captures is found before rollout.
"""

from __future__ import annotations

import random
from functools import cache

_NAMES = ("Alice", "Bob", "Dana", "Erin", "Kim", "Lee", "Olga", "Priya", "Tomás", "Zoe")
_NOUNS = ("parcel", "invoice", "refund", "courier", "ticket", "account", "order", "contract")
_VERBS = ("approved", "asked about", "cancelled", "escalated", "confirmed", "disputed")
_PLACES = ("Berlin", "Lyon", "the depot", "the front desk", "Oslo", "the warehouse")
_TEMPLATES = (
    "{name} {verb} the {noun} on {date} at {time}.",
    "Customer {name} called about {noun} {n}; the {noun2} of {amount} EUR was {verb}.",
    "Per the note from {name}, the {noun} goes to {place} by {weekday}.",
    "Order #{n} shipped {date}, delivery expected within {small} days.",
    "Meeting with {name} and {name2} moved to {weekday} {time} in room {small}B.",
    "The {noun} total is {amount} (VAT {small}%), paid by card ending {small4}.",
    '{name} says: "Thanks, the {noun} arrived in {place} - all good!"',
    "Reminder: review {noun} {n} before {date}; call {name2} if the {noun2} is late.",
    "Version {small}.{small}.{small} of the form replaces the {noun} template from {year}.",
    "See page {small} of the {noun} policy, section {small}.{small}, for {place}.",
)


@cache
def ordinary_corpus(size: int = 400) -> tuple[str, ...]:
    """`size` sentences of ordinary support prose, the same on every run (seeded): names,
    dates, times, amounts, order numbers, versions; no credential of any kind."""
    rng = random.Random(22)  # noqa: S311 - a reproducible corpus, not a secret
    out = []
    for index in range(size):
        template = _TEMPLATES[index % len(_TEMPLATES)]
        out.append(
            template.format(
                name=rng.choice(_NAMES),
                name2=rng.choice(_NAMES),
                verb=rng.choice(_VERBS),
                noun=rng.choice(_NOUNS),
                noun2=rng.choice(_NOUNS),
                place=rng.choice(_PLACES),
                weekday=rng.choice(("Monday", "Tuesday", "Friday")),
                date=f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                time=f"{rng.randint(8, 18):02d}:{rng.choice((0, 15, 30, 45)):02d}",
                n=rng.randint(100, 99_999),
                amount=f"{rng.randint(5, 4_000)}.{rng.randint(0, 99):02d}",
                small=rng.randint(1, 30),
                small4=rng.randint(1000, 9999),
                year=rng.randint(2015, 2026),
            )
        )
    return tuple(out)
