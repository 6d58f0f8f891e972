"""The object-store tests' bucket: a fresh one on moto's S3 server, RUNS_DIR pointing at it."""

import pytest

from pipeline.core import store_transport


@pytest.fixture
def remote(s3, monkeypatch, tmp_path):
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    url = s3.bucket() + "/runs"
    monkeypatch.setenv("RUNS_DIR", url)
    monkeypatch.setenv("PIPELINE_CACHE", str(tmp_path / "cache"))
    store_transport.open_store.cache_clear()
    yield url
    store_transport.open_store.cache_clear()
