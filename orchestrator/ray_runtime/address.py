"""A cluster's address, parsed once: the host that is checked (loopback or not, reachable or not) is the host the
client then connects to, with the token.

URL parsers disagree at the edges: urllib.parse reads the host after the last `@`, while urllib3 (under requests,
under Ray's Jobs client) ends the authority at a backslash, so `http://127.1\\@127.0.0.1:8265` passes a loopback
check on 127.0.0.1 and its request, token included, goes to 127.1. Only the plain form is accepted:
SCHEME://HOST[:PORT][/PATH] for a dashboard, [ray://]HOST:PORT for Ray itself, in printable ASCII, with no
backslash, credentials (`@`), query or fragment; HOST a name, a dotted IPv4 address or a bracketed IPv6 one.
urllib.parse and urllib3 must then read the same host and port, and the client is given the URL rebuilt from
this parse rather than the text as typed.
"""
from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

DASHBOARD_SCHEMES = {"http": 80, "https": 443}
HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")
PORT = re.compile(r"[0-9]{1,5}")
PATH = re.compile(r"(/([A-Za-z0-9._~!$&'()*+,;=:-]|%[0-9A-Fa-f]{2})*)*")


class AddressError(ValueError):
    """Why an address is refused, in one line."""


@dataclass(frozen=True)
class Endpoint:
    scheme: str  # "http", "https" or "ray"; "" for a Ray address given as HOST:PORT
    host: str  # lower case; an IPv6 address without its brackets
    port: int | None
    path: str = ""  # no trailing "/"

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.path}" if self.scheme else self.netloc

    @property
    def connect_port(self) -> int | None:
        """The port a connection goes to: the one given, else the scheme's own."""
        return self.port if self.port is not None else DASHBOARD_SCHEMES.get(self.scheme)

    @property
    def loopback(self) -> bool:
        """Whether the host is this machine: `localhost` or a loopback IP (a name is never resolved)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def refusal(source: str, address: str, err: AddressError) -> str:
    """The one line refusing `address`, given by `source` (an option or a variable): the address quoted as typed, or
    escaped where it holds anything unprintable, and left out where it may carry a password."""
    if "@" in address:
        return f"{source}: {err}"
    plain = address.isascii() and address.isprintable() and " " not in address
    return f"{source} {address if plain else ascii(address)}: {err}"


def parse_dashboard(address: str) -> Endpoint:
    """A dashboard's URL (http or https; no scheme means http). Raises AddressError."""
    _refuse_ambiguous(address)
    text = address if "://" in address else f"http://{address}"
    scheme, rest = text.split("://", 1)
    if scheme.lower() not in DASHBOARD_SCHEMES:
        raise AddressError("expected the dashboard's URL, for example http://127.0.0.1:8265")
    authority, slash, path = rest.partition("/")
    endpoint = Endpoint(scheme.lower(), *_host_port(authority), _path(slash + path))
    _same_for_both_parsers(text, endpoint)
    return endpoint


def parse_ray(address: str) -> Endpoint:
    """A Ray cluster's address: HOST:PORT or ray://HOST:PORT. Raises AddressError."""
    _refuse_ambiguous(address)
    scheme, _, rest = address.partition("://") if "://" in address else ("", "", address)
    if scheme not in ("", "ray"):
        raise AddressError("expected HOST:PORT (for example 127.0.0.1:6379), ray://HOST:10001 or auto")
    endpoint = Endpoint(scheme, *_host_port(rest.removesuffix("/")))
    if endpoint.port is None:
        raise AddressError("expected HOST:PORT (for example 127.0.0.1:6379), ray://HOST:10001 or auto")
    _same_for_both_parsers(f"{scheme or 'ray'}://{rest}", endpoint)
    return endpoint


def _refuse_ambiguous(address: str) -> None:
    if not address.isascii():
        raise AddressError("holds a non-ASCII character; write a host name in its ASCII (xn--) form")
    if not address.isprintable() or " " in address:
        raise AddressError("holds whitespace or a control character")
    if "\\" in address:
        raise AddressError("holds a backslash, where URL parsers disagree on where the host ends (urllib3, under "
                           "the Jobs client, ends it there)")
    if "?" in address or "#" in address:
        raise AddressError("a query (?) or fragment (#) has no place in the address")
    if "@" in address:
        raise AddressError("credentials in the address (USER@ or USER:PASSWORD@) are refused, as is any `@`: "
                           "parsers disagree on the host around it; give the token with RAY_AUTH_TOKEN or "
                           "--token-file")


def _host_port(authority: str) -> tuple[str, int | None]:
    if authority.startswith("["):
        inside, bracket, port_text = authority[1:].partition("]")
        host = inside.lower()
        if not bracket or "%" in inside or not is_ipv6(inside):
            raise AddressError(f"{authority!r} is not a bracketed IPv6 address, for example [::1]:8265")
        if port_text and not port_text.startswith(":"):
            raise AddressError(f"{authority!r}: expected :PORT after the IPv6 address")
        port_text = port_text[1:] if port_text else None
    else:
        host, colon, port_text = authority.lower().partition(":")
        port_text = port_text if colon else None
        if not host:
            raise AddressError("no host; expected SCHEME://HOST[:PORT], for example http://127.0.0.1:8265")
        if not HOST_NAME.fullmatch(host):
            raise AddressError(f"{host!r} is not a host name nor an IP address (IPv6 goes in brackets)")
    if port_text is None:
        return host, None
    if not PORT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
        raise AddressError(f"port {port_text!r}: expected a number from 1 to 65535")
    return host, int(port_text)


def is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _path(path: str) -> str:
    if not PATH.fullmatch(path):
        raise AddressError(f"path {path!r}: only letters, digits, -._~!$&'()*+,;=:/ and %XX escapes")
    return path.rstrip("/")


def _same_for_both_parsers(url: str, endpoint: Endpoint) -> None:
    """The grammar above leaves nothing for parsers to read two ways; this is the check that they don't."""
    from urllib3.exceptions import LocationParseError
    from urllib3.util import parse_url

    try:
        std = urlsplit(url)
        std_host, std_port = std.hostname, std.port
        lib = parse_url(url)
    except (ValueError, LocationParseError):
        raise AddressError("urllib.parse or urllib3 cannot read it; expected SCHEME://HOST[:PORT][/PATH]") from None
    if std.username is not None or lib.auth is not None or std.query or lib.query is not None or std.fragment \
            or lib.fragment is not None:
        raise AddressError("urllib.parse or urllib3 reads credentials, a query or a fragment in it")
    lib_host = (lib.host or "").removeprefix("[").removesuffix("]").lower()
    if (std_host, std_port) != (endpoint.host, endpoint.port) or (lib_host, lib.port) != (endpoint.host, endpoint.port):
        raise AddressError(f"urllib.parse reads host {std_host}, port {std_port}; urllib3 host {lib_host}, port "
                           f"{lib.port}: the token could go elsewhere than checked")


def unreachable(endpoint: Endpoint, timeout: float = 3) -> str | None:
    """Why nothing answers a TCP connection at the endpoint's host and port, or None when something does."""
    try:
        with socket.create_connection((endpoint.host, endpoint.connect_port), timeout=timeout):
            return None
    except OSError as e:
        return str(e.strerror or e)
