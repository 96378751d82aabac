"""Every environment variable tau reads or sets, in one table (`VARS`), and the way to read one: name, default,
parser, meaning, and who sets it. An executor's own variables (Slurm's, the local executor's) are declared by it
(`Executor.variables`, joined to this table by `taulib.executors.variables`) and read with `read`.

Reads: the process environment (or a mapping a caller passes instead, as tests do). Writes: nothing.
Promises: no module of tau reads `os.environ` itself; each asks `get(NAME)`, which applies the variable's parser and
default, so a variable means the same everywhere. A value that does not parse falls back to the default, except for
a `strict` variable, whose bad value is a usage error (exit 2) naming the variable.

Scopes (the `scope` column) say who sets a variable and where it is documented:
  user        set by a person or a script; documented in tau(1) ENVIRONMENT (a test checks the two agree)
  allocation  set by the scheduler or tau's local executor inside an allocation; read by tau-attempt
  client      set by tau for the client program of an attempt; documented in tau-run(5) "The client"
  memory      set by tau-collect for itself before its interpreter starts (`allocators`); documented in
              tau-collect(1) ENVIRONMENT; a value the caller set is kept
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

if TYPE_CHECKING:
    from typing import Callable, Literal, Mapping


T = TypeVar("T")


class Var(Generic[T]):
    """One variable: its name, default, parser (raises ValueError on a value that does not parse), meaning,
    scope, and whether a bad value is refused (strict) instead of falling back to the default. tau's own are in
    `VARS`; an executor declares its own (`Executor.variables`) and reads them with `read`."""

    __slots__ = ("name", "default", "parse", "meaning", "scope", "strict")

    def __init__(self, name: str, default: T, parse: Callable[[str], T], meaning: str,
                 scope: str = "user", strict: bool = False) -> None:
        self.name, self.default, self.parse, self.meaning = name, default, parse, meaning
        self.scope, self.strict = scope, strict


def seconds(text: str) -> float:
    return max(0.0, float(text))


def flag(text: str) -> bool:
    return text == "1"


def text(text: str) -> str:
    return text


def count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("negative")
    return value


def _origins(text: str) -> frozenset[str]:
    """`http://127.0.0.1:10000,https://host:8443` -> the set of normalised origins."""
    from urllib.parse import urlsplit

    origins = set()
    for item in text.split(","):
        item = item.strip().rstrip("/")
        if not item:
            continue
        parts = urlsplit(item)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query \
                or parts.fragment or parts.username or parts.password:
            raise ValueError(f"holds {item!r}, which is not an origin like http://127.0.0.1:10000")
        origins.add(f"{parts.scheme}://{parts.netloc.lower()}")
    return frozenset(origins)


def _failpoints(text: str) -> dict[str, str]:
    """`name=action;name2=action2` (also `,`) -> {name: action}; a name alone means crash. A name may be qualified
    by a command, `tau-submit:submit.prepared=crash`, to fire only in that command (not in the processes it
    starts, which inherit the environment)."""
    armed: dict[str, str] = {}
    for item in text.replace(",", ";").split(";"):
        item = item.strip()
        if item:
            name, _, action = item.partition("=")
            armed[name.strip()] = action.strip() or "crash"
    return armed


VARS: dict[str, Var[Any]] = {v.name: v for v in (
    Var("TAU_LOCK_TIMEOUT", 30.0, seconds, "seconds to wait for a lock another tau process holds (then exit 75)"),
    Var[dict[str, str]]("TAU_FAILPOINTS", {}, _failpoints,
                        "failpoints to arm, for tests: name=action pairs (taulib.failpoints)"),
    Var("TAU_FAILPOINT_ONCE", "", text, "the marker file of the once-crash failpoint action"),
    Var("TAU_FAILPOINT_TRACE", "", text, "a file each failpoint reached is appended to (COMMAND NAME), for tests"),
    Var("TAU_DEBUG", False, flag, "1: an unexpected error shows its traceback instead of the JSON error (70)"),
    Var("TAU_NO_RENAMEAT2", False, flag, "1: publish folders with the fallback instead of renameat2"),
    Var("TAU_BINDING_WAIT", 300.0, seconds, "seconds an allocation waits for its submission to be bound to it"),
    Var("TAU_SITE_PATH", "", text, "folders (':'-separated) searched first for a site profile NAME.json, before "
        "~/.config/tau/sites"),
    Var("HOME", "", text, "the home folder, where ~/.config/tau/sites holds the site profiles"),
    Var("TAU_IN_IMAGE", None, text, "set by tau for the tau it runs in the client's image (a collection there): the "
        "image's digest, as checked", "client"),
    Var[frozenset[str]]("TAU_TRUSTED_BLOB_ENDPOINTS", frozenset(), _origins,
                        "Blob storage origins trusted besides Azure's clouds", strict=True),
    Var("AZURE_STORAGE_CONNECTION_STRING", None, text, "the storage account key for Blob storage (a secret)"),
    Var("TAU_BLOB_RETRIES", 2, count, "retries of one Blob storage request", strict=True),
    Var("TAU_BLOB_READ_TIMEOUT", 60.0, seconds, "seconds one Blob storage read may take", strict=True),
    Var("TAU_BLOB_API_VERSION", None, text, "the Blob storage API version to ask for (for emulators)"),
    Var("REQUESTS_CA_BUNDLE", None, text, "certificates to trust for Blob storage instead of certifi's (as requests "
        "reads it)"),
    Var("CURL_CA_BUNDLE", None, text, "the same, when REQUESTS_CA_BUNDLE is unset (as requests reads it)"),
    Var("KUBECONFIG", None, text, "the kubeconfig file (else ~/.kube/config, else the in-cluster account)"),
    Var("VIRTUAL_ENV", None, text, "the virtual environment a person activated: tau-init accepts a program found in "
        "tau's own environment when it is the one activated"),
    # set inside an allocation by the scheduler (each executor's own: its `variables`, taulib.executors.variables)
    Var("CUDA_VISIBLE_DEVICES", None, text, "the GPUs the scheduler bound to the allocation", "allocation"),
    # set by tau for the client of an attempt
    Var("TAU_RUN_DIR", None, text, "the run directory", "client"),
    Var("TAU_RUN_ID", None, text, "the run id", "client"),
    Var("TAU_SHARD_ID", None, text, "the shard id", "client"),
    Var("TAU_SHARD_INDEX", None, text, "the shard index", "client"),
    Var("TAU_ATTEMPT_ID", None, text, "the attempt id", "client"),
    Var("TAU_ATTEMPT_ORDINAL", None, text, "the attempt's ordinal", "client"),
    Var("TAU_RECORD_START", None, text, "the first record of the shard", "client"),
    Var("TAU_RECORD_END", None, text, "the record after the shard's last", "client"),
    Var("TAU_OUTPUT_DIR", None, text, "the folder the client writes its Parquet files into", "client"),
    Var("TAU_OUTPUT_FORMAT", None, text, "the format the client writes (parquet)", "client"),
    Var("TAU_PROGRESS_FILE", None, text, "where the client may write how many of its records are done", "client"),
    Var("TAU_INPUT_FILE", None, text, "the shard's rows of the run's input, in its format (runs over a dataset)",
        "client"),
    Var("TAU_INPUT_FORMAT", None, text, "the input file's format: parquet, jsonl or csv (runs over a dataset)",
        "client"),
    Var("TAU_INPUT_PIECES", None, text, "a JSON file naming the source files, byte ranges and rows of the shard's "
        "rows (runs over a dataset)", "client"),
    Var("TAU_SERVICES_FILE", None, text, "the attempt's endpoints.json: every service's URLs (runs with services)",
        "client"),
    Var("TAU_SERVICE_", None, text, "the prefix of TAU_SERVICE_<NAME>_URL and TAU_SERVICE_<NAME>_URLS: a service's "
        "first backend's URL, and all of them (runs with services)", "client"),
    Var("TAU_SERVICE_NAME", None, text, "a service backend's service name", "client"),
    Var("TAU_SERVICE_BACKEND", None, text, "a service backend's number: 1, 2, ...", "client"),
    Var("TAU_SERVICE_PORT", None, text, "the port a service backend listens on (127.0.0.1)", "client"),
    # set by tau-collect for itself (the allocators read them only as a process starts)
    Var("ARROW_DEFAULT_MEMORY_POOL", "jemalloc", text, "Arrow's allocator: jemalloc, which returns freed pages",
        "memory"),
    Var("JE_ARROW_MALLOC_CONF", "narenas:1", text, "Arrow's jemalloc: one arena for all threads", "memory"),
    Var("MALLOC_MMAP_THRESHOLD_", "8388608", text, "glibc: blocks of 8 MiB and more (input buffers) mapped "
        "apart and unmapped when freed", "memory"),
    Var("MALLOC_TRIM_THRESHOLD_", "67108864", text, "glibc: free heap kept up to 64 MiB (no fault-in churn)",
        "memory"),
    Var("TAU_RESTARTED", False, flag, "1: this process already started itself again with those settings (never "
        "twice)", "memory"),
)}


# The type of each variable's value, for the type checker: its parser's, or None besides when that is its default
# (tests/test_typecheck.py checks these against the table). A name missing here is a type error at its caller.
@overload
def get(name: Literal["TAU_LOCK_TIMEOUT", "TAU_BINDING_WAIT", "TAU_BLOB_READ_TIMEOUT"],
        env: Mapping[str, str] | None = None) -> float: ...
@overload
def get(name: Literal["TAU_BLOB_RETRIES"], env: Mapping[str, str] | None = None) -> int: ...
@overload
def get(name: Literal["TAU_DEBUG", "TAU_NO_RENAMEAT2", "TAU_RESTARTED"], env: Mapping[str, str] | None = None
        ) -> bool: ...
@overload
def get(name: Literal["TAU_FAILPOINT_ONCE", "TAU_FAILPOINT_TRACE", "ARROW_DEFAULT_MEMORY_POOL", "JE_ARROW_MALLOC_CONF",
                      "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "TAU_SITE_PATH", "HOME"],
        env: Mapping[str, str] | None = None
        ) -> str: ...
@overload
def get(name: Literal["AZURE_STORAGE_CONNECTION_STRING", "TAU_BLOB_API_VERSION", "REQUESTS_CA_BUNDLE",
                      "CURL_CA_BUNDLE", "KUBECONFIG", "VIRTUAL_ENV", "CUDA_VISIBLE_DEVICES", "TAU_SERVICES_FILE",
                      "TAU_SERVICE_", "TAU_SERVICE_NAME", "TAU_SERVICE_BACKEND", "TAU_SERVICE_PORT", "TAU_RUN_DIR",
                      "TAU_RUN_ID", "TAU_SHARD_ID",
                      "TAU_SHARD_INDEX", "TAU_ATTEMPT_ID", "TAU_ATTEMPT_ORDINAL", "TAU_RECORD_START",
                      "TAU_RECORD_END", "TAU_OUTPUT_DIR", "TAU_OUTPUT_FORMAT", "TAU_PROGRESS_FILE", "TAU_IN_IMAGE",
                      "TAU_INPUT_FILE", "TAU_INPUT_FORMAT", "TAU_INPUT_PIECES"],
        env: Mapping[str, str] | None = None) -> str | None: ...
@overload
def get(name: Literal["TAU_TRUSTED_BLOB_ENDPOINTS"], env: Mapping[str, str] | None = None) -> frozenset[str]: ...
@overload
def get(name: Literal["TAU_FAILPOINTS"], env: Mapping[str, str] | None = None) -> dict[str, str]: ...
def get(name: str, env: Mapping[str, str] | None = None) -> object:
    """The parsed value of tau's variable NAME (from `env` when given, else the process environment)."""
    return read(VARS[name], env)


def read(var: Var[T], env: Mapping[str, str] | None = None) -> T:
    """The parsed value of a variable (from `env` when given, else the process environment): its parser's, or its
    default when unset or (unless strict) when it does not parse."""
    value = (os.environ if env is None else env).get(var.name)
    if not value:
        return var.default
    try:
        return var.parse(value)
    except ValueError as exc:
        if var.strict:
            from taulib.errors import UsageError

            detail = str(exc) if str(exc).startswith("holds") else f"holds {value[:100]!r}, which does not parse"
            raise UsageError(f"{var.name} {detail}") from None
        return var.default


def proxy_named(scheme: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether the environment names a proxy that may apply to URLs of `scheme`: SCHEME_PROXY or ALL_PROXY, in any
    case, with a value (as urllib reads them; which one applies, if any, is then the requests package's choice)."""
    wanted = (f"{scheme.lower()}_proxy", "all_proxy")
    return any(value and name.lower() in wanted for name, value in (os.environ if env is None else env).items())


def allocators(env: Mapping[str, str] | None = None, jemalloc: bool = True) -> dict[str, str]:
    """The `memory` variables this process still lacks (those the caller set are kept), with tau's values; without
    `jemalloc` (an Arrow built without it) Arrow's allocator and its settings are left alone. Empty: nothing to set.
    Reads: `env` (else the process environment)."""
    env = os.environ if env is None else env
    arrow = ("ARROW_DEFAULT_MEMORY_POOL", "JE_ARROW_MALLOC_CONF")
    if env.get("ARROW_DEFAULT_MEMORY_POOL") not in (None, "", "jemalloc"):
        jemalloc = False  # the caller chose another allocator: its jemalloc settings would be meaningless
    return {v.name: str(v.default) for v in VARS.values() if v.scope == "memory" and v.name != "TAU_RESTARTED"
            and not env.get(v.name) and (jemalloc or v.name not in arrow)}


def current() -> dict[str, str]:
    """A copy of the process environment: the base of a child process's environment."""
    return dict(os.environ)
