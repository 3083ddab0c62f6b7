"""``Host`` parsing and matching (``attnkit.serve.host_check``), without a server."""

from __future__ import annotations

import pytest

from attnkit.serve.host_check import HostCheck, allowed_host, parse_host


async def _app(scope, receive, send):  # never called: accepts() only
    raise AssertionError


@pytest.mark.parametrize(
    ("value", "host"),
    [("127.0.0.1", "127.0.0.1"), ("127.0.0.1:8000", "127.0.0.1"), ("LocalHost:80", "localhost"),
     ("localhost.", "localhost"), ("[::1]", "::1"), ("[::1]:8000", "::1"),
     ("[0:0:0:0:0:0:0:1]:1", "::1"), ("[::ffff:127.0.0.1]:80", "127.0.0.1"),
     ("api.corp.example", "api.corp.example"), (" good.example ", "good.example"),
     ("::1", None), ("[::1", None), ("[127.0.0.1]", None), ("a b", None), ("host:port", None),
     ("host:123456", None), ("", None), ("x/y", None), ("[::1]x", None), ("h:1:2", None)],
)  # fmt: skip
def test_parse_host(value, host):
    assert parse_host(value) == host


@pytest.mark.parametrize(
    ("entry", "canonical"),
    [("*", "*"), ("Example.COM", "example.com"), (".corp.example", ".corp.example"),
     ("::1", "::1"), ("[::1]", "::1"), ("10.0.0.7", "10.0.0.7"),
     ("example.com:80", None), ("..x", None), (".10.0.0.1", None), ("a b", None), ("", None)],
)  # fmt: skip
def test_allowed_host_entries(entry, canonical):
    assert allowed_host(entry) == canonical


def test_what_each_binding_accepts():
    loopback = HostCheck(_app, bound="127.0.0.1", allowed=["good.example", ".corp.example"])
    on = ("127.0.0.1", 8000)
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2", "good.example", "corp.example",
                 "a.b.corp.example"):  # fmt: skip
        assert loopback.accepts(host, on), host
    for host in ("attacker.example", "10.0.0.1", "xcorp.example", "good.example.evil", "127.1"):
        assert not loopback.accepts(host, on), host
    v6 = HostCheck(_app, bound="::1")
    assert v6.accepts("::1", ("::1", 8000)) and v6.accepts("localhost", ("::1", 8000))
    assert not v6.accepts("attacker.example", ("::1", 8000))
    # Bound to every interface: the address the client came in on, not another machine's.
    wildcard = HostCheck(_app, bound="0.0.0.0")
    lan = ("192.168.1.5", 8000)
    assert wildcard.accepts("192.168.1.5", lan) and not wildcard.accepts("192.168.1.6", lan)
    assert not wildcard.accepts("localhost", lan)  # localhost only on a loopback connection
    assert wildcard.accepts("192.168.1.5", ("::ffff:192.168.1.5", 8000))  # dual-stack socket
    named = HostCheck(_app, bound="myhost.lan")  # --host NAME: that name is ours
    assert named.accepts("myhost.lan", lan) and not named.accepts("other.lan", lan)
    anything = HostCheck(_app, bound="127.0.0.1", allowed=["*"])
    assert anything.accepts("attacker.example", on)
    assert not loopback.accepts("localhost", None)  # no local address known: names only
