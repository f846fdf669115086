"""Signatures: HMAC-SHA256 of "<t>." + body, checked against the secret, the body as received
and the time."""

from __future__ import annotations

import hashlib
import hmac

from modelcompare.service.webhooks.signing import new_secret, sign, verify

BODY = b'{"type":"event","event":{"id":"c:3:promote"}}'


def test_a_signature_is_hmac_sha256_of_the_timestamp_and_body() -> None:
    secret = new_secret()
    header = sign(secret, BODY, timestamp=1_700_000_000)
    expected = hmac.new(secret.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"
    assert verify(secret, header, BODY, now=1_700_000_100)


def test_a_changed_body_another_secret_or_an_old_signature_fails() -> None:
    secret = new_secret()
    header = sign(secret, BODY, timestamp=1_700_000_000)
    assert not verify(secret, header, BODY.replace(b"3", b"4"), now=1_700_000_000)
    assert not verify(new_secret(), header, BODY, now=1_700_000_000)
    assert not verify(secret, header, BODY, now=1_700_000_301)  # past the 300 s tolerance
    assert verify(secret, header, BODY, tolerance=400, now=1_700_000_301)
    assert not verify(secret, "v1=abc", BODY) and not verify(secret, "t=x,v1=abc", BODY)


def test_any_of_several_signatures_may_match() -> None:
    old, new = new_secret(), new_secret()
    assert old != new and old.startswith("whsec_") and len(old) == 6 + 64
    header = sign(new, BODY, timestamp=1_700_000_000)
    both = f"{header},v1={sign(old, BODY, timestamp=1_700_000_000).split('v1=')[1]}"
    assert verify(old, both, BODY, now=1_700_000_000)
    assert verify(new, both, BODY, now=1_700_000_000)
