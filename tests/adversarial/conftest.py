"""Adversarial suite: the real server process attacked over stdio and streamable HTTP.

Every test here acts as a hostile client would, on loopback only, bounded in count and time,
and asserts three things: the refusal (by code), the audit trace the attack leaves, and that
a legitimate client is still served during or right after the attack.
"""
