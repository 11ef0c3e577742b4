"""Write disguises.json: secrets disguised the ways issue 23 found stored, and more.

Every secret here is fake (AWS's documented example key, made-up tokens and passwords).
Each entry is one capture: `texts` become its components, `locators` its citations'
locator values, `refs` overrides some of its references, and `extra_patterns` are the
tenant's policy-data shapes in force. `source` is "issue-23" for the 38 disguises written
from the issue's findings (it names the kinds of disguise, not the strings), "own" for the
rest. Regenerate (deterministic, no randomness):

    PYTHONPATH=. .venv/bin/python tests/assets/secrets/make_disguises.py
"""

from __future__ import annotations

import base64
import codecs
import json
import urllib.parse
from pathlib import Path
from typing import Any

from tests.contract.secret_evasions import bold, full_width

OUT = Path(__file__).with_name("disguises.json")

AWS = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GITHUB = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
PEM = "-----BEGIN RSA PRIVATE KEY-----"
JWT_HEADER = "eyJhbGciOiJIUzI1NiJ9"
JWT_NONE = "eyJhbGciOiJub25lIn0"
JWT_PAYLOAD = "eyJzdWIiOiIxMjM0NTY3ODkwIn0"
JWT_SIG = "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
ZWSP, ZWJ, SHY = "\u200b", "\u200d", "\u00ad"
TENANT = ["\\bACME-DAC-[0-9]{6}\\b"]


def monospace(text: str) -> str:
    out = []
    for c in text:
        if "a" <= c <= "z":
            out.append(chr(0x1D68A + ord(c) - ord("a")))
        elif "A" <= c <= "Z":
            out.append(chr(0x1D670 + ord(c) - ord("A")))
        else:
            out.append(c)
    return "".join(out)


CYRILLIC = str.maketrans("aceopxyAEKMHOPCTBX", "асеорхуАЕКМНОРСТВХ")
GREEK = str.maketrans("AEKMNOPTXYIZBH", "ΑΕΚΜΝΟΡΤΧΥΙΖΒΗ")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def entities(text: str) -> str:
    return "".join(f"&#{ord(c)};" for c in text)


def groups(text: str, size: int, sep: str) -> str:
    return sep.join(text[i : i + size] for i in range(0, len(text), size))


def entry(source: str, family: str, name: str, *texts: str, **extra: Any) -> dict[str, Any]:
    return {"id": name, "source": source, "family": family, "texts": list(texts), **extra}


def issue_23() -> list[dict[str, Any]]:
    """The 38 disguises of issue 23's finding 1 (8 refused then, 30 stored)."""
    i = "issue-23"
    return [
        # Refused by the earlier detector too.
        entry(i, "zero-width", "zwsp_in_password", f"pass{ZWSP}word=hunter22"),
        entry(i, "zero-width", "zwj_in_aws_key", f"key {AWS[:8]}{ZWJ}{AWS[8:]}"),
        entry(i, "math-letters", "bold_password", bold("password") + "=hunter22"),
        entry(i, "math-letters", "bold_github_token", bold(GITHUB[:4]) + GITHUB[4:]),
        entry(i, "full-width", "full_width_hyphens_pem", PEM.replace("-", "\uff0d")),
        entry(i, "full-width", "full_width_aws", full_width(AWS)),
        entry(
            i, "in-refs", "secret_in_locator", "See the ticket.", locators=["token=abc123def456"]
        ),
        entry(
            i,
            "nested-keys",
            "nested_json_password",
            '{"db": {"credentials": {"password": "Tr0ub4dor&3"}}}',
        ),
        # Stored by the earlier detector.
        entry(i, "homoglyphs", "cyrillic_a_in_password", "pаssword=hunter22"),
        entry(i, "homoglyphs", "cyrillic_A_in_akia", "АKIA" + AWS[4:]),
        entry(i, "homoglyphs", "cyrillic_o_in_token", "tоken: 9f8a7b6c5d4e3f2a1b0c"),
        entry(i, "homoglyphs", "greek_in_akia", AWS.translate(GREEK)),
        entry(i, "encodings", "base64_password", "config blob " + b64("password=hunter22")),
        entry(i, "encodings", "base64_aws_key", "backup note " + b64(f"aws {AWS}")),
        entry(i, "encodings", "hex_pem_header", "dump: " + PEM.encode().hex()),
        entry(
            i,
            "encodings",
            "rot13_password",
            "obfuscated: " + codecs.encode("password=hunter22", "rot13"),
        ),
        entry(
            i,
            "encodings",
            "url_encoded_password",
            "q=" + urllib.parse.quote("password=hunter22", safe=""),
        ),
        entry(i, "encodings", "html_entities_password", entities("password") + "=hunter22"),
        entry(
            i,
            "splits",
            "aws_across_components",
            "key part one " + AWS[:10],
            AWS[10:] + " is part two",
        ),
        entry(
            i,
            "splits",
            "aws_across_text_and_locator",
            "the key starts " + AWS[:12],
            locators=[AWS[12:]],
        ),
        entry(i, "splits", "aws_in_groups_of_4", groups(AWS, 4, " ")),
        entry(i, "splits", "aws_with_hyphens", groups(AWS, 4, "-")),
        entry(i, "splits", "aws_lower_cased", "key " + AWS.lower()),
        entry(i, "shape-misses", "password_newline_equals", "password\n= hunter22"),
        entry(
            i, "shape-misses", "password_colon_passphrase", "password: correcthorsebatterystaple"
        ),
        entry(i, "shape-misses", "my_password_is", "FYI my password is Tr0ub4dor&3 for the portal"),
        entry(i, "shape-misses", "pw_equals", "pw=hunter22"),
        entry(i, "shape-misses", "spaceless_pem_header", "-----BEGINRSAPRIVATEKEY-----"),
        entry(i, "shape-misses", "unsigned_jwt", f"{JWT_NONE}.{JWT_PAYLOAD}."),
        entry(
            i,
            "shape-misses",
            "userinfo_without_scheme",
            "connect with admin:p4ssw0rd@db.internal:5432",
        ),
        entry(
            i,
            "tenant-patterns",
            "tenant_space_for_hyphen",
            "door code ACME DAC 123456",
            extra_patterns=TENANT,
        ),
        entry(
            i,
            "tenant-patterns",
            "tenant_underscore_for_hyphen",
            "door code ACME_DAC_123456",
            extra_patterns=TENANT,
        ),
        entry(i, "homoglyphs", "cyrillic_s_in_secret", "ѕecret=Zx9vQ2mL"),
        entry(i, "encodings", "base64_github_token", b64(GITHUB)),
        entry(
            i, "encodings", "url_encoded_aws", "see " + urllib.parse.quote(f"key={AWS}", safe="")
        ),
        entry(i, "splits", "aws_groups_lower_hyphens", groups(AWS.lower(), 4, "-")),
        entry(i, "shape-misses", "password_is_colon", "The password is: Summer2024!"),
        entry(i, "splits", "password_across_components", "reset done, pass", "word=hunter22"),
    ]


def own() -> list[dict[str, Any]]:
    """Further disguises of each family, and the data set's shapes disguised."""
    o = "own"
    return [
        entry(o, "homoglyphs", "greek_rho_password", "\u03a1ASSWORD=hunter22"),
        entry(o, "homoglyphs", "cyrillic_github_prefix", "gһp_" + GITHUB[4:]),
        entry(o, "homoglyphs", "monospace_password", monospace("password") + ": Sommer2024!"),
        entry(
            o, "homoglyphs", "cyrillic_bearer", "Authorization: Веаrеr " + "a1b2c3d4e5f6a7b8c9d0"
        ),
        entry(o, "homoglyphs", "mixed_scripts_api_key", "аpi_kеy = " + "9f8a7b6c5d4e3f2a"),
        entry(o, "homoglyphs", "cyrillic_pem", PEM.translate(CYRILLIC)),
        entry(o, "homoglyphs", "armenian_o_in_token", "t\u0585ken=abc123def456"),
        entry(o, "splits", "aws_across_three_components", AWS[:6], AWS[6:13], AWS[13:]),
        entry(
            o,
            "splits",
            "jwt_across_text_and_locator",
            f"token {JWT_HEADER}.",
            locators=[f"{JWT_PAYLOAD}.{JWT_SIG}"],
        ),
        entry(o, "splits", "pem_across_components", "-----BEGIN RSA PRIV", "ATE KEY-----"),
        entry(o, "splits", "aws_per_character_spaces", " ".join(AWS)),
        entry(o, "splits", "aws_dotted_groups", groups(AWS, 5, ".")),
        entry(o, "splits", "aws_across_lines", groups(AWS, 10, "\n")),
        entry(
            o, "splits", "github_across_locators", "see links", locators=[GITHUB[:20], GITHUB[20:]]
        ),
        entry(
            o,
            "encodings",
            "base64url_password",
            base64.urlsafe_b64encode(b"password=hunter22?>").decode(),
        ),
        entry(o, "encodings", "base64_json_secret", b64('{"client_secret": "Zx9vQ2mLp4"}')),
        entry(
            o,
            "encodings",
            "base64_of_url_encoded",
            b64(urllib.parse.quote("password=hunter22", safe="")),
        ),
        entry(
            o,
            "encodings",
            "backslash_x_hex",
            "bytes " + "".join(f"\\x{b:02x}" for b in b"password=hunter22"),
        ),
        entry(o, "encodings", "zero_x_hex", "".join(f"0x{b:02x}" for b in PEM.encode())),
        entry(
            o,
            "encodings",
            "html_hex_entities",
            "".join(f"&#x{ord(c):x};" for c in "token") + "=abc123def456",
        ),
        entry(o, "encodings", "html_named_equals", "password&equals;hunter22"),
        entry(
            o,
            "encodings",
            "url_encoded_full_width",
            urllib.parse.quote(full_width("password=hunter22"), safe=""),
        ),
        entry(o, "encodings", "rot13_aws_key", codecs.encode(AWS, "rot13")),
        entry(o, "encodings", "base64_pem", b64(PEM + "\nMIIEowIBAAKCAQEA")),
        entry(o, "encodings", "reversed_password", "password=hunter22"[::-1]),
        entry(o, "separators", "assignment_arrow", "password => hunter22"),
        entry(o, "separators", "walrus", "secret := Zx9vQ2mL"),
        entry(o, "separators", "xml_element", "<password>Summer2024!</password>"),
        entry(o, "separators", "yaml_quoted", "db:\n  password: 'changeme'"),
        entry(o, "reversed", "value_is_my_password", "Tr0ub4dor&3 is my password"),
        entry(o, "reversed", "json_value_then_key", '{"Summer2024!": "password"}'),
        entry(o, "json", "escaped_json", '{\\"password\\":\\"Tr0ub4dor&3\\"}'),
        entry(o, "json", "json_api_key", '{"apiKey": "a8f5f167f44f4964e6c998dee827110c"}'),
        entry(o, "multilingual", "german_passwort", "Mein Passwort: Sommer2024!"),
        entry(o, "multilingual", "french_mot_de_passe", "mot de passe : Soleil2024!"),
        entry(o, "multilingual", "spanish_contrasena", "la contraseña es Verano2024#"),
        entry(o, "multilingual", "russian_parol", "пароль: Zima2024!"),
        entry(o, "multilingual", "japanese_password", "パスワード：Tokyo2024!"),
        entry(o, "multilingual", "chinese_password", "密码是 Beijing2024"),
        entry(o, "multilingual", "korean_password", "비밀번호: Seoul2024!"),
        entry(o, "entropy", "api_key_then_hex", "api key 9f8a7b6c5d4e3f2a1b0c9d8e7f6a"),
        entry(o, "entropy", "secret_then_random", "the secret 4a7Fz9Qp2LmX8vR1tB6yW3"),
        entry(
            o,
            "data-set",
            "slack_webhook",
            "hook https://hooks.slack.com/services/T0ABCDEF1/B0ABCDEF2/" + "x1Y2z3" * 4,
        ),
        entry(
            o,
            "data-set",
            "stripe_live_full_width",
            full_width("sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"),
        ),
        entry(o, "data-set", "azure_account_key", "AccountKey=" + "A" * 43 + "b" * 43 + "=="),
        entry(o, "data-set", "telegram_bot_token", "bot 123456789:" + "AAF" + "x1Y2z3" * 5 + "ab"),
        entry(o, "data-set", "twilio_key", "SK" + "0123456789abcdef" * 2),
        entry(o, "data-set", "sendgrid_key", "SG." + "a" * 22 + "." + "b" * 43),
        entry(o, "data-set", "putty_key_file", "PuTTY-User-Key-File-2: ssh-rsa"),
        entry(
            o, "data-set", "npm_auth_token_line", "//registry.example/:_authToken=npm_" + "a1B2" * 9
        ),
        entry(
            o, "connection", "jdbc_password", "jdbc:postgresql://db/app?user=admin&password=s3cret!"
        ),
        entry(o, "connection", "odbc_string", "Server=db;User Id=sa;Password=Pa55w0rd;"),
        entry(o, "zero-width", "soft_hyphen_secret", f"sec{SHY}ret={SHY}Zx9vQ2mL"),
        entry(
            o,
            "in-refs",
            "secret_in_evidence_ref",
            "See evidence.",
            refs={"evidence_ref": "evidence:password=hunter22"},
        ),
    ]


def render() -> str:
    """The JSON text of disguises.json."""
    corpus = issue_23() + own()
    names = [e["id"] for e in corpus]
    if len(names) != len(set(names)):
        raise SystemExit("duplicate ids")
    return json.dumps(corpus, indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
