"""What an ``http`` wait may reach, and its GET.

A wait's check runs in the scheduler's own process, on its network: a GET to the scheduler's
loopback, to a link-local address or to a cloud's metadata service would reach what no task
should (the API's admin side, instance credentials). So an ``http`` wait to such an address is
refused, its URL and every redirect it follows, unless the platform allows the host or the
network in ``VERITASK_WAIT_HTTP_ALLOW`` (read once when the scheduler starts, and handed to the
wait executor). Private networks (10/8, 192.168/16…) are not refused: a wait's usual target is
a service on them, and its host comes from the definition, which only an admin applies.

A refused URL fails the wait at once (``Refused``): nothing the wait checks later would change.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.client import HTTPMessage
from typing import IO, TypeAlias
from urllib.parse import urlsplit

ENV = "VERITASK_WAIT_HTTP_ALLOW"
Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
#: How a host name is turned into addresses (``socket.getaddrinfo``'s answer, addresses only).
Resolver: TypeAlias = Callable[[str, int], Sequence[str]]
#: Cloud metadata services outside the link-local ranges (AWS's IPv6 one, Alibaba Cloud's).
METADATA = (ipaddress.ip_network("fd00:ec2::254/128"), ipaddress.ip_network("100.100.100.200/32"))
_HOST_NAME = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?"
)


class Refused(Exception):
    """An ``http`` wait's URL (or a redirect's) that the platform does not let a wait reach."""


@dataclass(frozen=True)
class HttpAllow:
    """The hosts (by the name a URL gives) and the networks an ``http`` wait may reach though
    they are loopback, link-local or metadata addresses. Empty: none."""

    hosts: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> HttpAllow:
        """``VERITASK_WAIT_HTTP_ALLOW``: comma-separated host names, addresses and networks
        (``localhost,127.0.0.1,::1,10.20.0.0/16``). Raises ValueError naming a bad entry."""
        hosts: set[str] = set()
        networks: list[Network] = []
        for entry in (part.strip() for part in text.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if not _HOST_NAME.fullmatch(entry):
                raise ValueError(
                    f"{ENV}: {entry!r} is not a host name, an address or a network "
                    "(write them comma-separated: localhost,127.0.0.1,10.0.0.0/8)"
                )
            hosts.add(entry.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> HttpAllow:
        return cls.parse(environ.get(ENV, ""))

    def allows(self, address: Address) -> bool:
        return any(address in network for network in self.networks)


def forbidden(address: Address) -> str | None:
    """Why a wait may not reach ``address`` unless allowed (None: it may)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "loopback"
    if address.is_unspecified:
        return "unspecified (this host)"
    if any(address in network for network in METADATA):
        return "cloud metadata"
    if address.is_link_local:
        return "link-local (cloud metadata)"
    return None


def check(url: str, allow: HttpAllow, resolve: Resolver | None = None) -> None:
    """Raise ``Refused`` when the URL is not http(s) or its host is, or resolves to, an
    address the wait may not reach. A host that does not resolve is the GET's to report."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise Refused(f"{url!r} is not an http:// or https:// URL")
    host = parts.hostname
    if not host:
        raise Refused(f"{url!r} names no host")
    if host.rstrip(".") in allow.hosts:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Refused(f"{url!r} has a port that is not a number") from None
    try:
        found = (resolve or _resolve)(host, port)
    except OSError:
        return
    for text in found:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        why = forbidden(address)
        if why is not None and not allow.allows(address):
            raise Refused(
                f"{host} is a {why} address ({address}): an http wait reaches it only when "
                f"the platform lists it in {ENV}"
            )


def look(url: str, limit: float, allow: HttpAllow) -> tuple[bool, str]:
    """GET the URL (redirects followed, each checked): whether it answered 2xx, and what was
    seen. Raises ``Refused``."""
    check(url, allow)
    opener = urllib.request.build_opener(_CheckedRedirects(allow))
    request = urllib.request.Request(url, method="GET", headers={"User-Agent": "veritask-wait"})
    try:
        with opener.open(request, timeout=limit) as answer:
            status = int(answer.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
        exc.close()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return False, f"no answer from {url}: {reason}"
    return 200 <= status < 300, f"HTTP {status} from {url}"


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is followed only to where the wait's own URL could point."""

    def __init__(self, allow: HttpAllow) -> None:
        self.allow = allow

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        try:
            check(newurl, self.allow)
        except Refused as exc:
            fp.close()
            raise Refused(f"a redirect from {req.full_url}: {exc}") from None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _resolve(host: str, port: int) -> list[str]:
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(sockaddr[0]) for *_, sockaddr in found]
