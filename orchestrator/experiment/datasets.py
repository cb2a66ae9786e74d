"""From a config to a FederatedData: load the dataset, make or reload its stored partition."""
from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from orchestrator.experiment.config import TextConfig, digest
from orchestrator.io import storage
from tasks.data.datasets import load_dataset
from tasks.data.federated import FederatedData
from tasks.data.partition import Partition, PartitionError, hold_out_validation, make_partition

# Options added after partitions were first stored: left out of the key at their defaults, so the files stored
# before them are still found (the partitions are the same).
LATER_OPTIONS = {"max_draws": 1000, "repair": False, "select": "largest"}


def partition_key(cfg) -> str:
    # the validation split is drawn from a partition's training samples afterwards (prepare_data), not part of it
    spec = {"data": cfg.data.model_dump(mode="json", exclude={"root", "download", "partitions_dir",
                                                               "validation_fraction"}),
            "seed": cfg.seed, "split_seed": cfg.split_seed}
    for name, default in LATER_OPTIONS.items():
        if spec["data"]["partition"][name] == default:
            del spec["data"]["partition"][name]
    if spec["data"]["text"] == TextConfig().model_dump(mode="json"):
        del spec["data"]["text"]
    return digest(spec)


def load_or_make_partition(cfg, y_train, owners=None) -> tuple[Partition, str]:
    """The stored partition for this exact data spec and seed, or a new one, written once as Parquet
    (`owners`: each training sample's natural client, for the natural kind)."""
    uri = storage.join(cfg.data.partitions_dir, f"partition-{partition_key(cfg)}.parquet")
    if storage.exists(uri):
        return load_partition(uri, cfg.data.num_clients, len(y_train)), uri
    partition = make_partition(y_train, cfg.data, cfg.seed, owners)
    store_partition(partition, uri)
    return partition, uri


def store_partition(partition: Partition, uri: str) -> None:
    table = partition.to_table()
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), "content_hash": partition.content_hash()})
    sink = pa.BufferOutputStream()  # Arrow-owned memory: no Python file object reaches Arrow
    pq.write_table(table, sink)
    storage.write_bytes_atomic(uri, sink.getvalue())


def load_partition(uri: str, num_clients: int, num_samples: int | None = None) -> Partition:
    """The stored partition of `num_clients` clients (over `num_samples` training samples, if given); a file
    that is not one (empty, truncated, altered) raises PartitionError naming it.

    Read from Arrow-owned memory in this thread alone: Arrow then holds no Python object it could release on
    its own threads while the interpreter exits (`mooring run` reads this in a thread while Ray starts)."""
    buffer = storage.read_buffer(uri)
    try:
        table = pq.read_table(pa.BufferReader(buffer), use_threads=False, pre_buffer=False)
    except (pa.ArrowException, OSError) as err:
        raise _unreadable(uri, f"not a readable Parquet file ({_first_line(err)})") from err
    problem = partition_table_problem(table, num_clients, num_samples)
    if problem:
        raise _unreadable(uri, problem)
    partition = Partition.from_table(table, num_clients)
    recorded = (table.schema.metadata or {}).get(b"content_hash")
    if recorded is not None and recorded.decode(errors="replace") != partition.content_hash():
        raise _unreadable(uri, "its content does not match the hash recorded in it")
    return partition


PARTITION_COLUMNS = {"client": pa.types.is_integer, "sample": pa.types.is_integer,
                     "split": pa.types.is_string, "domain": pa.types.is_integer}


def partition_table_problem(table: pa.Table, num_clients: int, num_samples: int | None) -> str | None:
    """What makes this table not a partition of `num_clients` clients (over `num_samples` samples), or None."""
    for name, is_type in PARTITION_COLUMNS.items():
        if name not in table.column_names or not is_type(table.schema.field(name).type):
            return f"no {name} column of the expected type"
    if table.num_rows == 0:
        return "it holds no samples"
    if any(column.null_count for column in table.columns):
        return "it holds missing values"
    client, sample = pc.min_max(table["client"]), pc.min_max(table["sample"])
    if client["min"].as_py() < 0 or client["max"].as_py() >= num_clients:
        return f"client ids outside 0..{num_clients - 1}"
    if sample["min"].as_py() < 0 or (num_samples is not None and sample["max"].as_py() >= num_samples):
        return f"sample indices outside 0..{num_samples - 1}" if num_samples else "negative sample indices"
    if not pc.all(pc.is_in(table["split"], pa.array(["train", "test"]))).as_py():
        return "split values other than train and test"
    return None


def _unreadable(uri: str, problem: str) -> PartitionError:
    return PartitionError(f"stored partition {uri}: {problem}; delete it and it is rebuilt")


def _first_line(err: Exception) -> str:
    line = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return re.sub(r"^Could not open Parquet input source '[^']*': ", "", line)


def prepare_data(cfg) -> FederatedData:
    dataset = load_dataset(_loader_options(cfg))
    partition, _ = load_or_make_partition(cfg, dataset.y_train, dataset.owners)
    if cfg.data.partition.kind == "natural":
        from tasks.data.natural import keep_federation_test

        dataset = keep_federation_test(dataset, partition)
    angles = cfg.data.domains.angles if cfg.data.domains.kind == "rotation" else [0.0]
    content_hash = partition.content_hash()
    partition, validation = hold_out_validation(partition, cfg.data.validation_fraction, cfg.seed)
    return FederatedData(dataset, partition, list(angles), cfg.data.normalize, content_hash, validation,
                         cfg.eval.split, test_at_one_angle=cfg.data.domains.test == "one_angle_each")


def _loader_options(cfg):
    """The DataConfig plus the resolved split seed, in the shape the dataset loaders read."""
    return cfg.data.model_copy(update={"split_seed": cfg.split_seed})
