"""Write ordinary.json: support-ticket captures that hold no secret, in 15 languages.

The texts are what a support memory really stores, including the near-misses a secret
detector trips over: order and tracking numbers, UUIDs, commit hashes and digests in URLs,
base64 images, IBAN-like account text, booking codes, version strings, and sentences that
talk ABOUT passwords, tokens and keys without holding one. Deterministic (seeded), so the
committed file is reproducible:

    .venv/bin/python tests/assets/secrets/make_ordinary.py
"""

from __future__ import annotations

import base64
import json
import random
import struct
import zlib
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("ordinary.json")
SAMPLES = 1200
SEED = 23

SENTENCES: dict[str, list[str]] = {
    "en": [
        "Customer reports order {order} arrived damaged; refund of {amount} approved.",
        "I forgot my password and the reset link from {date} has expired.",
        "The password must contain at least 12 characters and 1 digit.",
        "Password: reset via the self-service portal, see {url}.",
        "Token: expired, customer asked for a new verification email.",
        "The API key rotation is scheduled for {date}; no action needed by the customer.",
        "Our rate limiter uses a token bucket with 10 tokens per second.",
        "The secret is patience: the carrier needs 5 business days.",
        "Tracking number {tracking} shows the parcel in Memphis.",
        "Trace id {uuid}, request id {uuid2}.",
        "Fixed in {commit_url} and released as {version}.",
        "Payment to IBAN {iban} failed twice, bank says account is fine.",
        "Booking ref: {booking}, seat 14C, contact {email}.",
        "The customer attached a screenshot: {image}",
        "SKU: {sku} is out of stock until {date}.",
        "Call back on {phone} after 3pm; mention ticket {ticket}.",
        "Error ERR_CONN_RESET when the app syncs with {ip}.",
        "Invoice {invoice} lists {amount}; the checksum sha256:{sha256} matches.",
        "Set max_tokens=1500 for the summarizer and key = customer_id for the join.",
        "pass: 3 of 4 checks, the failing one is the address check.",
        "Her password is case-sensitive, she was typing it in caps.",
        "The secret santa order {order} was split into two parcels.",
        "Coupon code SPRING{year} applied, total now {amount}.",
        "Colour #FF5733 is wrong in the invoice template {version}.",
        "Download link: {url} (expires in 7 days).",
    ],
    "de": [
        "Bestellung {order} kam beschädigt an; Erstattung von {amount} freigegeben.",
        "Passwort vergessen, der Link vom {date} ist abgelaufen.",
        "Passwort: zurückgesetzt am {date} über das Kundenportal.",
        "Das Kennwort muss mindestens 12 Zeichen haben.",
        "Sendungsnummer {tracking}, Zustellung verzögert sich.",
        "Überweisung an {iban} wurde zurückgebucht.",
        "Der API-Schlüssel wird am {date} turnusmäßig erneuert.",
        "Rückruf unter {phone}, Ticket {ticket}.",
        "Behoben in {commit_url}, Version {version}.",
        "Asiatischerlebensmittelhandel Müller meldet eine Lieferverzögerung.",
    ],
    "fr": [
        "La commande {order} est arrivée abîmée ; remboursement de {amount} accordé.",
        "Mot de passe oublié, le lien du {date} a expiré.",
        "mot de passe : réinitialisé par le support le {date}.",
        "Numéro de suivi {tracking}, livraison prévue demain.",
        "Virement vers {iban} refusé par la banque.",
        "Le jeton de vérification a expiré, nouvel e-mail envoyé à {email}.",
        "Corrigé dans {commit_url} ({version}).",
        "Rappeler au {phone}, ticket {ticket}.",
    ],
    "es": [
        "El pedido {order} llegó dañado; reembolso de {amount} aprobado.",
        "Olvidé mi contraseña y el enlace del {date} caducó.",
        "contraseña: cambiada por el cliente en el portal.",
        "Número de seguimiento {tracking}, entrega mañana.",
        "Transferencia a {iban} rechazada.",
        "La clave de API se renueva el {date}.",
        "Corregido en {commit_url}.",
    ],
    "pt": [
        "O pedido {order} chegou danificado; reembolso de {amount} aprovado.",
        "Esqueci a senha e o link de {date} expirou.",
        "senha: redefinida pelo suporte.",
        "Código de rastreio {tracking}.",
        "Transferência para {iban} devolvida.",
    ],
    "it": [
        "L'ordine {order} è arrivato danneggiato; rimborso di {amount} approvato.",
        "Ho dimenticato la password e il link del {date} è scaduto.",
        "Numero di tracciamento {tracking}, consegna domani.",
        "Bonifico su {iban} respinto dalla banca.",
    ],
    "nl": [
        "Bestelling {order} is beschadigd aangekomen; terugbetaling {amount}.",
        "Wachtwoord vergeten, de link van {date} is verlopen.",
        "Trackingnummer {tracking}.",
    ],
    "pl": [
        "Zamówienie {order} dotarło uszkodzone; zwrot {amount} zatwierdzony.",
        "Zapomniałem hasła, link z {date} wygasł.",
        "hasło: zmienione przez klienta.",
        "Numer przesyłki {tracking}.",
    ],
    "ru": [
        "Заказ {order} пришёл повреждённым; возврат {amount} одобрен.",
        "Забыл пароль, ссылка от {date} устарела.",
        "пароль: изменён клиентом через портал.",
        "Трек-номер {tracking}, доставка завтра.",
        "Перевод на {iban} отклонён банком.",
    ],
    "ja": [
        "注文{order}の商品が破損して届きました。{amount}の返金を承認しました。",
        "パスワードを忘れました。{date}のリンクは期限切れです。",
        "パスワードは金庫に保管します。トークン＝バケット方式、２０２６年８月。",
        "追跡番号{tracking}、明日配達予定です。",
    ],
    "zh": [
        "订单{order}到货时已损坏，已批准退款{amount}。",
        "忘记密码了，{date}的链接已过期。",
        "密码是区分大小写的，请注意。",
        "快递单号{tracking}，明天送达。",
    ],
    "ko": [
        "주문 {order} 상품이 파손되어 도착했습니다. {amount} 환불 승인.",
        "비밀번호를 잊어버렸습니다. {date} 링크가 만료되었습니다.",
        "비밀번호 정책은 14자 이상입니다.",
        "운송장 번호 {tracking}.",
    ],
    "ar": [
        "وصل الطلب {order} تالفًا؛ تمت الموافقة على استرداد {amount}.",
        "نسيت كلمة المرور وانتهت صلاحية الرابط بتاريخ {date}.",
        "رقم التتبع {tracking}.",
    ],
    "tr": [
        "Sipariş {order} hasarlı geldi; {amount} iade onaylandı.",
        "Şifremi unuttum, {date} tarihli bağlantının süresi doldu.",
        "şifre: müşteri tarafından değiştirildi.",
        "Kargo takip numarası {tracking}.",
    ],
    "sv": [
        "Order {order} kom skadad; återbetalning på {amount} godkänd.",
        "Glömt lösenordet, länken från {date} har gått ut.",
        "Spårningsnummer {tracking}.",
    ],
}


def _png(rng: random.Random) -> bytes:
    """A small valid PNG of random pixels (a screenshot pasted into a ticket)."""
    width = height = rng.randint(6, 20)
    raw = b"".join(b"\x00" + rng.randbytes(width * 3) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _slots(rng: random.Random) -> dict[str, str]:
    hexdigits = "0123456789abcdef"
    alnum = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"

    def pick(alphabet: str, n: int) -> str:
        return "".join(rng.choice(alphabet) for _ in range(n))

    def uuid() -> str:
        h = pick(hexdigits, 32)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"

    year = rng.randint(2024, 2027)
    return {
        "order": rng.choice(
            [
                f"ORD-{year}-{rng.randint(0, 999999):06d}",
                f"#{pick(alnum, 10)}",
                f"{rng.randint(10**9, 10**10)}",
            ]
        ),
        "amount": rng.choice(
            [
                f"{rng.randint(5, 900)}.{rng.randint(0, 99):02d} EUR",
                f"${rng.randint(5, 900)}",
                f"¥{rng.randint(500, 90000)}",
            ]
        ),
        "date": f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "year": str(year),
        "tracking": rng.choice(
            [
                f"1Z{pick(alnum, 16)}",
                f"JJD{rng.randint(10**17, 10**18)}",
                f"{pick(alnum, 2)}{rng.randint(10**8, 10**9)}DE",
            ]
        ),
        "uuid": uuid(),
        "uuid2": uuid(),
        "commit_url": f"https://git.example.com/acme/app/commit/{pick(hexdigits, 40)}",
        "url": rng.choice(
            [
                f"https://support.example.com/kb/{rng.randint(100, 9999)}"
                f"?lang=en&ref={pick(alnum, 8)}",
                f"https://cdn.example.com/files/{pick(hexdigits, 64)}/report.pdf",
                f"https://shop.example.com/track?id={uuid()}",
            ]
        ),
        "version": f"v{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}"
        + rng.choice(["", "-rc1", "+build.7"]),
        "iban": rng.choice(
            [
                f"DE{rng.randint(10, 99)} "
                + " ".join(str(rng.randint(1000, 9999)) for _ in range(4))
                + f" {rng.randint(10, 99)}",
                f"FR76{rng.randint(10**22, 10**23)}",
                f"GB{rng.randint(10, 99)}NWBK{rng.randint(10**13, 10**14)}",
            ]
        ),
        "booking": pick(alnum, 6),
        "email": f"{rng.choice(['alice', 'bob', 'kim', 'jose'])}.{pick('abcdefgh', 4)}@example.com",
        "image": "data:image/png;base64," + base64.b64encode(_png(rng)).decode(),
        "sku": f"{pick(alnum, 2)}-{rng.randint(1000, 9999)}-{pick(alnum, 2)}",
        "phone": f"+{rng.randint(1, 49)} {rng.randint(100, 999)} {rng.randint(1000000, 9999999)}",
        "ticket": f"T-{rng.randint(1000, 99999)}",
        "ip": f"{rng.randint(11, 223)}.{rng.randint(0, 255)}."
        f"{rng.randint(0, 255)}.{rng.randint(1, 254)}",
        "invoice": f"INV/{year}/{rng.randint(1, 99999):05d}",
        "sha256": pick(hexdigits, 64),
    }


def _sample(rng: random.Random, index: int) -> dict[str, Any]:
    language = rng.choice(sorted(SENTENCES))
    texts = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        own = SENTENCES[language]
        pool = own + SENTENCES["en"] if rng.random() < 0.3 else own
        sentences = [rng.choice(pool).format(**_slots(rng)) for _ in range(rng.randint(2, 12))]
        texts.append(" ".join(sentences))
    slots = _slots(rng)
    locators = rng.sample(
        [
            slots["ticket"],
            slots["commit_url"],
            slots["url"],
            slots["order"],
            f"mailto:{slots['email']}",
        ],
        rng.randint(1, 2),
    )
    return {"id": f"ordinary-{index:04d}", "family": language, "texts": texts, "locators": locators}


def render() -> str:
    """The JSON text of ordinary.json."""
    rng = random.Random(SEED)
    corpus = [_sample(rng, index) for index in range(SAMPLES)]
    return json.dumps(corpus, indent=0, ensure_ascii=False) + "\n"


def main() -> None:
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
