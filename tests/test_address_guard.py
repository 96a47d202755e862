"""The address guard, pure: IP literals and "localhost" only, no outside DNS."""

import ipaddress

import pytest

from sidecar.config import Settings
from sidecar.delegation.address_guard import AddressRefused, AllowList, check_addresses, check_url, not_public
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
