"""A partitioner's ``num_centers`` (added by the one-partitioner refactor) keeps older fingerprints."""

from lightning_fed.runfolder.fingerprint import config_fingerprint


def _config(**partition_args: object) -> dict:
    return {
        "seed": 2025,
        "data": {
            "class_path": "lightning_fed.data.FashionMNIST",
            "init_args": {
                "num_clients": 8,
                "partition": {
                    "class_path": "lightning_fed.data.Shards",
                    "init_args": {"shards_per_client": 5, **partition_args},
                },
            },
        },
    }


def test_num_centers_none_keeps_the_fingerprint_of_a_config_without_it() -> None:
    assert config_fingerprint(_config(num_centers=None)) == config_fingerprint(_config())


def test_num_centers_set_changes_the_fingerprint() -> None:
    assert config_fingerprint(_config(num_centers=8)) != config_fingerprint(_config())


def _split_config(**split: object) -> dict:
    base = {"train": 0.8, "val": 0.1, "test": 0.1, "min_per_class": 1}
    return {
        "seed": 0,
        "data": {"class_path": "lightning_fed.data.TeacherICU", "init_args": {"split": base | split}},
    }


def test_split_folds_keep_the_fingerprint_of_a_split_without_them() -> None:
    """``data.split.folds`` / ``fold`` (issue 29) at null / 0 leave a ``data.split`` fingerprint as it was;
    each fold of a repeated evaluation has its own."""
    assert config_fingerprint(_split_config(folds=None, fold=0)) == config_fingerprint(_split_config())
    folds = {config_fingerprint(_split_config(folds=3, fold=i)) for i in range(3)}
    assert len(folds) == 3 and config_fingerprint(_split_config()) not in folds
