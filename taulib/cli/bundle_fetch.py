"""tau-bundle-fetch: verify and download a complete bundle generation from Blob storage, all or nothing."""

from __future__ import annotations

from typing import Any

import click

from taulib.cli import common

EXAMPLE = """
tau-bundle-fetch https://acct.blob.core.windows.net/bundles/run-1/out --generation g7 --destination out-g7
tau-bundle-fetch https://acct.blob.core.windows.net/bundles/run-1/out --current --destination latest -o table
tau-bundle-fetch --run runs/demo --shard shard-00003 --destination shard3-out
tau-bundle-fetch --run runs/demo --collection collection-0001 --destination demo-dataset   # tau-collect --upload
tau-bundle-fetch --kubernetes train-7 -n team-a --destination train-7-out
"""
# the "workload" object of the output with --kubernetes: every key always present (pvc, pv, resource_group null
# unless the store was discovered from the result PVC and its PV)
WORKLOAD_KEYS = ("kind", "name", "namespace", "discovered", "pvc", "pv", "resource_group", "generation_from")


@common.command("tau-bundle-fetch", "Download generation G of the bundle under a Blob URL into DESTINATION, all or "
                "nothing: the URL must be trusted (checked before any request), the generation acknowledged, the "
                "listing equal to its manifest; every blob is hashed while it downloads into a private stage beside "
                "DESTINATION, which is published only when every size and sha256 matched. DESTINATION must be "
                "absent or an empty folder. Stopped by a signal, it removes its stage before it exits.", EXAMPLE)
@click.argument("source", metavar="[SOURCE]", required=False)
@click.option("--destination", metavar="DIR", required=True,
              help="Where the bundle goes: absent, or an empty folder; never overwritten.")
@click.option("--generation", metavar="G",
              help="The generation to fetch, from trusted metadata (the run's records, a workload's annotation).")
@click.option("--current", is_flag=True,
              help="Follow the mutable pointer .tau/current instead of naming the generation (with --kubernetes: "
              "only for a workload that names none).")
@click.option("--run", "run_dir", metavar="RUN_DIR",
              help="Instead of SOURCE: the tau run whose records say where its bundle went (and its generation).")
@click.option("--shard", metavar="SHARD_ID", type=common.SHARD,
              help="With --run: the bundle of this shard (an id or a number, shard-00003 or 3).")
@click.option("--collection", "collection_id", metavar="COLLECTION_ID",
              help="With --run: the dataset that collection uploaded (tau-collect --upload; an id or a number, "
              "collection-0001 or 1); its prefix and generation come from the run's records.")
@click.option("--kubernetes", "workload", metavar="NAME",
              help="Instead of SOURCE: the Job or RayJob whose tau.azure.com annotations say where its bundle is "
              "(and its generation); without the artifact-store annotation, found read-only from its result PVC "
              "and that claim's Azure Blob PV.")
@click.option("-n", "--namespace", metavar="NS",
              help="With --kubernetes: the namespace (default: the kubeconfig context's).")
@common.progress_option
@common.output_option
def cli(source: str | None, destination: str, generation: str | None, current: bool, run_dir: str | None,
        shard: str | None, collection_id: str | None, workload: str | None, namespace: str | None,
        progress: bool | None, output: str) -> None:
    from taulib.bundle import fetch
    from taulib.errors import UsageError

    if workload is not None and run_dir is not None:
        raise UsageError("--kubernetes and --run exclude each other")
    if collection_id is not None:
        collection_id = _collection(collection_id)
        if run_dir is None or workload is not None or source is not None or shard is not None or current:
            raise UsageError("--collection goes with --run alone: the run's records name the prefix and the "
                             "generation (give none of SOURCE, --shard, --kubernetes and --current)")
    if namespace is not None and workload is None:
        raise UsageError("--namespace goes with --kubernetes")
    if workload is not None:
        if source is not None:
            raise UsageError("--kubernetes names the source: give no SOURCE")
        if shard is not None:
            raise UsageError("--shard goes with --run")
        from taulib.bundle import kube

        found = kube.resolve(workload, namespace, generation=generation, current=current)
        source, generation = found["url"], found["generation"]
        resolved = {key: found[key] for key in WORKLOAD_KEYS}
    elif run_dir is not None:
        if source is not None or current:
            raise UsageError("--run names the source and the generation: give neither SOURCE nor --current")
        from taulib.bundle import where

        ref = where.resolve(run_dir, shard, generation, collection_id)
        source, generation = ref["url"], ref["generation"]
    elif source is None:
        raise UsageError("missing SOURCE (a Blob URL), or --run RUN_DIR, or --kubernetes NAME")
    elif shard is not None:
        raise UsageError("--shard goes with --run")
    result = fetch.fetch(source, destination, generation, current=current, progress=progress)
    if workload is not None:
        result["workload"] = resolved
    if output == "table":
        common.emit_text(f"fetched bundle generation {result['generation']}: {result['files']} files, "
                         f"{result['bytes']} bytes, every sha256 checked\nsource       {result['source']}\n"
                         f"destination  {result['destination']}"
                         + (_workload_lines(resolved) if workload is not None else ""))
    else:
        common.emit(result)


def _collection(value: str) -> str:
    """A collection as a person names it: `collection-0001`, or its number (`1`); anything else as typed (no
    record has it: 66)."""
    return f"collection-{int(value):04d}" if value.isdigit() else value


def _workload_lines(resolved: dict[str, Any]) -> str:
    store = ("its tau.azure.com/artifact-store annotation" if resolved["discovered"] == "annotation" else
             f"PersistentVolumeClaim {resolved['pvc']}, PersistentVolume {resolved['pv']}"
             + (f" (resource group {resolved['resource_group']})" if resolved["resource_group"] else ""))
    generation = {"annotation": "its tau.azure.com/artifact-bundle-id annotation", "option": "--generation",
                  "current": "the pointer .tau/current"}[resolved["generation_from"]]
    return (f"\nworkload     {resolved['kind']} {resolved['name']} in namespace {resolved['namespace']}"
            f"\nstore        from {store}\ngeneration   from {generation}")


main = common.main_for("tau-bundle-fetch", cli)

if __name__ == "__main__":
    main()
