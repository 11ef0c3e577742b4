"""The never-store detector of SPEC §11: built-in shapes, prose without false alarms, speed."""

from __future__ import annotations

import time

import pytest

from engram_memory.contract.exceptions import ConfigurationError
from engram_memory.contract.secrets import DEFAULT_DETECTOR, SecretDetector, contains_secret

# Asserts on wall time: one xdist worker runs the whole timing group, one test at a time.
pytestmark = pytest.mark.xdist_group("timing")

SECRET_SHAPES = [
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA",
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----",
    "-----BEGIN ENCRYPTED PRIVATE KEY-----",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----",
    "aws key AKIAIOSFODNN7EXAMPLE in the config",
    "ghp_" + "a1B2" * 9,
    "gho_" + "x9" * 18,
    "github_pat_" + "A1" * 11 + "_" + "b" * 59,
    "glpat-" + "xY3" * 7,
    "xoxb-1234567890-abcdefghij",
    "xoxp-99999-88888-abcdef",
    "sk-proj-" + "a" * 20 + "1",
    "sk-ant-api03-" + "Zz9" * 10,
    "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
    "rk_test_4eC39HqLyjWDarjtT1zdp7dc",
    "AIzaSyA-" + "b" * 31,
    "npm_" + "a" * 36,
    "hf_" + "Q" * 34,
    "SG." + "a" * 22 + "." + "b" * 43,
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "postgres://admin:s3cr3t@db.internal:5432/app",
    "mongodb+srv://user:p4ss@cluster0.example.net/db",
    "redis://:hunter22@cache:6379/0",
    "https://deploy:tok3n@example.com/repo.git",
    "password=hunter2",
    "PASSWORD = 'hunter2'",
    "db_password: Hunter42x",
    'api_key: "abcd1234"',
    '{"token": "abc123"}',
    "{'client_secret': 'xyz'}",
    "client_secret=xyz789abc",
    "access_token=ya29.a0AfH6SMB",
    "DB_PASSWORD=changeme",
    "export AWS_SECRET_ACCESS_KEY=abc",
    'STRIPE_API_KEY="sk"',
    "  GITHUB_TOKEN=abc",
    "Authorization: Bearer abcdef123456",
    "authorization: Basic dXNlcjpwYXNzd29yZA==",
    "Proxy-Authorization: Digest username=x",
    "Cookie: session=abc123",
    "Set-Cookie: sid=31d4d96e407aad42; Path=/; HttpOnly",
    "Server=db;User Id=sa;Password=Pa55w0rd;",
    "curl -H 'Bearer a1b2c3d4e5f6g7h8i9j0k1'",
]

ORDINARY_PROSE = [
    "We updated the password policy to require 14 characters.",
    "The rate limiter uses a token bucket with 10 tokens per second.",
    "Secret management is handled by the platform team.",
    "The API key rotation schedule is quarterly.",
    "Decision: token: bucket sizes stay the same.",
    "The password: must be rotated every 90 days.",
    "Authorization: basic approval from the lead is needed.",
    "Cookie: a small file the browser keeps.",
    "Passwords must never be stored in tickets; use the vault.",
    "See https://example.com:8443/docs?a=b#x for the runbook.",
    "Clone ssh://git@github.com:22/org/repo.git first.",
    "The task-management overview covers sk-learn and sk-image.",
    "if password == confirmation: proceed",
    "Set max_tokens=1500 for the summarizer.",
    "password=${DB_PASSWORD} is read from the environment.",
    "token=<redacted>",
    "The secretary: Ann Smith, room 42b.",
    "Tokenizer: graphify-memory:tokenizer:v1",
    "Use the bearer token flow described in RFC 6750.",
    "The primary key: customer_id plus region.",
    "sha256:" + "a" * 64,
    "mem_y5lyhrr2w42rak7rz6h3gypy53rhohj2zszdhj7gpqzvjnijiqkq",
    "candidate_" + "0" * 64,
    "2026-08-16T12:34:56.789Z",
    "citation:source",
    "Die Passwortrichtlinie verlangt 14 Zeichen; das Token-Bucket-Verfahren bleibt.",
]


@pytest.mark.parametrize("text", SECRET_SHAPES)
def test_built_in_secret_shapes_are_detected(text: str) -> None:
    assert contains_secret(text)
    assert DEFAULT_DETECTOR.contains_secret(f"Context before.\n{text}\nAnd after.")


@pytest.mark.parametrize("text", ORDINARY_PROSE)
def test_ordinary_prose_is_not_flagged(text: str) -> None:
    assert not contains_secret(text)


def test_any_secret_scans_every_string() -> None:
    assert DEFAULT_DETECTOR.any_secret(["fine", "also fine", "password=hunter2"])
    assert not DEFAULT_DETECTOR.any_secret(["fine", "also fine"])


def test_extra_patterns_add_shapes() -> None:
    detector = SecretDetector(extra_patterns=[r"\bINTERNAL-[0-9]{4}\b"])
    assert detector.contains_secret("badge INTERNAL-1234")
    assert not DEFAULT_DETECTOR.contains_secret("badge INTERNAL-1234")


def test_an_invalid_extra_pattern_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        SecretDetector(extra_patterns=["(unclosed"])


ADVERSARIAL = [
    "eyJ-" * 16384,
    "://" + "a" * 65536,
    "://a:" * 13000,
    "a" * 65536,
    "authorization: " + "a-" * 30000,
    "password: " + "a" * 65000,
    "sk-" * 21000,
    "A" * 65536 + "_KEY",
    "A_" * 32000 + "\n",
    "token: " * 9000,
    "-----BEGIN " * 6000,
    "cookie: " * 8000,
    "Bearer " + "ab" * 30000,
]


def test_adversarial_inputs_scan_in_bounded_time() -> None:
    # Generous bound: the point is "no super-linear blow-up", not a benchmark.
    DEFAULT_DETECTOR.contains_secret("é")  # the tables are built at the first scan, not timed
    for text in ADVERSARIAL:
        started = time.perf_counter()
        DEFAULT_DETECTOR.contains_secret(text)
        assert time.perf_counter() - started < 1.0, text[:20]
