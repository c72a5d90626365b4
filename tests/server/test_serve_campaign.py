"""The seeded crash campaign (tests/server/serve_campaign.py) with one short seed: serve SIGKILLed
at seeded moments and named points while the real clients (aiokafka and kafka-python idempotent
producers, confluent-kafka consume-transform-produce in a group and a committing-and-aborting
transactional producer) work on, a partition damaged while serving; then every acknowledged
record once, nothing aborted visible, the transform exactly once, the group's offsets at the
input's ends, ``kafkalog verify`` clean but for the damaged partition, serve back every time.
More seeds by hand: ``python tests/server/serve_campaign.py --seeds 1-20``."""

from __future__ import annotations

import os
from pathlib import Path

from serve_campaign import campaign, quiet

SEED = int(os.environ.get("KAFKALOG_CAMPAIGN_SEED", "7"))


def test_a_short_seeded_crash_campaign_keeps_exactly_once_and_serve_up(tmp_path: Path) -> None:
    quiet()
    problems = campaign(SEED, tmp_path, seconds=8.0, kills=3)
    assert not problems, "\n".join(problems)
