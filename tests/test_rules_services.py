"""taulib.rules.services: the plan's services with their defaults, what they ask of a task, how an allocation's
GPUs are dealt to their backends, and the names the client finds them by."""

from __future__ import annotations

import pytest

from taulib.rules import services

GEN = {"name": "generator", "command": ["vllm", "serve", "--port", "{port}"], "ready": {"http": "/health"}}


def resolved(**fields) -> dict:
    return services.resolve([{**GEN, **fields}])[0]


def test_a_service_gets_every_default_and_keeps_what_it_gives():
    assert services.resolve([GEN]) == [{
        "name": "generator", "command": ["vllm", "serve", "--port", "{port}"], "ready": {"http": "/health"},
        "env": {}, "backends": 1, "gpus": 0, "probe_seconds": 5, "probe_failures": 3, "start_timeout": 1800,
        "stop_grace": 10, "ports": None}]
    given = resolved(backends=4, gpus=2, env={"A": "1"}, probe_seconds=1, probe_failures=7, start_timeout=60,
                     stop_grace=0, ports=[1, 2, 3, 4])
    assert (given["backends"], given["gpus"], given["env"], given["probe_seconds"], given["probe_failures"],
            given["start_timeout"], given["stop_grace"], given["ports"]) == (4, 2, {"A": "1"}, 1, 7, 60, 0,
                                                                             [1, 2, 3, 4])


def test_resolving_copies_each_env_so_that_services_never_share_one():
    asked = [{**GEN}, {**GEN, "name": "judge"}]
    out = services.resolve(asked)
    out[0]["env"]["X"] = "1"
    assert out[1]["env"] == {} and services.DEFAULTS["env"] == {} and "env" not in asked[0]


@pytest.mark.parametrize("name, expected", [("generator", "GENERATOR"), ("gen-a", "GEN_A"), ("Judge_2", "JUDGE_2"),
                                            ("a.b", "A_B")])
def test_a_services_variable_name_is_upper_case_with_anything_else_an_underscore(name, expected):
    assert services.env_name(name) == expected


def test_services_that_can_run_together_have_no_problem():
    ok = [resolved(ports=[8000, 8001], backends=2, env={"HF_HOME": "/x"}),
          {**resolved(ready={"tcp": True}), "name": "judge"}, {**resolved(ready={"command": ["true"]}), "name": "x"}]
    assert services.problem(ok, ("OTHER",)) is None


@pytest.mark.parametrize("given, reserved, message", [
    ([resolved(), resolved()], (), "services[1] is named 'generator', and 'generator' already is; the client finds "
                                    "both as TAU_SERVICE_GENERATOR_URL: give every service a name of its own"),
    ([resolved(), {**resolved(), "name": "GENERATOR"}], (), "services[1] is named 'GENERATOR', and 'generator' "
     "already is; the client finds both as TAU_SERVICE_GENERATOR_URL: give every service a name of its own"),
    ([resolved(backends=2, ports=[1])], (), "services[0] ('generator') gives 1 port(s) for 2 backend(s); give one port "
                                            "per backend, or none to let tau pick free ones"),
    ([resolved(ports=[9]), {**resolved(ports=[9]), "name": "judge"}], (),
     "services[1] ('judge') gives port 9, which 'generator' uses already"),
    ([resolved(env={"PATH": "/x"})], (), "services[0] ('generator') sets 'PATH' in its env, which tau sets itself: "
     "PATH is the run's, TAU_* are tau's and each backend's devices are the GPUs tau gives it"),
    ([resolved(env={"TAU_X": "1"})], (), "services[0] ('generator') sets 'TAU_X' in its env"),
    ([resolved(env={"CUDA_VISIBLE_DEVICES": "0"})], (), "sets 'CUDA_VISIBLE_DEVICES' in its env"),
    ([resolved(env={"HF_TOKEN": "x"})], ("HF_TOKEN",), "services[0] ('generator') sets 'HF_TOKEN' in its env, which "
                                                       "the plan inherits: give it in one place"),
    ([resolved(ready={"http": "health"})], (), "services[0] ('generator') probes 'health', which is not a path: "
                                               "write it as /health"),
])
def test_services_that_cannot_run_together_are_refused_saying_why(given, reserved, message):
    assert message in services.problem(given, reserved)


def test_the_gpus_a_task_needs_are_every_backends():
    assert services.gpus_needed([]) == 0
    assert services.gpus_needed([resolved(backends=2, gpus=2), resolved(gpus=1), resolved(backends=3)]) == 5


def test_gpus_are_dealt_in_order_service_after_service_backend_after_backend_without_overlap():
    two, one = resolved(backends=2, gpus=1), {**resolved(gpus=2), "name": "judge"}
    assert services.split(["0", "1", "2", "3"], [one, two]) == [[["0", "1"]], [["2"], ["3"]]]
    assert services.split(["a", "b", "c", "d", "e"], [two, one]) == [[["a"], ["b"]], [["c", "d"]]]
    assert services.split([], [resolved(backends=2)]) == [[[], []]]


def test_too_few_gpus_split_into_nothing():
    assert services.split(["0", "1", "2"], [resolved(backends=2, gpus=2)]) is None
    assert services.split(["0", "1", "2", "3"], [resolved(backends=2, gpus=2)]) is not None


@pytest.mark.parametrize("text, expected", [(None, None), ("", []), ("NoDevFiles", []), ("0", ["0"]),
                                            ("0,1", ["0", "1"]), (" 2, 3 ,", ["2", "3"]),
                                            ("GPU-1a2b,GPU-3c4d", ["GPU-1a2b", "GPU-3c4d"])])
def test_a_device_list_reads_as_slurm_and_cuda_write_it(text, expected):
    assert services.parse_devices(text) == expected


def test_a_backend_listens_on_the_loopback_and_its_port_replaces_every_placeholder():
    assert services.url(8000) == "http://127.0.0.1:8000"
    assert services.argv(["serve", "--port={port}", "{port}{port}", "{ports}", "--x"], 8001) == \
        ["serve", "--port=8001", "80018001", "{ports}", "--x"]


def test_a_backend_gets_its_name_number_port_and_devices_in_every_device_variable_the_allocation_had():
    got = services.backend_variables(resolved(), 2, 8001, ["2", "3"], {"GPU_DEVICE_ORDINAL": "0,1,2,3", "X": "1"})
    assert got == {"TAU_SERVICE_NAME": "generator", "TAU_SERVICE_BACKEND": "2", "TAU_SERVICE_PORT": "8001",
                   "CUDA_VISIBLE_DEVICES": "2,3", "GPU_DEVICE_ORDINAL": "2,3"}
    assert services.backend_variables(resolved(), 1, 9, [], {})["CUDA_VISIBLE_DEVICES"] == ""


def test_the_client_gets_no_gpu_in_any_device_variable():
    assert services.client_devices({}) == {"CUDA_VISIBLE_DEVICES": ""}
    assert services.client_devices({"ROCR_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0,1", "SLURM_X": "1",
                                     "ZE_AFFINITY_MASK": "0"}) == \
        {"CUDA_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": "", "ZE_AFFINITY_MASK": ""}


def test_the_client_finds_each_service_by_its_first_url_and_all_of_them():
    got = services.endpoint_variables({"generator": ["http://127.0.0.1:1", "http://127.0.0.1:2"],
                                       "gen-b": ["http://127.0.0.1:3"]}, "/run/endpoints.json")
    assert got == {"TAU_SERVICES_FILE": "/run/endpoints.json",
                   "TAU_SERVICE_GENERATOR_URL": "http://127.0.0.1:1",
                   "TAU_SERVICE_GENERATOR_URLS": "http://127.0.0.1:1,http://127.0.0.1:2",
                   "TAU_SERVICE_GEN_B_URL": "http://127.0.0.1:3", "TAU_SERVICE_GEN_B_URLS": "http://127.0.0.1:3"}
