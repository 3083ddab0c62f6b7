"""The ``Host`` check in front of the app: a page whose domain is rebound to us gets a 400.

DNS rebinding: a web page on ``attacker.example`` has its name re-resolved to
127.0.0.1, and the browser, which only compares names, lets the page's script
call the server bound there as its own origin, reading every answer. What gives
it away is the ``Host`` header: the browser sends the page's name. So a request
is answered only when its ``Host`` names

* the address the connection came in on (``scope["server"]``: the bound
  address, or with ``--host 0.0.0.0``/``::`` the interface the client used), in
  any spelling of that IP (IPv6 in brackets, an IPv4-mapped IPv6 address);
* a loopback address, or ``localhost``, when the connection came in on loopback;
* the name given to ``--host`` (if it is a name), or one of ``--allowed-hosts``
  (``example.com``; ``.example.com`` for it and every subdomain);

with or without a port (any port: a forwarded port shows the outer one). An IP
literal cannot be rebound: only names are refused by default. ``--allowed-hosts
'*'`` turns the check off (unsafe: any page the user opens can use the model
once its name points here). A missing or malformed ``Host`` is refused too.
The answer is a 400 in the endpoint's error shape (``error_shape``), connection
closed, before the body is read.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from attnkit.serve.limits import ASGIApp, Receive, Scope, Send, send_error

__all__ = ["ANY_HOST", "HostCheck", "allowed_host", "parse_host"]

ANY_HOST = "*"
_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,62})(\.[a-z0-9_]([a-z0-9_-]{0,62}))*$")
IP = ipaddress.IPv4Address | ipaddress.IPv6Address


def _ip(text: str) -> IP | None:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:127.0.0.1 (a dual-stack socket) is 127.0.0.1
    return ip


def parse_host(value: str) -> str | None:
    """The host of a ``Host`` header value, canonical (lower case; an IP as ``ipaddress``
    writes it); ``None`` if it is not ``name[:port]``, ``IPv4[:port]`` or ``[IPv6][:port]``."""
    value = value.strip()
    if value.startswith("["):
        inside, sep, rest = value[1:].partition("]")
        if not sep or (rest and not re.fullmatch(r":\d{1,5}", rest)):
            return None
        ip = _ip(inside)
        return str(ip) if ip is not None and ":" in inside else None
    name, sep, port = value.partition(":")
    if sep and not re.fullmatch(r"\d{1,5}", port):
        return None  # a second colon (a bare IPv6 address) lands here as well
    name = name.lower().removesuffix(".")  # "localhost." is "localhost"
    ip = _ip(name)
    if ip is not None:
        return str(ip)
    return name if len(name) <= 253 and _NAME.match(name) else None


def allowed_host(entry: str) -> str | None:
    """One ``--allowed-hosts`` entry, canonical (``*``, a name, ``.suffix``, an IP, an
    IPv6 address with or without brackets); ``None`` if it is none of these (a port too)."""
    entry = entry.strip().lower()
    if entry == ANY_HOST:
        return entry
    if entry.startswith("."):
        name = entry[1:].removesuffix(".")
        return "." + name if _NAME.match(name) and _ip(name) is None else None
    ip = _ip(entry.removeprefix("[").removesuffix("]"))
    if ip is not None:
        return str(ip)
    name = entry.removesuffix(".")
    return name if len(name) <= 253 and _NAME.match(name) else None


class HostCheck:
    """Answer only requests whose ``Host`` names this server (module doc).

    Args:
        app: the ASGI app behind the check.
        bound: the ``--host`` the server was started with (a name there is allowed).
        allowed: ``--allowed-hosts`` entries, canonical (``allowed_host``); ``*``: all.
    """

    def __init__(self, app: ASGIApp, *, bound: str, allowed: Iterable[str] = ()) -> None:
        self.app = app
        entries = set(allowed)
        self.any = ANY_HOST in entries
        name = parse_host(bound) if _ip(bound.strip("[]")) is None else None
        self.names = {e for e in entries if not e.startswith(".")} | ({name} if name else set())
        self.suffixes = tuple(e for e in entries if e.startswith("."))

    def accepts(self, host: str, server: tuple[str, int] | None) -> bool:
        """Whether ``host`` (canonical) names this server, for a connection on ``server``."""
        if self.any or host in self.names:
            return True
        if any(host == s[1:] or host.endswith(s) for s in self.suffixes):
            return True
        local = _ip(server[0]) if server else None
        if local is None:
            return False
        ip = _ip(host)
        if ip is not None:
            return ip == local or (ip.is_loopback and local.is_loopback)
        return host == "localhost" and local.is_loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.any:
            await self.app(scope, receive, send)
            return
        values = [v for k, v in scope.get("headers", ()) if k == b"host"]
        if len(values) != 1:
            problem = "missing" if not values else "given more than once"
            await send_error(send, scope, 400, f"Host: {problem}; this server needs one")
            return
        raw = values[0].decode("latin-1")
        host = parse_host(raw)
        server = scope.get("server")
        if host is None or not self.accepts(host, server):
            shown = ascii(raw[:100])
            why = "malformed" if host is None else "not a name of this server"
            await send_error(send, scope, 400, f"Host: {shown} is {why} (DNS rebinding "
                             "guard); start the server with --allowed-hosts NAME to serve "
                             "a name")  # fmt: skip
            return
        await self.app(scope, receive, send)
