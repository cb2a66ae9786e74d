"""The digits and the stratified split read without importing scikit-learn equal scikit-learn's own."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tasks.data.sklearn_free import approximate_mode, load_digits_arrays, stratified_train_test


def test_digits_equal_scikit_learns():
    from sklearn.datasets import load_digits

    images, y = load_digits_arrays()
    digits = load_digits()
    assert np.array_equal(images, digits.images) and images.dtype == digits.images.dtype
    assert np.array_equal(y, digits.target)


@pytest.mark.parametrize("fraction", [0.1, 0.15, 0.2, 0.3, 0.5, 0.73])
def test_split_equals_train_test_split(fraction):
    """Same indices in the same order as scikit-learn's, on the digits' labels and on uneven classes where the
    proportional counts tie (so the tie-breaking draws are exercised), over 25 seeds each."""
    from sklearn.model_selection import train_test_split

    uneven = np.repeat(np.arange(7), [2, 3, 3, 5, 8, 13, 40])
    for y in (load_digits_arrays()[1], uneven):
        for seed in range(25):
            if min(np.ceil(fraction * len(y)), len(y) - np.ceil(fraction * len(y))) < len(np.unique(y)):
                continue
            ours = stratified_train_test(y, fraction, seed)
            theirs = train_test_split(np.arange(len(y)), test_size=fraction, stratify=y, random_state=seed)
            assert np.array_equal(ours[0], theirs[0]) and np.array_equal(ours[1], theirs[1]), (fraction, seed)


def test_approximate_mode_by_hand():
    """Counts 2, 2, 2, 1 and 2 draws: 4/7 each floored to 0; the three remainders 4/7 tie and two are drawn."""
    counts = approximate_mode(np.array([2, 2, 2, 1]), 2, np.random.RandomState(0))
    assert counts.sum() == 2 and counts[3] == 0 and set(counts[:3]) == {0, 1}
    assert list(approximate_mode(np.array([10, 30]), 8, np.random.RandomState(0))) == [2, 6]


def test_too_few_samples_of_a_class_is_one_line():
    with pytest.raises(ValueError, match=r"needs 2 samples of every class; classes \[2\] have 1"):
        stratified_train_test(np.array([0, 0, 1, 1, 2]), 0.4, 0)


def test_loading_the_digits_does_not_import_scikit_learn():
    code = ("import sys; from tasks.data.datasets import load_dataset; from orchestrator.experiment.config import "
            "load_config; load_dataset(load_config('configs/default.yaml').data); print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "False"
