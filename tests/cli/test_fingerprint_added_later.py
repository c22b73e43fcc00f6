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
