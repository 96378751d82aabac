"""Which Blob storage locations tau will contact: decided before any network request, from the URL alone.

A SOURCE is `https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX` (also the US government and China clouds:
`.blob.core.usgovcloudapi.net`, `.blob.core.chinacloudapi.cn`; and a private endpoint's
`ACCOUNT.privatelink.blob.core.windows.net` of each. Not the retired Germany cloud's `.blob.core.cloudapi.de`, which
Tau still lists). Refused: any other scheme or host (suffix
matching is on whole labels, so `acct.blob.core.windows.net.evil.example` is not Azure), userinfo, a query, a
fragment, a port, spaces, control or non-ASCII characters, a container name Azure would not accept, `.`, `..` or
empty prefix segments, and an empty or root prefix (a bundle never spans a whole container). Endpoints the user
trusts explicitly (such as Azurite on loopback) are listed as origins in `TAU_TRUSTED_BLOB_ENDPOINTS`
(comma-separated, e.g. `http://127.0.0.1:10000`); their URLs are path-style:
`ORIGIN/ACCOUNT/CONTAINER/PREFIX`. Nothing that came from data (records, annotations) is trusted by being there:
it passes the same checks.
"""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import urlsplit

from taulib import env
from taulib.errors import Refused

CLOUD_SUFFIXES = (".blob.core.windows.net", ".blob.core.usgovcloudapi.net", ".blob.core.chinacloudapi.cn")
PRIVATE_LINK = ".privatelink"  # ACCOUNT.privatelink.blob.core...: Azure's private-endpoint zone, the same account
_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}\Z")
_CONTAINER = re.compile(r"^(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]\Z")
_SEGMENT = re.compile(r"^[A-Za-z0-9._~!$&'()*+,;=:@ -]+\Z")


class Location(NamedTuple):
    account_url: str  # https://acct.blob.core.windows.net, or ORIGIN/ACCOUNT for a trusted endpoint
    account: str
    container: str
    prefix: str  # no leading or trailing "/", never empty

    def url(self) -> str:
        return f"{self.account_url}/{self.container}/{self.prefix}"


def trusted_origins(environ: dict[str, str] | None = None) -> frozenset[str]:
    return env.get("TAU_TRUSTED_BLOB_ENDPOINTS", environ)


def parse(source: str, environ: dict[str, str] | None = None) -> Location:
    """The Location of a Blob SOURCE URL, or Refused (77) when tau must not contact it."""
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in source):
        raise Refused(f"blob URL {source!r} contains spaces or control characters")
    if not source.isascii():  # no IDNA or Unicode look-alikes: what is checked is what is contacted
        raise Refused(f"blob URL {source!r} contains non-ASCII characters")
    parts = urlsplit(source)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise Refused(f"blob URL {source!r} carries user information; credentials come from the environment only")
    if parts.query or "?" in source:
        raise Refused(f"blob URL {source!r} has a query (a SAS token?); credentials come from the environment only")
    if parts.fragment or "#" in source:
        raise Refused(f"blob URL {source!r} has a fragment; refusing an ambiguous endpoint")
    origin = f"{parts.scheme}://{parts.netloc.lower()}"
    segments = [s for s in parts.path.split("/")]
    if origin in trusted_origins(environ):
        if len(segments) < 2 or not segments[1]:
            raise Refused(f"blob URL {source!r} names no account: a trusted endpoint is used as ORIGIN/ACCOUNT/"
                          "CONTAINER/PREFIX")
        account = segments[1]
        if not re.match(r"^[a-z0-9]{3,64}\Z", account):
            raise Refused(f"blob URL {source!r} names account {account!r}, which is not a storage account name")
        account_url = f"{origin}/{account}"
        rest = segments[2:]
    else:
        if parts.scheme != "https":
            raise Refused(f"blob URL {source!r} does not use https; only Azure Blob storage over https, or an "
                          "endpoint listed in TAU_TRUSTED_BLOB_ENDPOINTS, is contacted")
        host = (parts.hostname or "").lower()
        if parts.port is not None:
            raise Refused(f"blob URL {source!r} names a port; Azure Blob storage endpoints have none")
        suffix = next((s for s in CLOUD_SUFFIXES if host.endswith(s)), None)
        account = host[: -len(suffix)] if suffix else ""
        if account.endswith(PRIVATE_LINK):
            account = account[: -len(PRIVATE_LINK)]
        if suffix is None or not _ACCOUNT.match(account):
            raise Refused(f"blob URL {source!r} is not an Azure Blob storage endpoint (ACCOUNT{CLOUD_SUFFIXES[0]}, "
                          "or the government or China cloud); list a trusted endpoint in TAU_TRUSTED_BLOB_ENDPOINTS",
                          host=host)
        account_url = f"https://{host}"
        rest = segments[1:]
    if not rest or not rest[0]:
        raise Refused(f"blob URL {source!r} names no container")
    container = rest[0]
    if not _CONTAINER.match(container):
        raise Refused(f"blob URL {source!r} names container {container!r}, which Azure would not accept")
    prefix_parts = rest[1:]
    while prefix_parts and prefix_parts[-1] == "":
        prefix_parts.pop()
    if not prefix_parts:
        raise Refused(f"blob URL {source!r} has an empty or root prefix; a bundle never spans a whole container")
    for part in prefix_parts:
        if part in ("", ".", "..") or not _SEGMENT.match(part):
            raise Refused(f"blob URL {source!r} has a prefix segment {part!r} that is not allowed")
    return Location(account_url, account, container, "/".join(prefix_parts))


def is_blob_url(source: str) -> bool:
    return source.startswith(("https://", "http://"))
