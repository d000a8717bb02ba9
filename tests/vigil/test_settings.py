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
