"""A dataset split over clients: what client actors and the coordinator read their data from.

Built once by the driver and put in Ray's object store, so every actor on a node shares one copy. With a
validation split (data.validation_fraction) evaluated on (eval.split: validation), each client's validation
samples stand in for its test split and their union for the global test set, so such a run reads no test data.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from tasks.data.datasets import ArrayDataset, normalize_images
from tasks.data.partition import Partition, rotate_images
from tasks.types import ClientData


@dataclass
class FederatedData:
    dataset: ArrayDataset
    partition: Partition
    angles: list[float] = field(default_factory=lambda: [0.0])
    normalize: str = "none"
    partition_hash: str = ""
    validation: list[np.ndarray] = field(default_factory=list)  # per client: held out of its training samples
    evaluate_on: str = "test"  # or "validation": the held-out samples replace every test set
    test_at_one_angle: bool = False  # test image j at angle j mod len(angles) only (data.domains.test)

    @property
    def num_clients(self) -> int:
        return self.partition.num_clients

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.dataset.input_shape

    def _view(self, x: np.ndarray, domain: int) -> torch.Tensor:
        """The images as this domain sees them: rotated, then normalised, in a tensor of its own (token ids as
        they are)."""
        if not np.issubdtype(x.dtype, np.floating):
            return torch.from_numpy(np.array(x, dtype=np.int64))
        view = normalize_images(rotate_images(x, self.angles[domain]), self.normalize)
        return torch.from_numpy(np.array(view, dtype=np.float32))

    def _held_out(self, client_id: int) -> np.ndarray:
        """The client's evaluation samples (indices into the training set): its test or its validation split."""
        return self.validation[client_id] if self.evaluate_on == "validation" else self.partition.test[client_id]

    def _global_held_out(self) -> tuple[np.ndarray, np.ndarray]:
        """The global evaluation set: the test set, or every client's validation samples together."""
        ds = self.dataset
        if self.evaluate_on != "validation":
            return ds.x_test, ds.y_test
        rows = np.concatenate(self.validation) if self.validation else np.zeros(0, dtype=np.int64)
        return ds.x_train[rows], ds.y_train[rows]

    def test_sets(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """The global test set, once per domain (rotated by each angle); one entry without domains."""
        x, y_np = self._global_held_out()
        y = torch.tensor(y_np)
        if len(self.angles) == 1:
            return {"test": (self._view(x, 0), y)}
        n = len(self.angles)
        if self.test_at_one_angle:
            return {f"rot{a:g}": (self._view(x[d::n], d), y[d::n]) for d, a in enumerate(self.angles)}
        return {f"rot{a:g}": (self._view(x, d), y) for d, a in enumerate(self.angles)}

    def train_sizes(self) -> list[int]:
        """Each client's number of training samples (what its local work scales with)."""
        return [len(idx) for idx in self.partition.train]

    def global_test(self, domain: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The global test set as a client of this domain sees it (rotated by its angle)."""
        x, y = self._global_held_out()
        return self._view(x, domain), torch.tensor(y)

    def clients_data(self, client_ids: list[int]) -> list[ClientData]:
        """`client_data` of many clients, each domain's images viewed (rotated, normalised) in one pass over their
        rows rather than one pass per client: the same values (every step is per image), in one tensor per
        domain of which each client's are slices."""
        ds, out = self.dataset, {}
        domains = self.partition.domain[client_ids] if len(client_ids) else []
        for d in sorted(set(int(v) for v in domains)):
            group = [c for c, cd in zip(client_ids, domains) if cd == d]
            rows = [self.partition.train[c] for c in group] + [self._held_out(c) for c in group]
            lengths = [len(r) for r in rows]
            picked = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
            xs = self._view(ds.x_train[picked], d).split(lengths)
            ys = torch.tensor(ds.y_train[picked]).split(lengths)
            for i, c in enumerate(group):
                j = i + len(group)
                out[c] = ClientData(client_id=c, x=xs[i], y=ys[i], x_test=xs[j], y_test=ys[j],
                                    num_classes=ds.num_classes, domain=d)
        return [out[c] for c in client_ids]

    def client_data(self, client_id: int, with_global_test: bool = False) -> ClientData:
        d = int(self.partition.domain[client_id])
        tr, te = self.partition.train[client_id], self._held_out(client_id)
        ds = self.dataset
        data = ClientData(
            client_id=client_id,
            x=self._view(ds.x_train[tr], d), y=torch.tensor(ds.y_train[tr]),
            x_test=self._view(ds.x_train[te], d), y_test=torch.tensor(ds.y_train[te]),
            num_classes=ds.num_classes, domain=d,
        )
        if with_global_test:
            data.global_x_test, data.global_y_test = self.global_test(d)
        return data
