"""Which credential a Blob storage request of the bundle commands carries, and what an access-denied error says.

Reads the environment only (through taulib.env, and azure-identity's own variables); writes nothing. The first of:
`AZURE_STORAGE_CONNECTION_STRING`'s account key, for the account the checked URL names (its endpoints are ignored:
the endpoint is the URL tau checked); else, over https, an Azure identity when the optional azure-identity package
is installed (`pip install tau[azure-identity]`); else nothing (anonymous: a public container). The identity is
`DefaultAzureCredential` narrowed to the sources that exist on a login node, a VM or a pod: a service principal in
the environment, workload identity, managed identity and the Azure CLI (never a browser, an IDE, PowerShell or a
broker). azure-identity reads its own variables (AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE,
IDENTITY_ENDPOINT, AZURE_TOKEN_CREDENTIALS ...); tau does not, so they are not in taulib.env's table.

Promises: a token is asked for once, before any request, so a missing identity fails at once (77) with one error
saying what to set, not after retries; a token is never sent over plain http (such an endpoint gets the key or
nothing); no key, token or SDK message is ever put into an error, which names only what was refused (by the kind
of credential the request carried) and what to set.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

from taulib import env
from taulib.bundle.endpoint import Location
from taulib.errors import Refused, UsageError

if TYPE_CHECKING:  # imported only when a request is made (azure-core, azure-identity)
    from azure.core.credentials import AccessToken
    from azure.core.exceptions import HttpResponseError
    from azure.core.rest import HttpRequest
    from azure.identity import DefaultAzureCredential

STORAGE_SCOPE = "https://storage.azure.com/.default"  # what azure-storage-blob asks a token credential for
# DefaultAzureCredential's sources that have no place on a login node, a VM or a pod (or that open a window)
_NOT_HERE = ("shared_token_cache", "visual_studio_code", "powershell", "developer_cli", "interactive_browser",
             "broker")


def _connection_string_key(text: str, account: str) -> dict[str, str]:
    fields = dict(part.split("=", 1) for part in text.split(";") if "=" in part)
    name, key = fields.get("AccountName"), fields.get("AccountKey")
    if not name or not key:
        raise Refused("AZURE_STORAGE_CONNECTION_STRING holds no AccountName/AccountKey")
    if name != account:
        raise Refused(f"AZURE_STORAGE_CONNECTION_STRING is for account {name!r}, not {account!r}; tau never sends a "
                      "key to another account")
    return {"account_name": name, "account_key": key}


def _identity_installed() -> bool:
    from importlib.util import find_spec

    try:
        return find_spec("azure.identity") is not None
    except ImportError:
        return False


def what_to_set(url: str) -> str:
    """What a user sets so that `url` gets credentials it accepts (the end of every access-denied message)."""
    if not url.startswith("https://"):
        return "set AZURE_STORAGE_CONNECTION_STRING (an Azure identity's token is never sent over plain http)"
    install = "" if _identity_installed() else "install tau[azure-identity] and "
    return (f"set AZURE_STORAGE_CONNECTION_STRING, or {install}provide an Azure identity: AZURE_CLIENT_ID, "
            "AZURE_TENANT_ID and AZURE_FEDERATED_TOKEN_FILE (workload identity), a managed identity, or `az login`")


class _Identity:
    """DefaultAzureCredential that hands out the token credential() obtained first, while it is valid for more than
    five minutes, before asking the chain again (the Azure CLI source costs a process per token)."""

    def __init__(self, chain: DefaultAzureCredential, token: AccessToken) -> None:
        self.chain, self.token = chain, token

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        token = self.token
        if token is not None and scopes == (STORAGE_SCOPE,) and not kwargs.get("claims") \
                and token.expires_on - time.time() > 300:
            return token
        return self.chain.get_token(*scopes, **kwargs)

    def close(self) -> None:
        self.chain.close()


def _identity(location: Location) -> _Identity:
    from azure.identity import DefaultAzureCredential

    try:
        chain = DefaultAzureCredential(**{f"exclude_{name}_credential": True for name in _NOT_HERE})
    except ValueError as exc:  # azure-identity refuses its own configuration (AZURE_TOKEN_CREDENTIALS)
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise UsageError(f"Azure identity cannot be set up: {reason}; tau uses its environment, workload identity, "
                         "managed identity and Azure CLI sources") from None
    try:
        token = chain.get_token(STORAGE_SCOPE)
    except Exception:  # every failure of the chain; its message may quote an identity endpoint's answer: not shown
        raise Refused(f"no Azure identity gave a token for {location.account_url} (tried a service principal in the "
                      "environment, workload identity, managed identity and the Azure CLI); "
                      + what_to_set(location.account_url)) from None
    return _Identity(chain, token)


def credential(location: Location, environ: dict[str, str] | None = None) -> dict[str, str] | _Identity | None:
    """The credential for `location`: the connection string's key, else (https only) a checked Azure identity,
    else None (anonymous). azure-identity reads the process environment itself, never `environ`."""
    text = env.get("AZURE_STORAGE_CONNECTION_STRING", environ)
    if text:
        return _connection_string_key(text, location.account)
    if not location.account_url.startswith("https://"):
        return None  # azure-core refuses to send a token over plain http, and so does tau
    if not _identity_installed():
        return None
    return _identity(location)


def denied(what: str, exc: HttpResponseError) -> str:
    """The access-denied message of an SDK error `exc` (`denied_to`)."""
    assert exc.response is not None and exc.status_code is not None, "an access-denied error carries its answer"
    request = cast("HttpRequest", exc.response.request)  # azure-core types it `object`; it is an HttpRequest
    scheme = (request.headers.get("Authorization") or "").split(" ", 1)[0]
    return denied_to(what, exc.status_code, scheme, str(request.url))


def denied_to(what: str, code: int, scheme: str, url: str) -> str:
    """The access-denied message: which credential the request to `url` carried (the scheme of its
    Authorization, "" for none) and what to set."""
    if scheme == "Bearer":
        return (f"{what}: access denied ({code}): Blob storage refused the Azure identity's token (expired, for "
                "another tenant or audience, or the identity has no Storage Blob Data role on the container: Reader "
                "to fetch, Contributor to upload); grant the role, or set AZURE_STORAGE_CONNECTION_STRING")
    if scheme == "SharedKey":
        return (f"{what}: access denied ({code}): Blob storage refused the account key of "
                "AZURE_STORAGE_CONNECTION_STRING; check the key, or unset it to use an Azure identity")
    return f"{what}: access denied ({code}) to a request without credentials; {what_to_set(url)}"
