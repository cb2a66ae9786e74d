"""PNG plots: accuracy by round (runs, compare, claims), client class histograms (data show), anchor similarities."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def import_pyplot():
    """matplotlib.pyplot with the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: str | Path) -> Path:
    if fig.get_layout_engine() is None:  # a constrained figure lays itself out; tight_layout would undo it
        fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # exactly at `path`: in the format its suffix names, else PNG (matplotlib would add ".png" to a bare name)
    suffix = path.suffix[1:].lower()
    fmt = suffix if suffix in fig.canvas.get_supported_filetypes() else "png"
    fig.savefig(path, dpi=110, bbox_inches="tight", format=fmt)
    plt.close(fig)
    return path


History = list[dict[str, Any]]

# Global and personalized accuracy answer different questions (the server's model on the global test set;
# each client's own model on its own test data), so they get panels of their own.
PANELS = (("accuracy", "global model (global test set)"),
          ("personalized_accuracy", "personalized models (each client's test data)"))
# Okabe-Ito's colour-blind-safe palette without its pale yellow, then five more that stay apart on white
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#9467BD", "#8C564B",
           "#BCBD22", "#7F7F7F", "#17BECF")
LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)), (0, (1, 3)))


def method_styles(names: list[str]) -> dict[str, dict[str, Any]]:
    """A colour and a line style per method: distinct colours for up to 12 methods, and the pair distinct for up
    to 84 (12 colours × 7 styles, both changing from one method to the next); beyond that a marker as well."""
    styles = {}
    for i, name in enumerate(names):
        style = {"color": COLOURS[i % len(COLOURS)], "linestyle": LINE_STYLES[i % len(LINE_STYLES)]}
        if i >= len(COLOURS) * len(LINE_STYLES):
            style |= {"marker": "xo^sv<>Dph*"[(i // (len(COLOURS) * len(LINE_STYLES))) % 11], "markevery": 0.2}
        styles[name] = style
    return styles


def seed_curves(histories: list[History], key: str) -> tuple[list[int], np.ndarray]:
    """The rounds every seed evaluated `key` at, and the values there (seeds × rounds)."""
    per_seed = [{int(m["round"]): float(m[key]) for m in h if m.get(key) is not None and m[key] == m[key]}
                for h in histories]
    rounds = sorted(set.intersection(*(set(d) for d in per_seed))) if per_seed else []
    return rounds, np.array([[d[r] for r in rounds] for d in per_seed])


def sync_rounds(history: History) -> list[int]:
    """Rounds in which a method that only sometimes sends its model (FedFM-Lite, FedAvg-periodic) sent it:
    per-client uploads well above the method's smallest. Empty for a method that sends the same every round."""
    per_client = {int(m["round"]): m["bytes_up"] / m["clients"] for m in history
                  if m.get("bytes_up") is not None and m.get("clients")}
    if not per_client:
        return []
    low = min(per_client.values())
    return [r for r, b in sorted(per_client.items()) if b > 1.5 * low + 1]


def plot_comparison(curves: dict[str, History | list[History] | dict[int, History]], path: str | Path,
                    title: str = "") -> Path:
    """THE accuracy-by-round figure (comparison_figure) saved at `path`."""
    return _save(import_pyplot(), comparison_figure(curves, title), path)


def comparison_figure(curves: dict[str, History | list[History] | dict[int, History]], title: str = ""):
    """THE accuracy-by-round figure (run, compare, claims, MLflow, the Python API's `plot()`): one panel per kind
    of accuracy a method reports, one line per method (mean over seeds, ± std as a band when there are several),
    integer round ticks, the legend beside the panels (inside the figure, so that a plain `savefig` keeps it), and markers at the rounds where a method synchronises its
    models. A matplotlib Figure outside pyplot, so that drawing it neither needs nor changes a backend."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    runs = {name: _as_histories(h) for name, h in curves.items()}
    styles = method_styles(list(runs))
    panels = [(key, label) for key, label in PANELS if any(seed_curves(hs, key)[0] for hs in runs.values())]
    panels = panels or [PANELS[0]]
    # constrained, with the legend "outside" the axes but inside the figure: a plain savefig keeps it
    fig = Figure(figsize=(5.2 * len(panels) + 2.4, 4.2), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)
    synced_any = False
    for ax, (key, label) in zip(axes[0], panels):
        for name, histories in runs.items():
            rounds, values = seed_curves(histories, key)
            if not rounds:
                continue
            mean = 100 * values.mean(axis=0)
            ax.plot(rounds, mean, lw=1.6, **styles[name])
            if len(values) > 1:
                std = 100 * values.std(axis=0)
                ax.fill_between(rounds, mean - std, mean + std, color=styles[name]["color"], alpha=0.15, lw=0)
            synced = [i for i, r in enumerate(rounds) if r in set(sync_rounds(histories[0]))]
            if synced and len(synced) < len(rounds):
                synced_any = True
                ax.plot([rounds[i] for i in synced], mean[synced], ls="none", marker="o", ms=4,
                        color=styles[name]["color"])
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("accuracy (%)")
    seeds = max(len(h) for h in runs.values()) if runs else 0
    handles = [Line2D([], [], lw=1.6, **styles[name]) for name in runs]
    labels = list(runs)
    if seeds > 1:
        handles.append(Patch(color="grey", alpha=0.3))
        labels.append(f"± std over {seeds} seeds")
    if synced_any:
        handles.append(Line2D([], [], ls="none", marker="o", ms=4, color="grey"))
        labels.append("models synchronised")
    fig.legend(handles, labels, loc="outside right center", fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    return fig


def has_clock(curves: dict[str, History | list[History] | dict[int, History]]) -> bool:
    """Whether the runs carry a simulated clock (the participation block)."""
    return any(m.get("simulated_seconds") is not None for h in curves.values() for run in _as_histories(h)
               for m in run)


def time_curve(history: History, key: str = "accuracy") -> tuple[np.ndarray, np.ndarray]:
    """(simulated seconds at the end of each evaluated round, `key` there) of one run."""
    points = [(m["simulated_seconds"], m[key]) for m in history
              if m.get("simulated_seconds") is not None and m.get(key) is not None and m[key] == m[key]]
    return np.array([p[0] for p in points], dtype=float), np.array([p[1] for p in points], dtype=float)


def plot_against_time(curves: dict[str, History | list[History] | dict[int, History]], path: str | Path,
                      title: str = "") -> Path:
    """Accuracy against simulated time (the participation block's clock), a panel per kind of accuracy as in
    plot_comparison: one line per method and seed, each on its seed's own clock (the clocks differ, so no mean is
    taken), a method's seeds in its style."""
    from matplotlib.lines import Line2D

    runs = {name: _as_histories(h) for name, h in curves.items()}
    styles = method_styles(list(runs))
    panels = [(key, label) for key, label in PANELS
              if any(len(time_curve(run, key)[0]) for hs in runs.values() for run in hs)] or [PANELS[0]]
    plt = import_pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels) + 2.4, 4.2), squeeze=False, sharey=True,
                             layout="constrained")
    for ax, (key, label) in zip(axes[0], panels):
        for name, histories in runs.items():
            for history in histories:
                seconds, values = time_curve(history, key)
                ax.plot(seconds, 100 * values, lw=1.2, alpha=0.85, drawstyle="steps-post", **styles[name])
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("simulated seconds")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("accuracy (%)")
    handles = [Line2D([], [], lw=1.6, **styles[name]) for name in runs]
    fig.legend(handles, list(runs), loc="outside right center", fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    return _save(plt, fig, path)


def experiment_title(cfg, seeds: list[int], what: str = "") -> str:
    """What a figure compares: the config, (the method,) dataset, clients, partition and seeds."""
    p = cfg.data.partition
    part = p.kind + (f" α={p.alpha:g}" if p.kind.startswith("dirichlet") else "")
    return (f"{cfg.name}: {what + ' on ' if what else ''}{cfg.data.dataset}, {cfg.data.num_clients} clients, {part}, "
            f"seed{'s' if len(seeds) > 1 else ''} {','.join(map(str, seeds))}")


def _as_histories(runs: History | list[History] | dict[int, History]) -> list[History]:
    """One history, a list of them (seeds), or {seed: history}: a list of histories in seed order."""
    if isinstance(runs, dict):
        return [runs[s] for s in sorted(runs)]
    return runs if runs and isinstance(runs[0], list) else [runs]


def plot_class_histogram(hist: np.ndarray, path: str | Path, title: str = "") -> Path:
    plt = import_pyplot()
    fig, ax = plt.subplots(figsize=(max(4, hist.shape[1] * 0.5), max(3, hist.shape[0] * 0.3)))
    im = ax.imshow(hist, aspect="auto", cmap="viridis")
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="samples")
    return _save(plt, fig, path)


def plot_matrix(matrix: np.ndarray, path: str | Path, title: str = "", label: str = "") -> Path:
    """A square heat map with values in [-1, 1] (pairwise cosine similarities of anchors)."""
    plt = import_pyplot()
    fig, ax = plt.subplots(figsize=(5, 4.2))
    im = ax.imshow(matrix, cmap="coolwarm", vmin=-1, vmax=1)
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label=label)
    return _save(plt, fig, path)
