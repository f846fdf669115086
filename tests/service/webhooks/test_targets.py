"""The operator's allowlist: public addresses (while allowed) and the networks listed; every
other address, private ranges and the metadata address included, is refused with the reason."""

from __future__ import annotations

import ipaddress
import re

import pytest

from modelcompare.service.webhooks.targets import (
    URL_MAX_CHARS,
    Allowlist,
    TargetRefused,
    check,
    parse,
)

DEFAULT = Allowlist.of(True, [])


@pytest.mark.parametrize("address", [
    "10.0.0.1", "172.16.5.4", "192.168.1.1", "127.0.0.1", "169.254.169.254", "100.64.0.1",
    "0.0.0.0", "224.0.0.1", "::1", "fe80::1", "fd00:ec2::254", "::ffff:10.0.0.1",
    "::ffff:169.254.169.254", "240.0.0.1"])
def test_non_public_addresses_are_refused_by_default(address: str) -> None:
    parsed = ipaddress.ip_address(address)
    assert DEFAULT.why_refused(parsed) is not None
    reason = f"address {re.escape(str(parsed))}: it is not a public"
    with pytest.raises(TargetRefused, match=reason):
        check(f"http://{address if ':' not in address else f'[{address}]'}/hook", DEFAULT)


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_are_allowed_unless_the_operator_says_otherwise(address: str) -> None:
    parsed = ipaddress.ip_address(address)
    assert DEFAULT.why_refused(parsed) is None
    assert Allowlist.of(False, []).why_refused(parsed) == "public addresses are not allowed"


def test_listed_networks_are_allowed_and_only_they() -> None:
    allowlist = Allowlist.of(False, ["127.0.0.1/32", "10.1.0.0/16"])
    assert allowlist.why_refused(ipaddress.ip_address("127.0.0.1")) is None
    assert allowlist.why_refused(ipaddress.ip_address("10.1.200.3")) is None
    assert allowlist.why_refused(ipaddress.ip_address("10.2.0.1")) is not None
    assert allowlist.why_refused(ipaddress.ip_address("127.0.0.2")) is not None
    target = check("http://127.0.0.1:8123/hook?x=1", allowlist)
    assert target.pinned_url == "http://127.0.0.1:8123/hook?x=1"
    assert target.host_header == "127.0.0.1:8123"


def test_a_name_is_checked_by_every_address_it_resolves_to() -> None:
    with pytest.raises(TargetRefused, match="'localhost' has the address"):
        check("http://localhost:9/hook", DEFAULT)
    target = check("https://localhost/hook", Allowlist.of(False, ["127.0.0.0/8", "::1/128"]))
    assert target.port == 443 and target.host_header == "localhost"
    assert target.pinned_url in ("https://127.0.0.1:443/hook", "https://[::1]:443/hook")


def test_an_ipv6_target_is_pinned_in_brackets() -> None:
    target = check("http://[::1]:81/x", Allowlist.of(False, ["::1/128"]))
    assert target.pinned_url == "http://[::1]:81/x"


@pytest.mark.parametrize(("url", "reason"), [
    ("ftp://example.com/x", "http:// or https://"),
    ("http:///x", "no host"),
    ("https://user:pw@example.com/x", "credentials"),
    ("https://example.com/x#part", "fragment"),
    ("https://example.com:99999/x", "port"),
    ("https://example.com/" + "a" * URL_MAX_CHARS, "characters"),
])
def test_malformed_urls_are_refused(url: str, reason: str) -> None:
    with pytest.raises(TargetRefused, match=reason):
        parse(url)


def test_a_host_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(TargetRefused, match="does not resolve"):
        check("http://no-such-host.invalid/hook", DEFAULT)
