"""Where logical clients' persistent states live: a bounded set in memory, every state written on disk.

A client's state is written when its round ends, as an immutable version: `<dir>/c<client>.r<round>.pt`
holds its state after round <round> (1-based, as checkpoints are named), and is read back when the client is
sampled again. Up to `resident` states stay in memory as well (least recently used out first), so the memory an
actor needs does not grow with its number of clients. The versions are what make this exact:

- a round (or an evaluation) reads each client's newest version up to the rounds done, so a round retried
  after its actor was killed reads what the first attempt read, whatever that attempt wrote before it died;
- a checkpoint names, for each client trained since the previous one, the version it stands on
  (orchestrator/io/checkpoint.py): resuming from any kept checkpoint, the newest version up to its round is the
  state it recorded, and versions written after it (by a run that went on, or was killed) are deleted when the
  clients are loaded;
- a client's older versions are deleted as it writes new ones, and at checkpoints, unless a checkpoint stands on
  them or the round in progress read them.

A checkpoint's work here is proportional to the clients written since the previous one, not to every client
that ever trained: the store indexes its versions by round, and remembers which clients it wrote since it last
pruned (only those can have a version to delete while the checkpoints kept only grow).

Without a directory (a run in one process with no run directory) the states just stay in memory.
A client that has never trained has no state here: its host starts it from `init_client`.
"""
from __future__ import annotations

import bisect
from collections import OrderedDict
from typing import Any

from orchestrator.io import storage
from orchestrator.io.state_files import VERSION_FILE, version_name

FRESH = -1  # the version of a state made by init_client: kept in memory only, never written


class ClientStateStore:
    """The states of one actor's clients. `get(cid, upto)`: its newest state after at most `upto` rounds
    (None: it has none); `put(cid, state, rounds)`: its state after round `rounds`, written through to disk.

    `resident`: how many states to keep in memory besides writing them (None: all). With `directory`, loading
    lists that directory once for `client_ids` and deletes their versions after `upto` rounds (see above)."""

    def __init__(self, directory: str | None = None, resident: int | None = None,
                 client_ids: list[int] | None = None, upto: int | None = None, keep: list[int] | None = None):
        self.directory = directory
        self.keep = list(keep or [])  # the rounds of the run's checkpoints: the versions they name stay
        self.resident = resident if directory is not None else None
        self.cache: OrderedDict[int, tuple[int, Any]] = OrderedDict()  # client -> (version, state), LRU order
        self.versions: dict[int, list[int]] = {}  # client -> the versions on disk, ascending
        self.entries: dict[tuple[int, int], dict[str, Any]] = {}  # (client, version) -> size, sha256 as written
        self.by_round: dict[int, set[int]] = {}  # version -> the clients with that version on disk
        self.unpruned: set[int] = set()  # clients that may have a version to delete at the next `prune`
        self.pruned_until: int | None = None  # `until` of the last `prune`
        if directory is not None:
            self._load(set(client_ids) if client_ids is not None else None, upto)

    def _load(self, wanted: set[int] | None, upto: int | None) -> None:
        for name in storage.list_dir(self.directory):
            match = VERSION_FILE.fullmatch(name)
            if not match or (wanted is not None and int(match.group(1)) not in wanted):
                continue
            cid, rounds = int(match.group(1)), int(match.group(2))
            if upto is not None and rounds > upto:  # written after the round the run is at: never happened now
                storage.delete_file(storage.join(self.directory, name))
            else:
                self.versions.setdefault(cid, []).append(rounds)
                self.by_round.setdefault(rounds, set()).add(cid)
        for rounds in self.versions.values():
            rounds.sort()
        self.unpruned = set(self.versions)  # versions left by an actor that died: any may be stale

    # ------------------------------------------------------------------ dict-like access
    def get(self, cid: int, upto: int | None = None) -> Any | None:
        version = self.version(cid, upto)
        cached = self.cache.get(cid)
        if cached is not None and cached[0] == version:
            self.cache.move_to_end(cid)
            return cached[1]
        if version is None or version == FRESH:
            return None
        state = storage.torch_load_safe(storage.read_bytes(self.path(cid, version)))
        self._keep(cid, version, state)
        return state

    def put(self, cid: int, state: Any, rounds: int) -> None:
        """`state` is the client's after round `rounds` (1-based): written at once, kept in memory if room."""
        if self.directory is not None:
            data = storage.torch_bytes(state)
            storage.write_bytes_atomic(self.path(cid, rounds), data)
            self.entries[(cid, rounds)] = storage.digest(data)
            versions = self.versions.setdefault(cid, [])
            if rounds not in versions:
                bisect.insort(versions, rounds)
                self.by_round.setdefault(rounds, set()).add(cid)
            self.unpruned.add(cid)
            self._prune_client(cid, rounds - 1)  # the version this round started from stays until it ends
        self._keep(cid, rounds, state)

    def keep_fresh(self, cid: int, state: Any) -> None:
        """A state made by init_client, kept in memory for reuse (never written: it is made again if needed)."""
        if self.version(cid) is None:
            self._keep(cid, FRESH, state)

    def version(self, cid: int, upto: int | None = None) -> int | None:
        """The version `get(cid, upto)` returns: the newest written up to `upto`, FRESH, or None."""
        if self.directory is None:
            cached = self.cache.get(cid)
            return cached[0] if cached is not None else None
        versions = self.versions.get(cid, [])
        idx = bisect.bisect_right(versions, upto) if upto is not None else len(versions)
        if idx:
            return versions[idx - 1]
        cached = self.cache.get(cid)
        return FRESH if cached is not None and cached[0] == FRESH else None

    # ------------------------------------------------------------------ checkpoints
    def changed(self, since: int | None, until: int) -> dict[int, dict[str, Any]]:
        """{client: {"round", "size", "sha256"}} of each client whose state after `until` rounds was written
        after round `since` (None: at all): what a checkpoint of round `until` records, the previous one being
        of round `since`. Only the clients with a version written in rounds since+1..until are looked at."""
        if since is None:
            candidates: set[int] = set(self.versions)
        else:
            candidates = set().union(*(self.by_round.get(r, ()) for r in range(since + 1, until + 1)))
        out: dict[int, dict[str, Any]] = {}
        for cid in sorted(candidates):
            version = self.version(cid, until)
            if version is not None and version >= 0 and (since is None or version > since):
                out[cid] = {"round": version, **self._entry(cid, version)}
        return out

    def prune(self, keep: list[int], until: int) -> int:
        """With `keep` the rounds of the run's checkpoints now, delete every version nothing reads any more.
        Returns how many files were deleted.

        While the checkpoints kept only grow and `until` does not go back, a client not written since the last
        prune has nothing to delete (every version it has was needed then, and still is), so only the clients
        written since are looked at; otherwise every client is."""
        grows = set(self.keep) <= set(keep) and (self.pruned_until is None or until >= self.pruned_until)
        self.keep = list(keep)
        cids = sorted(self.unpruned) if grows else list(self.versions)
        deleted = sum(self._prune_client(cid, until) for cid in cids)
        # a version after `until` is needed now but may not be at the next prune
        self.unpruned = {cid for cid in cids if self.versions[cid] and self.versions[cid][-1] > until}
        self.pruned_until = until
        return deleted

    def _prune_client(self, cid: int, until: int) -> int:
        """Delete the client's versions but its newest up to each checkpoint's round and up to `until` (the
        round the run is at), and those after `until`; so a client has at most two files besides those its
        checkpoints name, whatever the checkpoint interval."""
        versions = self.versions[cid]
        needed = {self.version(cid, r) for r in [*self.keep, until]} | {v for v in versions if v > until}
        stale = [v for v in versions if v not in needed]
        for version in stale:
            storage.delete_file(self.path(cid, version))
            self.entries.pop((cid, version), None)
            versions.remove(version)
            self.by_round[version].discard(cid)
        return len(stale)

    def _entry(self, cid: int, version: int) -> dict[str, Any]:
        """Size and sha256 of a version: as written, or read back (a restarted actor did not write it)."""
        if (cid, version) not in self.entries:
            self.entries[(cid, version)] = storage.digest(storage.read_bytes(self.path(cid, version)))
        return self.entries[(cid, version)]

    def _keep(self, cid: int, version: int, state: Any) -> None:
        self.cache[cid] = (version, state)
        self.cache.move_to_end(cid)
        while self.resident is not None and len(self.cache) > self.resident:
            self.cache.popitem(last=False)

    def path(self, cid: int, rounds: int) -> str:
        return storage.join(self.directory, version_name(cid, rounds))

    def clients(self) -> list[int]:
        """The clients with a state (written, or in memory), ascending."""
        return sorted(set(self.versions) | set(self.cache))

    def __contains__(self, cid: int) -> bool:
        return self.version(cid) is not None

    def __getitem__(self, cid: int) -> Any:
        state = self.get(cid)
        if state is None:
            raise KeyError(cid)
        return state

    def items(self):
        return ((cid, self[cid]) for cid in self.clients())

    def resident_clients(self) -> list[int]:
        return list(self.cache)
