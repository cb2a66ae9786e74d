"""LEAF's JSON layout (tasks/data/leaf.py): users as natural clients, read from files the tests write."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from tasks.data.datasets import DataFileError, DatasetNotFound
from tasks.data.leaf import load_leaf_femnist, load_leaf_sent140, load_leaf_shakespeare
from tasks.data.text import LETTERS
from tests.natural_data import femnist_users, write_leaf


def opts(root, seq_len=6):
    return SimpleNamespace(root=str(root), text=SimpleNamespace(seq_len=seq_len))


def test_femnist_users_become_owners_of_28x28_images(tmp_path):
    train = femnist_users(0, {"f0001": 3, "f0002": 2})
    write_leaf(tmp_path, "femnist", "train", train)
    write_leaf(tmp_path, "femnist", "test", femnist_users(1, {"f0002": 1, "f0003": 2}))
    ds = load_leaf_femnist(opts(tmp_path))
    assert ds.x_train.shape == (5, 1, 28, 28) and ds.num_classes == 62
    assert np.allclose(ds.x_train[3, 0], np.reshape(train["f0002"][0][0], (28, 28)))
    assert ds.y_train.tolist() == train["f0001"][1] + train["f0002"][1]
    assert ds.owners.tolist() == [0, 0, 0, 1, 1] and ds.test_owners.tolist() == [1, 2, 2]
    assert ds.owner_names == ["f0001", "f0002", "f0003"]


def test_shakespeare_strings_become_letter_ids_and_the_next_character_its_label(tmp_path):
    write_leaf(tmp_path, "shakespeare", "train", {"HAMLET": (["to be ", "or not"], ["o", "é"])})
    write_leaf(tmp_path, "shakespeare", "test", {"HAMLET": (["to"], ["b"])})
    ds = load_leaf_shakespeare(opts(tmp_path))
    assert ["".join(LETTERS[i] for i in row) for row in ds.x_train] == ["to be ", "or not"]
    assert ds.y_train.tolist() == [LETTERS.index("o"), LETTERS.index(" ")]
    assert "".join(LETTERS[i] for i in ds.x_test[0]) == "to    "  # padded with spaces to seq_len


def test_sent140_reads_the_tweet_text_as_characters(tmp_path):
    write_leaf(tmp_path, "sent140", "train", {"u1": ([["1", "date", "q", "u1", "so happy"], ["2", "d", "q", "u1", "sad"]], [1, 0])})
    write_leaf(tmp_path, "sent140", "test", {"u1": (["meh"], [0])})
    ds = load_leaf_sent140(opts(tmp_path, seq_len=4))
    assert ["".join(LETTERS[i] for i in row) for row in ds.x_train] == ["so h", "sad "]
    assert ds.num_classes == 2 and ds.y_train.tolist() == [1, 0]


def test_a_truncated_file_is_one_line_naming_it(tmp_path):
    path = write_leaf(tmp_path, "femnist", "train", femnist_users(0, {"a": 2}))
    path.write_bytes(path.read_bytes()[:100])
    write_leaf(tmp_path, "femnist", "test", femnist_users(1, {"a": 1}))
    with pytest.raises(DataFileError) as err:
        load_leaf_femnist(opts(tmp_path))
    assert str(err.value).startswith(f"{path}: not a LEAF JSON file (truncated or damaged: ")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("users, problem", [
    ({"a": ([[0.5] * 783], [1])}, "user 'a': every x must be 784 numbers (a 28×28 image)"),
    ({"a": ([[1.5] * 784], [1])}, "user 'a': pixel values must lie in [0, 1]"),
    ({"a": ([[0.5] * 784], [62])}, "user 'a': labels must be integers 0..61, one per sample"),
])
def test_bad_samples_are_one_line_naming_the_file_and_user(tmp_path, users, problem):
    path = write_leaf(tmp_path, "femnist", "train", users)
    write_leaf(tmp_path, "femnist", "test", femnist_users(1, {"a": 1}))
    with pytest.raises(DataFileError) as err:
        load_leaf_femnist(opts(tmp_path))
    assert str(err.value) == f"{path}: {problem}"


def test_counts_that_disagree_and_missing_keys_are_refused(tmp_path):
    path = write_leaf(tmp_path, "femnist", "train", femnist_users(0, {"a": 2}))
    path.write_text(path.read_text().replace('"num_samples": [2]', '"num_samples": [3]'))
    with pytest.raises(DataFileError, match=r"user 'a': num_samples says 3, x has 2 and y 2$"):
        load_leaf_femnist(opts(tmp_path))
    path.write_text('{"users": []}')
    with pytest.raises(DataFileError, match="it needs the keys users, num_samples and user_data$"):
        load_leaf_femnist(opts(tmp_path))


def test_no_files_is_one_line_naming_the_directory(tmp_path):
    with pytest.raises(DatasetNotFound) as err:
        load_leaf_femnist(opts(tmp_path))
    assert str(err.value).startswith(f"leaf_femnist: no LEAF files in {tmp_path}/femnist/data/train; expected *.json")


# ------------------------------------------------------------- crafted files: one line each (issue 36)
def set_num_samples(doc, value):
    doc["num_samples"] = value


def user_as_list(doc):
    doc["users"] = [["a"]]


def labels_as_lists(doc):
    doc["user_data"]["a"]["y"] = [[label] for label in doc["user_data"]["a"]["y"]]


@pytest.mark.parametrize("craft, problem", [
    (lambda doc: set_num_samples(doc, 2), "num_samples must be a list of sample counts (0, 1, 2, ...), one per user"),
    (lambda doc: set_num_samples(doc, [True]), "num_samples must be a list of sample counts (0, 1, 2, ...), one per user"),
    (lambda doc: set_num_samples(doc, [-1]), "num_samples must be a list of sample counts (0, 1, 2, ...), one per user"),
    (user_as_list, "users must be a list of names (strings)"),
    (labels_as_lists, "user 'a': labels must be integers 0..61, one per sample"),
])
def test_a_crafted_file_is_one_line_naming_it(tmp_path, craft, problem):
    path = write_leaf(tmp_path, "femnist", "train", femnist_users(0, {"a": 2}))
    write_leaf(tmp_path, "femnist", "test", femnist_users(1, {"a": 1}))
    doc = json.loads(path.read_text())
    craft(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(DataFileError) as err:
        load_leaf_femnist(opts(tmp_path))
    assert str(err.value) == f"{path}: {problem}"


def test_a_file_nested_past_the_parser_s_depth_is_one_line(tmp_path):
    path = tmp_path / "femnist" / "data" / "train" / "deep.json"
    path.parent.mkdir(parents=True)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataFileError) as err:
        load_leaf_femnist(opts(tmp_path))
    assert str(err.value).startswith(f"{path}: not a LEAF JSON file (truncated or damaged: nested more than about ")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name, load, users", [
    ("femnist", load_leaf_femnist, {"empty": ([], []), "b": ([[0.5] * 784], [3])}),
    ("shakespeare", load_leaf_shakespeare, {"empty": ([], []), "b": (["to be "], ["o"])}),
    ("sent140", load_leaf_sent140, {"empty": ([], []), "b": (["so happy"], [1])}),
])
def test_a_user_with_no_samples_in_a_split_is_read_as_one_with_none(tmp_path, name, load, users):
    write_leaf(tmp_path, name, "train", users)
    write_leaf(tmp_path, name, "test", {"empty": users["b"]})
    ds = load(opts(tmp_path))
    assert ds.owner_names == ["empty", "b"] and ds.owners.tolist() == [1] and ds.test_owners.tolist() == [0]


def test_a_user_given_twice_in_a_split_is_refused_naming_the_user_and_both_files(tmp_path):
    first = write_leaf(tmp_path, "femnist", "train", femnist_users(0, {"a": 2, "b": 1}))
    second = write_leaf(tmp_path, "femnist", "train", femnist_users(1, {"b": 2}), file="part_1.json")
    write_leaf(tmp_path, "femnist", "test", femnist_users(2, {"a": 1, "b": 1}))
    with pytest.raises(DataFileError) as err:
        load_leaf_femnist(opts(tmp_path))
    assert str(err.value) == f"{second}: user 'b' is already in {first}; a user's samples of a split are in one place"
    doc = json.loads(first.read_text())
    doc["users"].append("a")
    doc["num_samples"].append(2)
    first.write_text(json.dumps(doc))
    with pytest.raises(DataFileError) as err:
        load_leaf_femnist(opts(tmp_path))
    assert str(err.value) == f"{first}: user 'a' is listed twice; a user's samples of a split are in one place"
