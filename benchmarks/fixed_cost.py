"""A round's fixed cost: rounds of one client that takes one step, where a round's own machinery is nearly all of it.

The tiny-client workload (benchmarks/tiny_clients.py) at 100 clients of about 12 samples with 1 per round (batch
16: one step each), IID, 100 rounds, the global model evaluated after the last. The figure is Mooring's
milliseconds a round (MLflow tracking and checkpoints on, as a user runs it), and what it spends beyond the
efficient plain loop, whose round is that one step and its average, measured in the same run. Then round 1 against
round 10 of each Mooring row (each the fastest of the repeats): whatever a process pays the first time (torch's
first optimizer, lazy imports, Ray's first call) belongs to the start-up (orchestrator/clients/warm_up.py), so round 1
should cost what round 10 does.

    python -m benchmarks.fixed_cost          (or: mooring bench fixed-cost [--rounds 100] [--actors 2] ...)
"""
from __future__ import annotations

from benchmarks import tiny_clients
from benchmarks.common import markdown_table, reproduce

SIZE = "100/1"
TARGET_MS = 3.0  # a round's fixed cost (issue 23)
FIRST_ROUND_TARGET = 1.5  # round 1 at most this many times round 10 (issue 41)
LATER_ROUND = 10


def measure(rounds: int = 100, repeats: int = 3, actors: tuple[int, ...] = (2,),
            engines: tuple[str | None, ...] = (None,), mooring_overrides: tuple[str, ...] = ()) -> dict:
    m = tiny_clients.measure((SIZE,), rounds, repeats, actors, engines, mooring_overrides, partitions=("IID",))
    m["command"] = tiny_clients.bench_command("fixed-cost", [], rounds, repeats, actors, engines, mooring_overrides)
    return m


def report(m: dict) -> str:
    best = m["cases"][(SIZE, "IID")]
    per_round = {label: 1000 * seconds / m["rounds"] for label, seconds in best.items()}
    floor = per_round[tiny_clients.BARE]
    rows = [[label, f"{ms:.2f}", f"{ms - floor:.2f}" if label != tiny_clients.BARE else "",
             f"≤ {TARGET_MS:g} ms a round" if label.startswith("Mooring,") else ""]
            for label, ms in per_round.items()]
    return (f"100 clients, 1 per round (one step each), IID, {m['rounds']} rounds:\n\n"
            + markdown_table(["", "ms a round", "ms beyond the plain loop", "target"], rows)
            + f"\n\nRounds only, each row the fastest of {m['repeats']} interleaved runs. "
            + reproduce(m["command"]) + "\n" + first_round_report(m))


def first_round_report(m: dict) -> str:
    """Round 1 against round 10 of the plain loop and of each Mooring row, each the fastest of the repeats ('' with
    fewer rounds): as the driver saw them (the target's figure), and on the coordinator's own clock."""
    if m["rounds"] < LATER_ROUND:
        return ""
    rows = []
    for key, runs in m.get("per_round", {}).items():
        label, coordinator_runs = key[2], m.get("coordinator_per_round", {}).get(key)
        target = "" if label == tiny_clients.BARE else f"≤ {FIRST_ROUND_TARGET:g}"
        rows.append([label, *first_against_later(runs), target,
                     *(first_against_later(coordinator_runs) if coordinator_runs else ["", "", ""])])
    header = ["", "round 1, ms", f"round {LATER_ROUND}, ms", "× round 10", "target",
              "coordinator's round 1, ms", f"coordinator's round {LATER_ROUND}, ms", "× round 10"]
    return ("\nRound 1 against round 10, each the fastest of the repeats: as the driver saw them (each round's share "
            "of the driver's wait for its call), and on the coordinator's own clock (each round from its start there "
            "to its end, without the calls' trips and what the driver does meanwhile); the plain loop's after one "
            "throwaway round on a copy of its model, as Mooring's start-up runs one:\n\n"
            + markdown_table(header, rows) + "\n")


def first_against_later(runs: list[list[float]]) -> list[str]:
    """Round 1's and round LATER_ROUND's milliseconds, each the fastest over `runs`, and their ratio: table cells."""
    first, later = (1000 * min(run[i] for run in runs) for i in (0, LATER_ROUND - 1))
    return [f"{first:.2f}", f"{later:.2f}", f"{first / later:.2f}"]


if __name__ == "__main__":
    print(report(measure()))
