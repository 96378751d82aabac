"""Model services beside the client (tau-run(5) "Services"): the plan's `services` with their defaults, what they
ask of a task (GPUs, ports), how the GPUs an allocation was given are split between their backends, and the names
the client finds them by. Pure (tests/test_rules_services.py).

A service is a deployment of `backends` copies of one command, each on `gpus` GPUs of its own; the client gets no
GPU at all when the plan has services (the zero-GPU client). The GPUs are dealt in the allocation's order: the first
service's first backend takes the first `gpus` of them, its second backend the next, and so on, service after
service, so that no two backends share a device and the split is the same in every allocation given the same list.
"""

from __future__ import annotations

import re
from typing import Any

DEFAULTS: dict[str, Any] = {"env": {}, "backends": 1, "gpus": 0, "probe_seconds": 5, "probe_failures": 3,
                            "start_timeout": 1800, "stop_grace": 10, "ports": None}
PORT = "{port}"  # in a service's command (and its probe command): the backend's port
HOST = "127.0.0.1"  # where a backend listens and is probed; its URL is http://HOST:PORT
# the variables that say which GPUs a process may use (CUDA's, ROCm's, Level Zero's), as a scheduler sets them for an
# allocation: a backend's are its own devices, the client's are empty
DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
                    "ZE_AFFINITY_MASK")
_NOT_NAME = re.compile(r"[^A-Z0-9]")


def resolve(asked: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The plan's services from the request's: every field present, defaults filled in, in the request's order."""
    return [{**DEFAULTS, **service, "env": dict(service.get("env", {}))} for service in asked]


def env_name(name: str) -> str:
    """The part of the client's variables that names a service: its name upper-cased, every character other than
    A-Z and 0-9 written `_` (`gen-a` -> `GEN_A`)."""
    return _NOT_NAME.sub("_", name.upper())


def problem(services: list[dict[str, Any]], inherited: tuple[str, ...] = ()) -> str | None:
    """Why these (resolved) services cannot run together, or None: a name given twice or two names the client
    could not tell apart, a port list that is not one port per backend or a port given twice, a variable tau sets
    itself (PATH, TAU_*, the device variables) or that the plan inherits (`inherited`), a probe path that is not a
    path."""
    seen: dict[str, str] = {}
    ports: dict[int, str] = {}
    for index, service in enumerate(services):
        name, where = service["name"], f"services[{index}]"
        key = env_name(name)
        if key in seen:
            return (f"{where} is named {name!r}, and {seen[key]!r} already is; the client finds both as "
                    f"TAU_SERVICE_{key}_URL: give every service a name of its own")
        seen[key] = name
        given = service["ports"]
        if given is not None and len(given) != service["backends"]:
            return (f"{where} ({name!r}) gives {len(given)} port(s) for {service['backends']} backend(s); give one "
                    "port per backend, or none to let tau pick free ones")
        for port in given or ():
            if port in ports:
                return f"{where} ({name!r}) gives port {port}, which {ports[port]!r} uses already"
            ports[port] = name
        for variable in service["env"]:
            if variable == "PATH" or variable.startswith("TAU_") or variable in DEVICE_VARIABLES:
                return (f"{where} ({name!r}) sets {variable!r} in its env, which tau sets itself: PATH is the run's, "
                        "TAU_* are tau's and each backend's devices are the GPUs tau gives it")
            if variable in inherited:
                return f"{where} ({name!r}) sets {variable!r} in its env, which the plan inherits: give it in one place"
        path = service["ready"].get("http")
        if path is not None and not path.startswith("/"):
            return f"{where} ({name!r}) probes {path!r}, which is not a path: write it as /health"
    return None


def gpus_needed(services: list[dict[str, Any]]) -> int:
    """The GPUs one task's services use together: every backend's."""
    return sum(service["backends"] * service["gpus"] for service in services)


def split(devices: list[str], services: list[dict[str, Any]]) -> list[list[list[str]]] | None:
    """Each service's backends' devices (`[service][backend] -> ids`), dealt from `devices` in order without
    overlap; None when there are fewer devices than the services need."""
    if len(devices) < gpus_needed(services):
        return None
    out: list[list[list[str]]] = []
    at = 0
    for service in services:
        backends = []
        for _ in range(service["backends"]):
            backends.append(devices[at:at + service["gpus"]])
            at += service["gpus"]
        out.append(backends)
    return out


def parse_devices(text: str | None) -> list[str] | None:
    """The device ids of a list such as CUDA_VISIBLE_DEVICES (`0,1` or GPU UUIDs), in its order; None when it is
    not set, [] when it is set to nothing (or to NoDevFiles, as Slurm writes when it gave none)."""
    if text is None:
        return None
    ids = [item.strip() for item in text.split(",")]
    return [] if ids == ["NoDevFiles"] else [item for item in ids if item]


def url(port: int) -> str:
    """A backend's endpoint."""
    return f"http://{HOST}:{port}"


def argv(command: list[str], port: int) -> list[str]:
    """A service's (or its probe's) argument vector for the backend on `port`: every `{port}` replaced."""
    return [arg.replace(PORT, str(port)) for arg in command]


def backend_variables(service: dict[str, Any], backend: int, port: int, devices: list[str],
                      allocation: dict[str, str]) -> dict[str, str]:
    """What tau sets for backend `backend` (1, 2, ...) of `service`: its name, number and port, and its devices in
    CUDA_VISIBLE_DEVICES and in every other device variable the allocation had."""
    ids = ",".join(devices)
    out = {"TAU_SERVICE_NAME": service["name"], "TAU_SERVICE_BACKEND": str(backend), "TAU_SERVICE_PORT": str(port),
           "CUDA_VISIBLE_DEVICES": ids}
    out.update({name: ids for name in DEVICE_VARIABLES if name in allocation})
    return out


def client_devices(allocation: dict[str, str]) -> dict[str, str]:
    """The zero-GPU client's device variables: CUDA_VISIBLE_DEVICES empty, and every other device variable the
    allocation had."""
    return {"CUDA_VISIBLE_DEVICES": "", **{name: "" for name in DEVICE_VARIABLES if name in allocation}}


def endpoint_variables(urls: dict[str, list[str]], services_file: str) -> dict[str, str]:
    """The client's variables naming every service's endpoints: TAU_SERVICE_<NAME>_URL (its first backend),
    TAU_SERVICE_<NAME>_URLS (all of them, comma-separated), and TAU_SERVICES_FILE."""
    out = {"TAU_SERVICES_FILE": services_file}
    for name, found in urls.items():
        out[f"TAU_SERVICE_{env_name(name)}_URL"] = found[0]
        out[f"TAU_SERVICE_{env_name(name)}_URLS"] = ",".join(found)
    return out
