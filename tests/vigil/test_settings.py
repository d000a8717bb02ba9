"""Settings: API-key checks shared by REST and gRPC."""

from __future__ import annotations

import pytest

from vigil.settings import Settings


@pytest.mark.parametrize("header,ok", [(None, False), ("", False), ("Bearer k2", True), ("bearer k1", True),
                                       ("Bearer k3", False), ("Basic k1", False), ("Bearer  k1", False)])
def test_keys_are_checked_when_configured(header, ok):
    assert Settings(api_keys=("k1", "k2")).authorized(header) is ok


def test_no_keys_means_open():
    assert Settings().authorized(None)


def test_the_default_configs_data_lives_where_vigil_runs_and_its_models_in_the_project(tmp_path, monkeypatch):
    from vigil.settings import ROOT, load_settings

    monkeypatch.chdir(tmp_path)
    settings = load_settings(environ={})
    assert settings.data_dir == tmp_path / "vigil-data"  # not inside the install tree
    assert settings.model_repository == ROOT / "configs" / "models"


def test_an_unknown_nested_setting_lists_its_own_sections_fields(tmp_path):
    from vigil.settings import SettingsError, load_settings

    path = tmp_path / "vigil.yaml"
    path.write_text("limits:\n  max_stream: 3\n")
    with pytest.raises(SettingsError, match=r"limits.max_stream: unknown field; check the spelling "
                                            r"\(fields: max_streams, max_apps"):
        load_settings(path, environ={})


def test_a_cluster_flag_sets_the_address_and_keeps_the_files_other_cluster_settings(tmp_path):
    from vigil.settings import load_settings

    path = tmp_path / "vigil.yaml"
    path.write_text("cluster: {address: 'old:1', actors: false, beacon_s: 0.5}\n")
    cluster = load_settings(path, {"cluster": {"address": "head:6379"}}, environ={}).cluster
    assert (cluster.address, cluster.actors, cluster.beacon_s) == ("head:6379", False, 0.5)
    path.write_text("cluster: null\n")
    assert load_settings(path, {"cluster": {"address": "head:6379"}}, environ={}).cluster.actors is True


def test_the_cli_uses_the_servers_key_when_it_has_no_key_of_its_own():
    from vigil.settings import client_settings

    environ = {"VIGIL_API_KEYS": " k1 , k2"}
    assert client_settings(environ=environ).api_key == "k1"
    environ["VIGIL_API_KEY"] = "mine"
    assert client_settings(environ=environ).api_key == "mine"
    assert client_settings(api_key="flag", environ=environ).api_key == "flag"
    assert "mine" not in repr(client_settings(environ=environ))


def test_the_cli_finds_the_server_by_flag_then_environment_and_refuses_what_is_not_a_url():
    from vigil.settings import SettingsError, client_settings

    assert client_settings(environ={}).url == "http://127.0.0.1:8080"
    assert client_settings(environ={"VIGIL_URL": "http://cam-box:9000"}).url == "http://cam-box:9000"
    assert client_settings("https://a:1", environ={"VIGIL_URL": "http://b:2"}).url == "https://a:1"
    with pytest.raises(SettingsError, match=r"must be http\(s\)://HOST:PORT.*was 'localhost:8080'"):
        client_settings("localhost:8080", environ={})


@pytest.mark.parametrize("cameras, says", [
    ([{"name": "a", "url": "x.mp4"}, {"name": "a", "url": "y.mp4"}], "['a'] appear more than once"),
    ([{"name": "a"}], "cameras.0.url"),
    ([{"name": "a", "url": "x.mp4", "apps": [7]}], "cameras.0.apps.0"),
    ([{"name": "a", "url": "x.mp4", "lens": "wide"}], "lens"),
])
def test_cameras_in_the_config_are_shaped_as_the_docs_say(tmp_path, cameras, says):
    import yaml

    from vigil.settings import SettingsError, load_settings

    path = tmp_path / "vigil.yaml"
    path.write_text(yaml.safe_dump({"cameras": cameras}))
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    assert says in str(err.value), str(err.value)
