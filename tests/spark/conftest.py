"""The pushdown tests' switch: the shared session with its pushdown setting put back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pushdown_rows import CONF, set_pushdown


@pytest.fixture()
def pushdown(spark: Any) -> Iterator[Any]:
    before = spark.conf.get(CONF, "false")
    yield spark
    set_pushdown(spark, before == "true")
