"""Load configuration: non-http(s) targets refused with a clear message; the API key is only a variable name."""

import pytest

from harness.errors import HarnessError
from workloads.config import LoadConfig, check_http_url


@pytest.mark.parametrize("url,msg", [
    ("ftp://example.com", "not an http"),
    ("file:///etc/passwd", "not an http"),
    ("127.0.0.1:8000", "not an http"),
    ("http://", "has no host"),
    ("http://user:secret@host:8000", "credentials"),
    ("http://host:99999", "invalid port"),
])
def test_bad_target_urls(url, msg):
    with pytest.raises(HarnessError, match=msg):
        check_http_url(url, "--target")


def test_good_url_is_normalised():
    assert check_http_url("https://h.example:8443/base/", "--target") == "https://h.example:8443/base"


def test_api_key_comes_from_the_named_variable(monkeypatch):
    cfg = LoadConfig(target_url="http://127.0.0.1:1", artifact_path="x", run_id="r", api_key_env="HARNESS_TEST_KEY")
    monkeypatch.delenv("HARNESS_TEST_KEY", raising=False)
    with pytest.raises(HarnessError, match="HARNESS_TEST_KEY"):
        cfg.api_key()
    monkeypatch.setenv("HARNESS_TEST_KEY", "sk-abc")
    assert cfg.api_key() == "sk-abc"
    assert "sk-abc" not in str(cfg.to_dict())


def test_api_key_env_must_be_a_name():
    with pytest.raises(HarnessError, match="NAME of an environment variable"):
        LoadConfig(target_url="http://127.0.0.1:1", artifact_path="x", run_id="r", api_key_env="sk-live-123 456")
