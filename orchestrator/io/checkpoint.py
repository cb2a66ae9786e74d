"""Checkpoints: everything needed to continue a run, written atomically to a path or a pyarrow.fs URI.

Layout under a run directory:
    checkpoints/round-000010/server.pt       round, global state, history, byte counters
    checkpoints/round-000010/manifest.json   round, server.pt's size and sha256, the previous checkpoint's
                                             round, and the client states changed since it (written last)
    checkpoints/LATEST                       the name of the newest complete checkpoint
    client_states/c7.r000009.pt              client 7's state after round 9 (orchestrator/clients/client_store.py)

Client states are not copied into a checkpoint: they are already in the run directory, one immutable file
per client and round it trained, written when that round ended. A checkpoint's manifest names, for each client
that trained since the previous checkpoint, the file its state is at this round (with its size and sha256), so
its size is proportional to the work since the previous one; the state of every client at this round is the
newest entry along the chain of previous checkpoints. The client store keeps every file a checkpoint names.

Client sampling and every client's randomness derive from (seed, round, client), so the round number is
the whole RNG state. Before a resume, `checkpoint_to_resume` checks a checkpoint against its manifest (and
the client state files along its chain) and loads each file with `weights_only=True` on the driver: loading
never executes pickled code, and a bad file is one line that names it and the newest intact checkpoint before it.
"""
from __future__ import annotations

import json
import re
from contextlib import suppress
from typing import Any

from orchestrator.io import storage
from orchestrator.io.history_codec import decoded
from orchestrator.io.state_files import states_dir, version_name

CHECKPOINT_NAME = re.compile(r"round-(\d{6,})")
FILES = ("server.pt",)
SNAPSHOT_KEYS = {"round", "state", "history", "bytes_total", "set_up"}


class CheckpointError(Exception):
    """A checkpoint that cannot be resumed from; the message is one line naming the bad file."""


def checkpoints_dir(run_dir: str) -> str:
    return storage.join(run_dir, "checkpoints")


def checkpoint_name(round_idx: int) -> str:
    return f"round-{round_idx:06d}"


def manifest_entry(data: bytes) -> dict[str, Any]:
    return storage.digest(data)


def write_checkpoint(run_dir: str, server_snapshot: dict[str, Any], changed: dict[int, dict[str, Any]],
                     previous: int | None) -> str:
    """`changed`: {client: {"round", "size", "sha256"}} of the client state files written since the checkpoint
    of round `previous` (None: since the start), as the client store reports them."""
    name = checkpoint_name(server_snapshot["round"])
    base = storage.join(checkpoints_dir(run_dir), name)
    files = {"server.pt": storage.torch_bytes(server_snapshot)}
    manifest = {"round": server_snapshot["round"], "files": {k: manifest_entry(v) for k, v in files.items()},
                "previous": previous, "client_states": {str(c): changed[c] for c in sorted(changed)}}
    new = not storage.exists(base)
    try:
        for file_name, data in files.items():
            storage.write_bytes_atomic(storage.join(base, file_name), data)
        storage.write_bytes_atomic(storage.join(base, "manifest.json"), json.dumps(manifest, indent=1).encode())
    except OSError:
        if new:  # half a checkpoint is none: a resume must not find it (the first one's would stop it)
            with suppress(OSError):
                storage.remove_tree(base)
        raise
    mark_latest(run_dir, name)
    return base


def mark_latest(run_dir: str, name: str) -> None:
    storage.write_bytes_atomic(storage.join(checkpoints_dir(run_dir), "LATEST"), name.encode())


def latest_checkpoint(run_dir: str | None) -> str | None:
    """The checkpoint LATEST names, if it names one of this run's checkpoints (never a path elsewhere)."""
    if not run_dir:
        return None
    marker = storage.join(checkpoints_dir(run_dir), "LATEST")
    if not storage.exists(marker):
        return None
    name = storage.read_bytes(marker).decode(errors="replace").strip()
    if not CHECKPOINT_NAME.fullmatch(name):
        return None
    return storage.join(checkpoints_dir(run_dir), name)


def checkpoint_rounds(run_dir: str) -> list[int]:
    """The rounds of the checkpoint directories present, ascending."""
    names = storage.list_dir(checkpoints_dir(run_dir))
    return sorted(int(m.group(1)) for m in map(CHECKPOINT_NAME.fullmatch, names) if m)


# ------------------------------------------------------------------------------------- verification
def verify_checkpoint(checkpoint: str) -> None:
    """Raise CheckpointError naming the first bad file: a manifest missing or unreadable (this checkpoint's or
    one along its chain), a file missing, of the wrong size or hash, or not loadable as tensors and plain
    containers."""
    manifest = read_manifest(checkpoint)
    round_idx = manifest["round"]
    for name in FILES:
        path = storage.join(checkpoint, name)
        contents = load_safely(path, checked_bytes(path, manifest["files"][name]))
        if name == "server.pt":
            check_server_snapshot(path, contents, round_idx)
    for path, entry in client_state_files(checkpoint).values():
        load_safely(path, checked_bytes(path, entry))


def check_server_snapshot(path: str, contents, round_idx: int) -> None:
    """CheckpointError unless `contents` (server.pt at `path`) is a server snapshot of `round_idx` whose history
    can be read."""
    if not isinstance(contents, dict) or not SNAPSHOT_KEYS <= set(contents) or contents["round"] != round_idx:
        raise CheckpointError(f"{path}: not a server snapshot of round {round_idx}")
    try:
        decoded(contents["history"])
    except ValueError as e:
        raise CheckpointError(f"{path}: its history cannot be read ({e})") from None


def read_manifest(checkpoint: str) -> dict[str, Any]:
    manifest_path = storage.join(checkpoint, "manifest.json")
    if not storage.exists(manifest_path):
        raise CheckpointError(f"{manifest_path}: missing (the checkpoint is incomplete or predates manifests)")
    try:
        manifest = json.loads(storage.read_bytes(manifest_path))
        if "clients.pt" in manifest.get("files", {}):
            raise CheckpointError(f"{manifest_path}: a checkpoint of an earlier format (every client state copied "
                                  "into clients.pt), which this version does not resume")
        manifest["files"] = {name: manifest["files"][name] for name in FILES}
        manifest["round"] = int(manifest["round"])
        previous = manifest["previous"]
        if previous is not None and not 0 <= int(previous) < manifest["round"]:
            raise ValueError(f"previous checkpoint {previous} is not an earlier round")
        manifest["client_states"] = {int(c): {"round": int(e["round"]), "size": int(e["size"]),
                                              "sha256": str(e["sha256"])}
                                     for c, e in manifest["client_states"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{manifest_path}: not a valid manifest ({type(e).__name__}: {e})") from None
    return manifest


def client_state_files(checkpoint: str) -> dict[int, tuple[str, dict[str, Any]]]:
    """{client: (path, manifest entry)} of every client's state at this checkpoint: the newest entry along the
    chain of previous checkpoints (a client that never trained has none)."""
    base = storage.parent(checkpoint)
    states = states_dir(storage.parent(base))
    files: dict[int, tuple[str, dict[str, Any]]] = {}
    while checkpoint is not None:
        manifest = read_manifest(checkpoint)
        for cid, entry in manifest["client_states"].items():
            files.setdefault(cid, (storage.join(states, version_name(cid, entry["round"])), entry))
        previous = manifest["previous"]
        checkpoint = None if previous is None else storage.join(base, checkpoint_name(int(previous)))
    return files


def checked_bytes(path: str, expected: dict[str, Any]) -> bytes:
    """The file's bytes, if they have the size and sha256 the manifest gives."""
    if not storage.exists(path):
        raise CheckpointError(f"{path}: missing")
    data = storage.read_bytes(path)
    if manifest_entry(data) != {"size": expected.get("size"), "sha256": expected.get("sha256")}:
        raise CheckpointError(f"{path}: {len(data)} bytes with sha256 {manifest_entry(data)['sha256'][:12]}…, "
                              f"the manifest says {expected.get('size')} bytes with sha256 "
                              f"{str(expected.get('sha256'))[:12]}… (truncated or altered)")
    return data


def load_safely(path: str, data: bytes):
    import pickle

    try:
        return storage.torch_load_safe(data)
    except pickle.UnpicklingError as e:
        refused = next((line.strip() for line in str(e).splitlines() if "Unsupported" in line), "")
        raise CheckpointError(f"{path}: holds objects other than tensors and plain containers, refused without "
                              f"running them ({refused[:160] or 'UnpicklingError'})") from None
    except Exception as e:  # noqa: BLE001 - truncated zip, wrong format, anything else: all mean "bad file"
        first = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
        raise CheckpointError(f"{path}: not a loadable checkpoint file ({type(e).__name__}: {first})") from None


def newest_intact_before(run_dir: str, round_idx: int) -> int | None:
    for earlier in reversed([r for r in checkpoint_rounds(run_dir) if r < round_idx]):
        try:
            verify_checkpoint(storage.join(checkpoints_dir(run_dir), checkpoint_name(earlier)))
            return earlier
        except CheckpointError:
            continue
    return None


def checkpoint_to_resume(run_dir: str, from_round: int | None = None) -> str | None:
    """The verified checkpoint a resume starts from: LATEST's, or round `from_round`'s; None when the run
    has none yet (it starts from round 0). Any problem is one CheckpointError line with the way out."""
    rounds = checkpoint_rounds(run_dir)
    if from_round is not None:
        if from_round not in rounds:
            have = ", ".join(map(str, rounds)) or "none"
            raise CheckpointError(f"--from-round {from_round}: {run_dir} has no checkpoint of that round "
                                  f"(checkpointed rounds: {have})")
        round_idx = from_round
    else:
        marker = storage.join(checkpoints_dir(run_dir), "LATEST")
        if not storage.exists(marker):
            if rounds:
                raise CheckpointError(f"{marker}: missing although checkpoints exist; "
                                      + way_out(run_dir, newest_intact_before(run_dir, rounds[-1] + 1), "is"))
            return None
        name = storage.read_bytes(marker).decode(errors="replace").strip()
        match = CHECKPOINT_NAME.fullmatch(name)
        if not match or int(match.group(1)) not in rounds:
            shown = name if name.isprintable() else name.encode("unicode_escape").decode()
            newest = rounds[-1] + 1 if rounds else 0
            raise CheckpointError(f"{marker}: names {shown[:80]!r}, not a checkpoint of this run; "
                                  + way_out(run_dir, newest_intact_before(run_dir, newest), "is"))
        round_idx = int(match.group(1))
    checkpoint = storage.join(checkpoints_dir(run_dir), checkpoint_name(round_idx))
    try:
        verify_checkpoint(checkpoint)
    except CheckpointError as e:
        raise CheckpointError(f"{e}; {way_out(run_dir, newest_intact_before(run_dir, round_idx))}") from None
    return checkpoint


def way_out(run_dir: str, intact_round: int | None, relation: str = "before it is") -> str:
    if intact_round is None:
        return "no intact checkpoint to resume from: start the run again"
    return (f"the newest intact checkpoint {relation} round {intact_round}: resume with "
            f"`mooring run --resume {run_dir} --from-round {intact_round}`")


# -------------------------------------------------------------------------------------------- loading
def load_server_snapshot(checkpoint: str) -> dict[str, Any]:
    return storage.torch_load_safe(storage.read_bytes(storage.join(checkpoint, "server.pt")))
