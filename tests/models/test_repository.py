"""The model repository: version policy, labels, and files that are wrong."""

import pytest
import yaml

from models.repository import ModelRepository, RepositoryError, VersionPolicy
from repo import write_model


@pytest.mark.parametrize("policy, expected", [
    ({"latest": 1}, [3]), ({"latest": 2}, [2, 3]), ({"specific": [1, 3]}, [1, 3]), ({"all": True}, [1, 2, 3]),
])
def test_version_policy(policy, expected):
    assert VersionPolicy(**policy).select([1, 2, 3]) == expected


def test_versions_labels_and_policy_from_disk(tmp_path):
    for v in (1, 2, 3):
        write_model(tmp_path, "m", v)
    write_model(tmp_path, "m", 1, config={"version_policy": "all", "labels": {"stable": 1, "canary": 3}})
    repo = ModelRepository(tmp_path)
    assert repo.model_names() == ["m"] and repo.versions("m") == [1, 2, 3]
    cfg = repo.config("m")
    assert cfg.version_policy.select([1, 2, 3]) == [1, 2, 3] and cfg.labels == {"stable": 1, "canary": 3}


def test_label_pointing_nowhere_is_named(tmp_path):
    write_model(tmp_path, "m", 1, config={"labels": {"stable": 4}})
    with pytest.raises(RepositoryError, match=r"model_config.yaml: labels.stable: version 4 is not in the repository"):
        ModelRepository(tmp_path).config("m")


@pytest.mark.parametrize("patch, fragment", [
    ({"adapter": "tensorflow"}, "adapter: Input should be 'python', 'torchvision'"),
    ({"factory": None}, "needs factory: 'module:function'"),
    ({"batch_sizes": [4, 2]}, "batch_sizes: must be increasing"),
    ({"output": "boxes"}, "output: Input should be 'centernet'"),
    ({"split": ["backbone", {"name": "a", "after": "nope"}]}, "comes after 'nope'"),
    ({"weigths": "x.pt"}, "weigths: unknown field"),
    ({"weights": "missing.pt"}, "weights: file 'missing.pt' is missing"),
    ({"name": "other"}, "does not match its directory"),
])
def test_bad_model_yaml_names_file_and_field(tmp_path, patch, fragment):
    folder = write_model(tmp_path, "m", 1)
    doc = yaml.safe_load((folder / "model.yaml").read_text())
    doc.update(patch)
    (folder / "model.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(RepositoryError) as info:
        ModelRepository(tmp_path).spec("m", 1)
    assert str(folder / "model.yaml") in str(info.value) and fragment in str(info.value)


def test_not_yaml_is_named(tmp_path):
    folder = write_model(tmp_path, "m", 1)
    (folder / "model.yaml").write_text("name: [m")
    with pytest.raises(RepositoryError, match="model.yaml: not valid YAML"):
        ModelRepository(tmp_path).spec("m", 1)
