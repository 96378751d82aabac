"""Artifact bundles: an output tree plus a generation-bound acknowledgement (manifest, then completion marker).

`seal`, `verify` and `fetch` are the three commands' cores, over `manifest` (trees described and checked) and
`endpoint` (which Blob URLs may be contacted at all); Blob storage is read without the SDK (`rest`) and written
with it (`blob`, `upload`).

  endpoint     which Blob URLs may be contacted at all, decided from the URL alone (pure)
  manifest     manifests and completion markers; describing and checking a local output tree
  seal         tau-bundle-seal: an output tree acknowledged as one generation's complete bundle
  verify       tau-bundle-verify: a generation checked, in a local tree or under a Blob prefix
  fetch        tau-bundle-fetch: a generation from Blob storage into a local folder, verified, all or nothing
  claim        a fetch's claim on its destination, and the name of its stage
  where        RUN/bundles/G.json: where a run's uploaded generations went
  kube         where a Kubernetes workload's bundle is: its annotations, or a legacy PersistentVolume
  credentials  which credential a Blob storage request carries, and what an access-denied error says
  blob         Azure Blob storage through the SDK: clients, listing, reading, other generations' claims
  upload       uploading a sealed generation, never over a blob another generation's manifest names
  rest         Blob storage read without the SDK: List Blobs and Get Blob, signed here
  connections  rest's kept-alive connections to the endpoint when no proxy applies
  transfer     a bundle's blobs downloaded (or only hashed): the large ones in ranges, then the small ones
  small_blobs  the small blobs when no proxy applies: GETs multiplexed in one thread, files fsynced on a few
  multiplex    many GETs multiplexed over kept-alive connections with selectors, in the calling thread
  threads      the threads transfers run on, always joined, and the one wait a stop signal may cut
"""
