"""Engine on one device: client updates per second of `train.engine=vectorized` against `sequential`.

FedAvg on FedFA's CIFAR-10 CNN (`acar_cnn`: no BatchNorm, no dropout, so it vectorises) with synthetic 3×32×32
images; by default 100 clients of 200 samples, all in every round, 1 local epoch of batch 16 (13 steps per client
update). One process, no Ray: one `ClientHost` holds every client on the device (`cuda` where there is one, else
the CPU) and its UPDATE call trains a round's clients, one after another (sequential) or all at once (vectorized).
Per engine: one warm-up round (CUDA kernels loaded and tuned), then `rounds` timed rounds, the fastest counting,
with the device synchronised around each.

    python -m benchmarks.engine_gpu          (or: mooring bench engine)
"""
from __future__ import annotations

import time

from benchmarks.common import DEFAULT_CONFIG, markdown_table, reproduce, temp_workdir

ENGINES = ("sequential", "vectorized")
SIZE = "100/100"
SAMPLES_PER_CLIENT = 200
ROUNDS = 2


def config(size: str, samples_per_client: int, engine: str, tmp: str, overrides: tuple[str, ...] = ()):
    """configs/default.yaml with the CNN in place of the digits MLP (whose options it would not take)."""
    from orchestrator.experiment.config import apply_overrides, build_config, read_yaml

    clients, per_round = (int(n) for n in size.split("/"))
    raw = read_yaml(DEFAULT_CONFIG)
    raw["model"] = {"name": "acar_cnn"}
    settings = [
        "data.dataset=synthetic", f"data.synthetic.num_samples={clients * samples_per_client}",
        "data.synthetic.channels=3", "data.synthetic.size=32", "data.test_fraction=0", f"data.num_clients={clients}",
        "data.partition.kind=iid", "data.client_test_fraction=0", "algorithm.name=fedavg",
        f"train.clients_per_round={per_round}", "train.local_epochs=1", "train.batch_size=16",
        f"train.engine={engine}", f"data.partitions_dir={tmp}/p", "tracking.enabled=false", *overrides,
    ]
    return build_config(apply_overrides(raw, settings), "benchmarks/engine_gpu.py")


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name(0)
    return f"CPU ({torch.get_num_threads()} torch threads)"


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def rounds_seconds(cfg, device: str, rounds: int) -> list[float]:
    """Seconds of each timed round of the host's UPDATE call over the round's sampled clients (after one warm-up round)."""
    from orchestrator.clients.client_calls import CallKind, ClientCall
    from orchestrator.clients.client_host import ClientHost
    from orchestrator.experiment.datasets import prepare_data
    from orchestrator.server.sampling import sample_clients

    data = prepare_data(cfg)
    host = ClientHost(cfg, data, list(range(data.num_clients)), device=device)
    state = host.algorithm.init_global()
    seconds = []
    for t in range(rounds + 1):
        cids = sample_clients(cfg.seed, t, data.num_clients, cfg.clients_per_round)
        payload = host.algorithm.payload(state, t)
        synchronize(device)
        start = time.perf_counter()
        updates = host.call(ClientCall(CallKind.UPDATE, payload, cids, t)).results
        synchronize(device)
        if len(updates) != len(cids):
            raise RuntimeError(f"engine {host.engine}: {len(cids) - len(updates)} of {len(cids)} clients failed")
        if t > 0:
            seconds.append(time.perf_counter() - start)
    return seconds


def measure(size: str = SIZE, samples_per_client: int = SAMPLES_PER_CLIENT, rounds: int = ROUNDS,
            mooring_overrides: tuple[str, ...] = (), device: str | None = None, command: str | None = None) -> dict:
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    per_round = int(size.split("/")[1])
    rates = {}
    with temp_workdir("mooring-engine-") as tmp:
        for engine in ENGINES:
            cfg = config(size, samples_per_client, engine, tmp, mooring_overrides)
            fastest = min(rounds_seconds(cfg, device, rounds))
            rates[engine] = per_round / fastest
            print(f"engine {engine} on {device}: {rates[engine]:.1f} client updates/s", flush=True)
    steps = -(-samples_per_client // cfg.train.batch_size) * cfg.train.local_epochs
    default = f"mooring bench engine --size {size} --samples {samples_per_client} --rounds {rounds}" + "".join(
        f" --set {o}" for o in mooring_overrides)
    return {"device": device_name(device), "size": size, "samples": samples_per_client, "steps": steps,
            "batch": cfg.train.batch_size, "rounds": rounds, "rates": rates, "command": command or default}


def report(m: dict) -> str:
    base = m["rates"]["sequential"]
    table = markdown_table(["engine", "client updates / s", "vs sequential"],
                           [[e, f"{r:.1f}", f"{r / base:.2f}×"] for e, r in m["rates"].items()])
    ratio = m["rates"]["vectorized"] / base
    return (f"Device: {m['device']}. Clients/per round {m['size']}, {m['samples']} samples each, {m['steps']} steps "
            f"of batch {m['batch']} per client update; fastest of {m['rounds']} rounds after a warm-up.\n\n{table}\n\n"
            f"vectorized / sequential: {ratio:.2f}×.\n\n" + reproduce(m["command"]) + "\n")


if __name__ == "__main__":
    print(report(measure()))
