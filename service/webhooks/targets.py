"""Where a webhook may send: the operator's allowlist.

A target is an ``http`` or ``https`` URL without credentials. Every address its host resolves to
must be allowed: a public (globally routable) address while ``webhook_allow_public`` is on, or
an address inside one of ``webhook_allowed_networks``. Everything else is refused, private
ranges, loopback, link-local (169.254.169.254, the cloud metadata address, is one), carrier-grade
NAT, multicast and reserved ranges included, so that a comparison's writer cannot make the
service call into the operator's network. The check runs when a rule is created (a clear 422)
and again before each delivery, whose request then goes to the very address that was checked
(a name that resolves elsewhere the second time cannot slip past it).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
URL_MAX_CHARS = 2048


class TargetRefused(ValueError):
    """The URL is malformed, or an address of its host is not allowed."""


@dataclass(frozen=True)
class Allowlist:
    public: bool
    networks: tuple[IpNetwork, ...] = ()

    @classmethod
    def of(cls, public: bool, networks: Sequence[str]) -> Allowlist:
        return cls(public, tuple(ipaddress.ip_network(n, strict=False) for n in networks))

    def why_refused(self, address: IpAddress) -> str | None:
        """None when ``address`` is allowed, else why not."""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            return self.why_refused(address.ipv4_mapped)
        if any(address in network for network in self.networks):
            return None
        if address.is_global and not address.is_multicast:
            return None if self.public else "public addresses are not allowed"
        return ("it is not a public address (private, loopback, link-local, metadata or "
                "reserved ranges are refused unless the operator allows them)")


@dataclass(frozen=True)
class Target:
    """A checked URL and the address a request to it connects to."""

    url: str
    parts: SplitResult
    address: IpAddress

    @property
    def port(self) -> int:
        return self.parts.port or (443 if self.parts.scheme == "https" else 80)

    @property
    def pinned_url(self) -> str:
        """The URL with its host replaced by the checked address."""
        host = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return self.parts._replace(netloc=f"{host}:{self.port}").geturl()

    @property
    def host_header(self) -> str:
        return self.parts.netloc


def parse(url: str) -> SplitResult:
    """The URL's parts; TargetRefused when it is not an http(s) URL with a host and no
    credentials."""
    if len(url) > URL_MAX_CHARS:
        raise TargetRefused(f"the URL has {len(url)} characters; at most {URL_MAX_CHARS}")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise TargetRefused("the URL must start with http:// or https://")
    if not parts.hostname:
        raise TargetRefused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise TargetRefused("the URL must not hold credentials (the deliveries are signed)")
    if parts.fragment:
        raise TargetRefused("the URL must not have a fragment")
    try:
        parts.port  # noqa: B018 (raises on a port out of range)
    except ValueError as exc:
        raise TargetRefused(f"the URL's port is invalid: {exc}") from None
    return parts


def addresses(parts: SplitResult) -> list[IpAddress]:
    """What the URL's host resolves to (a literal address is itself); TargetRefused when it
    does not resolve."""
    host = parts.hostname or ""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, parts.port or None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise TargetRefused(f"the host {host!r} does not resolve: {exc}") from None
    unique = dict.fromkeys(ipaddress.ip_address(info[4][0].split("%")[0]) for info in found)
    return list(unique)


def check(url: str, allowlist: Allowlist) -> Target:
    """The target of ``url`` when every address of its host is allowed; TargetRefused
    (with the address and why) when one is not."""
    parts = parse(url)
    found = addresses(parts)
    for address in found:
        reason = allowlist.why_refused(address)
        if reason is not None:
            raise TargetRefused(f"the host {parts.hostname!r} has the address {address}: "
                                f"{reason}; the operator allows more with "
                                "MODELCOMPARE_WEBHOOK_ALLOWED_NETWORKS")
    return Target(url, parts, found[0])
