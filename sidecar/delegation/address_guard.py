"""The address guard: may the sidecar connect to this URL?

A remote agent's URL comes from an operator, and the URLs in its card from the remote itself; neither
may make the sidecar reach into the network it runs in (A2A specification, section 13.2). So before any
connection the host name is resolved and every address it resolves to must be public, unless the name,
the address or a network containing it is on the allow-list (NRLLM_REMOTE_ALLOW). The A2A client checks
again the address a socket really connected to, so a name that resolves differently the second time
(DNS rebinding) gains nothing.
"""

import contextlib
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


# IPv6 forms that carry an IPv4 address, and so reach it through a translator or tunnel on the way. Those
# the ipaddress module has no helper for: IPv4-compatible (deprecated, RFC 4291), NAT64's well-known prefix
# (RFC 6052) and its local-use prefix (RFC 8215), read as a /96 with the IPv4 address in the last 32 bits.
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def carried_ipv4(address: IPAddress) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries (and so reaches), or () when it carries none.

    ::ffff:10.0.0.1 (mapped), ::10.0.0.1 (compatible), 2002:0a00:0001:: (6to4), 64:ff9b::10.0.0.1 and
    64:ff9b:1::10.0.0.1 (NAT64) carry one; a Teredo address (2001::/32) carries two, its server's and its
    client's, and reaches both. ::1 and :: are themselves (loopback, unspecified), not IPv4-compatible."""
    if address.version == 4:
        return ()
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if address.sixtofour is not None:
        return (address.sixtofour,)
    if address.teredo is not None:
        return address.teredo  # (server, client); the module undoes the client's inversion
    last_32_bits = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if any(address in network for network in _NAT64):
        return (last_32_bits,)
    if address in _IPV4_COMPATIBLE and not (address.is_loopback or address.is_unspecified):
        return (last_32_bits,)
    return ()


def _judged(address: IPAddress) -> tuple[IPAddress, ...]:
    # An address that carries IPv4 addresses is judged (and allowed) by them alone: 2002:7f00:1:: reaches
    # 127.0.0.1, and 2002:0808:0808:: reaches the public 8.8.8.8 however its own prefix is classified.
    return carried_ipv4(address) or (address,)


def not_public(address: IPAddress) -> str | None:
    """Why an address is not a public one, or None when it is."""
    for judged in _judged(address):
        for kind in ("loopback", "unspecified", "link_local", "multicast", "private", "reserved"):
            if getattr(judged, f"is_{kind}"):
                return kind.replace("_", "-")
        if not judged.is_global:
            return "not global"  # e.g. the carrier-grade NAT range 100.64.0.0/10
    return None


def check_addresses(host: str, addresses: Iterable[IPAddress], allow: "AllowList | Iterable[str] | None") -> None:
    """Refuse when any address the host resolved to is not public and not allow-listed (an address that
    carries IPv4 addresses: unless it is allow-listed itself, each IPv4 address in it must be public or
    allow-listed)."""
    allow = AllowList.of(allow)
    if allow.allows_name(host):
        return
    for address in addresses:
        if allow.allows_address(address):
            continue
        for judged in _judged(address):
            reason = not_public(judged)
            if reason and not allow.allows_address(judged):
                shown = host if _same_address(host, judged) else f"{host} ({judged})"
                raise AddressRefused(
                    f"refusing to connect to {shown}: the address is {reason} and not on NRLLM_REMOTE_ALLOW"
                )


def check_connected(host: str, peer: str, allow: "AllowList | Iterable[str] | None") -> None:
    """The check on each new connection: `peer` is the address the socket really reached (its getpeername),
    which a name that resolves differently the second time (DNS rebinding) may have changed."""
    check_addresses(host, [_address(peer)], allow)


def _address(text: str) -> IPAddress:
    # The scope of a link-local IPv6 address (fe80::1%eth0) is not part of the address.
    return ipaddress.ip_address(text.split("%")[0])


def _same_address(host: str, address: IPAddress) -> bool:
    try:
        return _address(host.strip("[]")) == address
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


def resolve_host(host: str, port: int) -> list[IPAddress]:
    with contextlib.suppress(ValueError):
        return [_address(host)]  # an address in its usual form is its own resolution (no lookup to pay)
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise AddressRefused(f"cannot connect to {host}: the name does not resolve ({exc})") from None
    return [_address(str(info[4][0])) for info in infos]


def check_url(url: str, allow: "AllowList | Iterable[str] | None" = None) -> list[IPAddress]:
    """Resolve the URL's host and refuse it unless every address is public or allow-listed.

    Returns the addresses. Raises AddressRefused, before any connection, for a URL that is not http or
    https, a name that does not resolve, or an address the guard refuses."""
    host, port = parse_url(url)
    allow = AllowList.of(allow)
    if allow.allows_name(host):
        return []
    addresses = resolve_host(host, port)
    check_addresses(host, addresses, allow)
    return addresses
