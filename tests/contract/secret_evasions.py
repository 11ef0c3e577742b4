"""A corpus of secret shapes disguised by Unicode, and of legitimate text that must pass.

Shared by tests/contract/test_secret_evasions.py (the detector) and
tests/adversarial/test_secret_evasion.py (the real server). Escapes are spelled out so a
reader sees what hides where.
"""

from __future__ import annotations

ZWSP = "\u200b"  # zero-width space
ZWNJ = "\u200c"  # zero-width non-joiner
ZWJ = "\u200d"  # zero-width joiner
LRM = "\u200e"  # left-to-right mark
WJ = "\u2060"  # word joiner
INVISIBLE_TIMES = "\u2062"
BOM = "\ufeff"  # zero-width no-break space
SHY = "\u00ad"  # soft hyphen
MVS = "\u180e"  # Mongolian vowel separator
RLO, PDF = "\u202e", "\u202c"  # right-to-left override ... pop directional formatting
LRI, PDI = "\u2066", "\u2069"  # left-to-right isolate ... pop directional isolate
VS16 = "\ufe0f"  # variation selector 16
TAG_A = "\U000e0041"  # TAG LATIN CAPITAL LETTER A
HANGUL_FILLER = "\u3164"
ACUTE, DIAERESIS, LOW_LINE = "\u0301", "\u0308", "\u0332"  # combining marks
NBSP, EN_SPACE, IDEOGRAPHIC_SPACE, OGHAM_SPACE = "\u00a0", "\u2002", "\u3000", "\u1680"
LINE_SEPARATOR = "\u2028"
EN_DASH = "\u2013"

GITHUB_BODY = "a1B2" * 9
JWT = (
    "eyJhbGciOiJIUzI1NiJ9",
    "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
)


def full_width(text: str) -> str:
    """ASCII letters, digits and punctuation as their full-width forms (U+FF01..U+FF5E)."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def bold(text: str) -> str:
    """Letters as MATHEMATICAL BOLD letters (U+1D400..), digits left as they are."""
    out = []
    for c in text:
        if "A" <= c <= "Z":
            out.append(chr(0x1D400 + ord(c) - ord("A")))
        elif "a" <= c <= "z":
            out.append(chr(0x1D41A + ord(c) - ord("a")))
        else:
            out.append(c)
    return "".join(out)


def interleave(text: str, hidden: str) -> str:
    """`hidden` between every two characters of `text`."""
    return hidden.join(text)


# (name, text): each one reads as a secret to a human and must be refused.
EVASIONS: list[tuple[str, str]] = [
    # Zero-width and format characters inside the key name or the prefix.
    ("zwj_in_password", f"pass{ZWJ}word=hunter2x"),
    ("zwsp_in_password", f"pass{ZWSP}word = hunter2x"),
    ("word_joiner_around_equals", f"password{WJ}={WJ}hunter2"),
    ("soft_hyphen_in_api_key", f"api{SHY}_key=abcd1234"),
    ("mongolian_vowel_separator", f"password{MVS}=hunter2"),
    ("zwj_in_sk_prefix", f"s{ZWJ}k-proj-{'a' * 20}1"),
    ("zwnj_before_sk_dash", f"sk{ZWNJ}-ant-api03-{'Zz9' * 10}"),
    ("zwsp_in_ghp_prefix", f"gh{ZWSP}p_{GITHUB_BODY}"),
    ("zwsp_throughout_github_token", "ghp_" + interleave(GITHUB_BODY, ZWSP)),
    ("bom_in_akia", f"AK{BOM}IAIOSFODNN7EXAMPLE"),
    ("invisible_times_in_aws_key", "AKIA" + interleave("IOSFODNN7EXAMPLE", INVISIBLE_TIMES)),
    ("zwsp_around_jwt_dots", f"{JWT[0]}{ZWSP}.{ZWSP}{JWT[1]}{ZWSP}.{JWT[2]}"),
    ("zwj_in_pem_header", f"-----BEGIN{ZWJ} RSA PRIVATE KEY-----"),
    ("soft_hyphen_in_pem_header", f"-----BEGIN PRI{SHY}VATE KEY-----"),
    ("zwsp_in_connection_string", f"postgres://admin:s3cr{ZWSP}3t@db.internal:5432/app"),
    ("hangul_filler_in_password", f"pass{HANGUL_FILLER}word=hunter2"),
    ("tag_character_in_password", f"pass{TAG_A}word=hunter2"),
    ("variation_selector_in_password", f"p{VS16}assword=hunter2"),
    # Bidi controls.
    ("right_to_left_override", f"{RLO}password=hunter2{PDF}"),
    ("isolate_inside_password", f"pass{LRI}word{PDI}=hunter2"),
    ("lrm_inside_sk_key", f"sk-{LRM}proj-{'a' * 20}1"),
    # Full-width and mathematical letters and digits.
    ("full_width_password", full_width("password=hunter2")),
    ("full_width_aws_key", full_width("AKIAIOSFODNN7EXAMPLE")),
    ("full_width_github_token", full_width(f"ghp_{GITHUB_BODY}")),
    ("full_width_jwt_dots", "\uff0e".join(JWT)),
    ("full_width_pem_header", full_width("-----BEGIN PRIVATE KEY-----")),
    ("full_width_mixed_case", full_width("PaSsWoRd=Xyz123")),
    ("bold_password", bold("password") + "=hunter2"),
    ("bold_authorization_header", bold("Authorization") + ": Bearer abcdef123456"),
    # Combining characters.
    ("acute_on_password", f"p{ACUTE}assword=hunter2"),
    ("diaeresis_on_password", f"pa{DIAERESIS}ssword=hunter2"),
    ("precomposed_accents", "pässwörd=hunter2x"),
    ("low_line_under_aws_key", "AKIA" + interleave("IOSFODNN7EXAMPLE", LOW_LINE) + LOW_LINE),
    ("combining_in_token_body", "ghp_" + interleave(GITHUB_BODY, ACUTE)),
    # Confusable whitespace and dashes.
    ("nbsp_around_equals", f"password{NBSP}={NBSP}hunter2"),
    ("ideographic_space_bearer", f"Authorization:{IDEOGRAPHIC_SPACE}Bearer{EN_SPACE}abcdef123456"),
    ("ogham_space_bearer", f"Authorization:{OGHAM_SPACE}Bearer abcdef123456"),
    ("env_line_after_line_separator", f"notes{LINE_SEPARATOR}GITLAB_PASS=x"),
    ("env_line_after_lone_cr", "notes\rGITLAB_PASS=x"),
    ("en_dash_pem_header", f"{EN_DASH * 5}BEGIN PRIVATE KEY{EN_DASH * 5}"),
    # Mixed case where the built-in shape is case-insensitive.
    ("mixed_case_password", "PaSsWoRd=hunter2"),
    ("mixed_case_api_key_quoted", "Api_KEY: 'abcd1234'"),
    ("mixed_case_bearer_header", "AUTHORIZATION: bearer abcdef123456"),
    ("mixed_case_cookie_with_zwsp", f"cOO{ZWSP}KIE: session=abc123"),
]

# (name, text): legitimate multilingual text that must still be accepted.
LEGITIMATE: list[tuple[str, str]] = [
    ("chinese", "会议决定：退款已批准，密码策略要求14个字符。"),
    (
        "japanese_full_width",
        "パスワードは金庫に保管します。トークン＝バケット方式、２０２６年８月。",
    ),
    ("korean", "비밀번호 정책은 14자 이상입니다."),
    ("full_width_prose", full_width("token") + IDEOGRAPHIC_SPACE + full_width("bucket")),
    ("arabic_with_joiners", f"تمت الموافقة{ZWJ} على الاسترداد{ZWNJ} اليوم"),
    ("persian_with_zwnj", f"می{ZWNJ}خواهم رمز عبور را تغییر دهم"),
    ("hindi", "पासवर्ड नीति में 14 अक्षर आवश्यक हैं।"),
    ("thai_with_zwsp", f"รหัสผ่าน{ZWSP}ต้อง{ZWSP}มี{ZWSP}14{ZWSP}ตัว"),
    ("hebrew_with_bidi_marks", f"\u200fשלום{LRM} ticket-42 \u200fתודה"),
    ("greek", "Ο κωδικός πρόσβασης αλλάζει κάθε 90 ημέρες."),
    ("french_accents", "Le mot de passe doit être changé ; café crème à 14 h."),
    ("german_soft_hyphens", f"Pass{SHY}wort{SHY}richt{SHY}linie: 14 Zeichen, Token{SHY}-Eimer."),
    ("family_emoji_zwj", f"Family trip 👨{ZWJ}👩{ZWJ}👧{ZWJ}👦 approved ✔{VS16}"),
    ("rainbow_flag_and_skin_tone", f"Great work 🏳{VS16}{ZWJ}🌈 👍🏽 on ticket 42"),
    ("zwj_between_words", f"The token{ZWJ} bucket holds 10 tokens{ZWJ} per second."),
    ("nbsp_prose", f"The API key rotation{NBSP}schedule is quarterly."),
    ("math_with_invisible_times", f"area = a{INVISIBLE_TIMES}b for the rate{NBSP}limiter"),
    ("en_dash_prose", f"Decision {EN_DASH} the password policy stays at 14 characters."),
]
