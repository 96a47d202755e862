"""The address guard: may the sidecar connect to this URL?

A remote agent's URL comes from an operator, and the URLs in its card from the remote itself; neither
may make the sidecar reach into the network it runs in (A2A specification, section 13.2). So before any
connection the host name is resolved and every address it resolves to must be public, unless the name,
the address or a network containing it is on the allow-list (NRLLM_REMOTE_ALLOW). The A2A client checks
again the address a socket really connected to, so a name that resolves differently the second time
(DNS rebinding) gains nothing.
"""

import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from sidecar.delegation.types import RemoteError
from sidecar.domain.errors import SidecarError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressRefused(SidecarError, RemoteError):
    """The sidecar will not connect there. Nothing was sent. A RemoteError too, so that a client call
    refused by the guard fails the way any unreachable peer does."""


class AllowList:
    """Host names, addresses and networks the operator lets the sidecar reach although not public."""

    def __init__(self, entries: Iterable[str] = ()):
        self.names: set[str] = set()
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            if "/" in entry:
                try:
                    self.networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError:
                    raise ValueError(f"NRLLM_REMOTE_ALLOW: {entry!r} is not a network") from None
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry.strip("[]")))
            except ValueError:
                self.names.add(_name(entry))

    @classmethod
    def of(cls, allow: "AllowList | Iterable[str] | None") -> "AllowList":
        return allow if isinstance(allow, AllowList) else cls(allow or ())

    def allows_name(self, host: str) -> bool:
        return _name(host) in self.names

    def allows_address(self, address: IPAddress) -> bool:
        return any(address.version == net.version and address in net for net in self.networks)


def _name(host: str) -> str:
    return host.strip().rstrip(".").lower()


def _unmapped(address: IPAddress) -> IPAddress:
    # ::ffff:10.0.0.1 reaches 10.0.0.1: judge (and allow) the IPv4 address it carries.
    if address.version == 6 and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def not_public(address: IPAddress) -> str | None:
    """Why an address is not a public one, or None when it is."""
    address = _unmapped(address)
    for kind in ("loopback", "unspecified", "link_local", "multicast", "private", "reserved"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    if not address.is_global:
        return "not global"  # e.g. the carrier-grade NAT range 100.64.0.0/10
    return None


def check_addresses(host: str, addresses: Iterable[IPAddress], allow: "AllowList | Iterable[str] | None") -> None:
    """Refuse when any address the host resolved to is not public and not allow-listed."""
    allow = AllowList.of(allow)
    if allow.allows_name(host):
        return
    for address in map(_unmapped, addresses):
        reason = not_public(address)
        if reason and not allow.allows_address(address):
            shown = host if _same_address(host, address) else f"{host} ({address})"
            raise AddressRefused(
                f"refusing to connect to {shown}: the address is {reason} and not on NRLLM_REMOTE_ALLOW"
            )


def _same_address(host: str, address: IPAddress) -> bool:
    try:
        return _unmapped(ipaddress.ip_address(host)) == address
    except ValueError:
        return False


def parse_url(url: str) -> tuple[str, int]:
    """The host and port of an http or https URL; AddressRefused for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise AddressRefused(f"refusing to connect to {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise AddressRefused(f"refusing to connect to {url!r}: only http and https URLs are allowed")
    if not parts.hostname:
        raise AddressRefused(f"refusing to connect to {url!r}: the URL names no host")
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise AddressRefused(f"cannot connect to {host}: the name does not resolve ({exc})") from None
    # The scope of a link-local IPv6 address (fe80::1%eth0) is not part of the address.
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def check_url(url: str, allow: "AllowList | Iterable[str] | None" = None) -> list[IPAddress]:
    """Resolve the URL's host and refuse it unless every address is public or allow-listed.

    Returns the addresses. Raises AddressRefused, before any connection, for a URL that is not http or
    https, a name that does not resolve, or an address the guard refuses."""
    host, port = parse_url(url)
    allow = AllowList.of(allow)
    if allow.allows_name(host):
        return []
    addresses = resolve(host, port)
    check_addresses(host, addresses, allow)
    return addresses
