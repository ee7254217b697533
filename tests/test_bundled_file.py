"""The bundled default spec is the delivered file, byte for byte (truncation and garbage
included): never repaired."""
from __future__ import annotations

import hashlib
from pathlib import Path

import ncdc

DELIVERED_SHA256 = "45eea09870480125fe9fe453576483bcb7990d7adef6c8958dd1c3df9d470773"
DELIVERED_LENGTH = 1_889_727


def test_bundled_spec_is_the_delivered_file():
    data = Path(ncdc.bundled_spec_path()).read_bytes()
    assert len(data) == DELIVERED_LENGTH
    assert hashlib.sha256(data).hexdigest() == DELIVERED_SHA256
    assert data.endswith(b'"_shape": [{"__r\n\ntsncd')
    shared = Path(__file__).resolve().parents[2] / "shared" / "specs" / "deepseek_v41_flash.json"
    if shared.is_file():
        assert shared.read_bytes() == data
