"""Durable shell scripts, the orchestrator's side: their texts in the blob store
(texts.py), the script workflows stored through the API (registry.py), and the view of
every workflow a run may name, the manifest's and the stored ones (catalog.py).

A script's run is a durable run like any other: its one driver step calls a script
host (a backend with the `shell` capability) at POST /durable/<name>, and each call
names the script by the hash of its text (`ScriptRef`), so the run replays on the
text it started on."""
