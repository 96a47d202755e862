"""The address guard, pure: IP literals and "localhost" only, no outside DNS."""

import ipaddress

import pytest

from sidecar.config import Settings
from sidecar.delegation.address_guard import (
    AddressRefused,
    AllowList,
    carried_ipv4,
    check_addresses,
    check_connected,
    check_url,
    not_public,
)
from sidecar.delegation.types import RemoteError
from sidecar.domain.errors import SidecarError


@pytest.mark.parametrize(("url", "address"), [
    ("http://8.8.8.8/", "8.8.8.8"),
    ("https://1.1.1.1:8443/a2a", "1.1.1.1"),
    ("http://[2001:4860:4860::8888]/", "2001:4860:4860::8888"),
])
def test_public_addresses_pass(url, address):
    assert check_url(url) == [ipaddress.ip_address(address)]


@pytest.mark.parametrize(("address", "reason"), [
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"), ("fd00::1", "private"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"), ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"), ("100.64.0.1", "not global"), ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:10.0.0.1", "private"),
])
def test_non_public_addresses_are_refused(address, reason):
    assert not_public(ipaddress.ip_address(address)) == reason
    host = f"[{address}]" if ":" in address else address
    with pytest.raises(AddressRefused, match=reason):
        check_url(f"http://{host}:8080/")


@pytest.mark.parametrize("host", ["127.1", "0x7f.0.0.1", "2130706433", "0177.0.0.1", "127.000.0.1"])
def test_other_spellings_of_an_address_are_judged_by_what_they_resolve_to(host):
    # An address in its usual form is judged without a lookup; these other forms are not that, and the
    # resolver reads each as 127.0.0.1.
    with pytest.raises(AddressRefused, match="loopback"):
        check_url(f"http://{host}:8080/")


def test_localhost_is_refused_by_its_addresses():
    with pytest.raises(AddressRefused, match="localhost .*loopback"):
        check_url("http://localhost:8080/")


def test_any_refused_address_refuses_the_name():
    public, private = ipaddress.ip_address("8.8.8.8"), ipaddress.ip_address("10.0.0.7")
    check_addresses("agents.example", [public], ())
    with pytest.raises(AddressRefused, match=r"agents.example \(10.0.0.7\): the address is private"):
        check_addresses("agents.example", [public, private], ())


@pytest.mark.parametrize(("entries", "url"), [
    (["127.0.0.1"], "http://127.0.0.1:9/"),
    (["127.0.0.0/8"], "http://127.0.0.2:9/"),
    (["10.0.0.0/8", "::1"], "http://[::1]:9/"),
    (["fd00::/8"], "http://[fd00::5]:9/"),
    (["LOCALHOST."], "http://localhost:9/"),
    (["127.0.0.1"], "http://[::ffff:127.0.0.1]:9/"),
])
def test_allow_list_admits_names_addresses_and_networks(entries, url):
    check_url(url, entries)


def test_allow_list_is_exact():
    with pytest.raises(AddressRefused):
        check_url("http://127.0.0.2:9/", ["127.0.0.1"])
    with pytest.raises(AddressRefused):
        check_url("http://[::1]:9/", ["127.0.0.0/8"])  # an IPv4 network does not admit IPv6 loopback
    # An allowed name admits the name, not its addresses under another name.
    with pytest.raises(AddressRefused):
        check_addresses("127.0.0.1", [ipaddress.ip_address("127.0.0.1")], ["localhost"])
    check_addresses("localhost", [ipaddress.ip_address("127.0.0.1")], ["localhost"])


@pytest.mark.parametrize("url", ["ftp://8.8.8.8/", "file:///etc/passwd", "gopher://8.8.8.8/", "http:///path",
                                 "8.8.8.8:80", "http://8.8.8.8:99999/", "http://a..b/"])
def test_only_http_urls_with_a_resolvable_host(url):
    with pytest.raises(AddressRefused):
        check_url(url)


def test_bad_network_on_the_allow_list_is_an_error():
    with pytest.raises(ValueError, match="not a network"):
        AllowList(["10.0.0.0/33"])


def test_refusal_is_a_remote_error_and_a_sidecar_error():
    with pytest.raises(AddressRefused) as caught:
        check_url("http://127.0.0.1/")
    assert isinstance(caught.value, SidecarError)
    assert isinstance(caught.value, RemoteError) and caught.value.code is None


def test_allow_list_from_the_environment():
    settings = Settings.from_env({"NRLLM_REMOTE_ALLOW": "127.0.0.1, 10.0.0.0/8,agents.internal"})
    allow = AllowList(settings.remote_allow)
    check_url("http://127.0.0.1:1/", allow)
    check_addresses("10.9.8.7", [ipaddress.ip_address("10.9.8.7")], allow)
    check_addresses("agents.internal", [ipaddress.ip_address("192.168.0.4")], allow)
    with pytest.raises(AddressRefused):
        check_url("http://127.0.0.1:1/", AllowList(Settings.from_env({}).remote_allow))


# Every IPv6 form that carries an IPv4 address, and reaches it: (name, address, the IPv4 addresses inside,
# why it is refused or None when it is allowed). The public cases carry 8.8.8.8 or 1.1.1.1.
CARRIED = [
    ("mapped, public", "::ffff:8.8.8.8", ["8.8.8.8"], None),
    ("mapped, loopback", "::ffff:127.0.0.1", ["127.0.0.1"], "loopback"),
    ("mapped, private", "::ffff:10.0.0.1", ["10.0.0.1"], "private"),
    ("mapped, link-local", "::ffff:169.254.169.254", ["169.254.169.254"], "link-local"),
    ("compatible, public", "::8.8.8.8", ["8.8.8.8"], None),
    ("compatible, loopback", "::127.0.0.1", ["127.0.0.1"], "loopback"),
    ("compatible, private", "::192.168.1.1", ["192.168.1.1"], "private"),
    ("compatible, link-local", "::169.254.169.254", ["169.254.169.254"], "link-local"),
    ("6to4, public", "2002:808:808::1", ["8.8.8.8"], None),
    ("6to4, loopback", "2002:7f00:1::", ["127.0.0.1"], "loopback"),
    ("6to4, private", "2002:a00:1::", ["10.0.0.1"], "private"),
    ("6to4, link-local", "2002:a9fe:a9fe::1", ["169.254.169.254"], "link-local"),
    # Teredo: the server's address in bits 32-63, the client's in the last 32 bits, each bit inverted.
    ("Teredo, both public", "2001:0:808:808::fefe:fefe", ["8.8.8.8", "1.1.1.1"], None),
    ("Teredo, loopback server", "2001:0:7f00:1::fefe:fefe", ["127.0.0.1", "1.1.1.1"], "loopback"),
    ("Teredo, loopback client", "2001:0:808:808::80ff:fffe", ["8.8.8.8", "127.0.0.1"], "loopback"),
    ("Teredo, private client", "2001:0:808:808::f5ff:fffe", ["8.8.8.8", "10.0.0.1"], "private"),
    ("Teredo, link-local client", "2001:0:808:808::5601:5601", ["8.8.8.8", "169.254.169.254"], "link-local"),
    ("NAT64, public", "64:ff9b::808:808", ["8.8.8.8"], None),
    ("NAT64, loopback", "64:ff9b::7f00:1", ["127.0.0.1"], "loopback"),
    ("NAT64, private", "64:ff9b::ac10:1", ["172.16.0.1"], "private"),
    ("NAT64, link-local", "64:ff9b::a9fe:a9fe", ["169.254.169.254"], "link-local"),
    ("local NAT64, public", "64:ff9b:1::101:101", ["1.1.1.1"], None),
    ("local NAT64, loopback", "64:ff9b:1::7f00:1", ["127.0.0.1"], "loopback"),
    ("local NAT64, private", "64:ff9b:1:ab::a00:1", ["10.0.0.1"], "private"),
    ("local NAT64, link-local", "64:ff9b:1::a9fe:a9fe", ["169.254.169.254"], "link-local"),
]


@pytest.mark.parametrize(("address", "inside", "reason"), [case[1:] for case in CARRIED],
                         ids=[case[0] for case in CARRIED])
def test_an_ipv6_address_that_carries_ipv4_is_judged_by_the_ipv4_inside(address, inside, reason):
    ip = ipaddress.ip_address(address)
    assert [str(a) for a in carried_ipv4(ip)] == inside
    assert not_public(ip) == reason
    url = f"http://[{address}]:8080/"
    if reason is None:
        assert check_url(url) == [ip]  # the check before connecting (and at an agent's registration)
        check_connected(address, address, ())  # the check of the address each new connection reached
        return
    with pytest.raises(AddressRefused, match=reason):
        check_url(url)
    with pytest.raises(AddressRefused, match=reason):
        check_connected("agents.example", address, ())  # a name that now resolves to this address
    check_url(url, inside)  # allow-listing the IPv4 addresses inside lets it through, as for ::ffff:
    check_connected("agents.example", address, [address])  # and so does allow-listing the address itself


def test_addresses_that_carry_no_ipv4_are_themselves():
    for address in ("::1", "::", "2001:4860:4860::8888", "fe80::1", "8.8.8.8"):
        assert carried_ipv4(ipaddress.ip_address(address)) == ()
    assert not_public(ipaddress.ip_address("::1")) == "loopback"
    assert not_public(ipaddress.ip_address("::")) == "unspecified"
