"""Artifact bundles: an output tree plus a generation-bound acknowledgement (manifest, then completion marker).

`endpoint` decides which Blob URLs may be contacted at all (pure), `manifest` describes and checks trees (pure
and local I/O), `blob` talks to Azure Blob storage, and `seal`, `verify`, `fetch` are the three commands' cores.
"""
