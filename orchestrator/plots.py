"""PNG plots: accuracy by round (runs, compare), client class histograms (data show)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: str | Path) -> Path:
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_history(curves: dict[str, list[dict[str, Any]] | list[list[dict[str, Any]]]], path: str | Path,
                 title: str = "", metric: str | None = None) -> Path:
    """Accuracy by round, one line per name; a list of histories (seeds) is drawn as mean ± std."""
    from orchestrator.run import headline

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, runs in curves.items():
        histories = runs if runs and isinstance(runs[0], list) else [runs]
        series = [[(m["round"], metric and m.get(metric) or headline(m)) for m in h] for h in histories]
        series = [[(r, v) for r, v in s if v is not None] for s in series]
        if not series or not series[0]:
            continue
        n = min(len(s) for s in series)
        rounds = [r for r, _ in series[0][:n]]
        values = np.array([[v for _, v in s[:n]] for s in series])
        mean = values.mean(axis=0)
        ax.plot(rounds, mean, label=name)
        if len(values) > 1:
            ax.fill_between(rounds, mean - values.std(axis=0), mean + values.std(axis=0), alpha=0.2)
    ax.set_xlabel("round")
    ax.set_ylabel(metric or "accuracy")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def plot_class_histogram(hist: np.ndarray, path: str | Path, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4, hist.shape[1] * 0.5), max(3, hist.shape[0] * 0.3)))
    im = ax.imshow(hist, aspect="auto", cmap="viridis")
    ax.set_xlabel("class")
    ax.set_ylabel("client")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="samples")
    return _save(plt, fig, path)


def plot_matrix(matrix: np.ndarray, path: str | Path, title: str = "", label: str = "") -> Path:
    """A square heat map with values in [-1, 1] (pairwise cosine similarities of anchors)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4.2))
    im = ax.imshow(matrix, cmap="coolwarm", vmin=-1, vmax=1)
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label=label)
    return _save(plt, fig, path)
