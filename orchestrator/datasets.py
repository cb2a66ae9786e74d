"""From a config to a FederatedData: load the dataset, make or reload its stored partition."""
from __future__ import annotations

import hashlib
import io
import json

import pyarrow.parquet as pq

from orchestrator import storage
from tasks.data.datasets import load_dataset
from tasks.data.federated import FederatedData
from tasks.data.partition import Partition, make_partition

# Options added after partitions were first stored: left out of the key at their defaults, so the files stored
# before them are still found (the partitions are the same).
LATER_OPTIONS = {"max_draws": 1000, "repair": False}


def partition_key(cfg) -> str:
    spec = {"data": cfg.data.model_dump(mode="json", exclude={"root", "download", "partitions_dir"}),
            "seed": cfg.seed, "split_seed": cfg.split_seed}
    for name, default in LATER_OPTIONS.items():
        if spec["data"]["partition"][name] == default:
            del spec["data"]["partition"][name]
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def load_or_make_partition(cfg, y_train) -> tuple[Partition, str]:
    """The stored partition for this exact data spec and seed, or a new one, written once as Parquet."""
    uri = storage.join(cfg.data.partitions_dir, f"partition-{partition_key(cfg)}.parquet")
    if storage.exists(uri):
        return load_partition(uri, cfg.data.num_clients), uri
    partition = make_partition(y_train, cfg.data, cfg.seed)
    store_partition(partition, uri)
    return partition, uri


def store_partition(partition: Partition, uri: str) -> None:
    table = partition.to_table()
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), "content_hash": partition.content_hash()})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    storage.write_bytes_atomic(uri, buf.getvalue())


def load_partition(uri: str, num_clients: int) -> Partition:
    # Read in this thread alone: with Arrow's own threads (pre-buffering reads on its IO pool) a read in a
    # thread of a process that then exits at once can have Arrow take the GIL during the interpreter's
    # shutdown, which aborts the process (`mooring run` reads it in a thread while Ray starts).
    table = pq.read_table(io.BytesIO(storage.read_bytes(uri)), use_threads=False, pre_buffer=False)
    return Partition.from_table(table, num_clients)


def prepare_data(cfg) -> FederatedData:
    dataset = load_dataset(_loader_options(cfg))
    partition, _ = load_or_make_partition(cfg, dataset.y_train)
    angles = cfg.data.domains.angles if cfg.data.domains.kind == "rotation" else [0.0]
    return FederatedData(dataset, partition, list(angles), cfg.data.normalize, partition.content_hash())


def _loader_options(cfg):
    """The DataConfig plus the resolved split seed, in the shape the dataset loaders read."""
    return cfg.data.model_copy(update={"split_seed": cfg.split_seed})
