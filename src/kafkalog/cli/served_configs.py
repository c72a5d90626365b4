"""The topic configs ``kafkalog serve`` stored beside a data directory's partitions.

Topic configurations live in a cluster's metadata, not in the partition directories; a
directory ``kafkalog serve`` keeps has them in ``.kafkalog-serve.json`` (the overrides each
topic was created or altered with, and the dynamic broker configs that are every topic's
defaults). The commands that need a topic's configs (``retention``, ``compact``, ``groups``)
take them from here as the topic's own, under what the command line says.
"""

from __future__ import annotations

import json
import os
from typing import Any

#: the server's state file (``kafkalog.server.topics.STATE_FILE``; named here so that a
#: command reading it does not load the protocol layer)
STATE_FILE = ".kafkalog-serve.json"
_LAYERS = ("cluster", "node")  # lowest precedence first, as the server merges them


def _state(data_dir: str) -> dict[str, Any]:
    try:
        with open(os.path.join(data_dir, STATE_FILE), encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


def topic_overrides(data_dir: str) -> dict[str, dict[str, str]]:
    """Each topic's stored overrides (topic config names), ``{}`` without a state file."""
    topics = _state(data_dir).get("topics", {})
    if not isinstance(topics, dict):
        return {}
    return {
        name: {str(k): str(v) for k, v in t.get("configs", {}).items()}
        for name, t in topics.items()
        if isinstance(t, dict) and isinstance(t.get("configs", {}), dict)
    }


def dynamic_defaults(data_dir: str) -> dict[str, str]:
    """The stored dynamic broker configs, as the topic configs they are the defaults of."""
    from kafkalog.log.config import BROKER_SYNONYMS

    layers = _state(data_dir).get("broker_configs", {})
    out: dict[str, str] = {}
    for layer in _LAYERS:
        configs = layers.get(layer, {}) if isinstance(layers, dict) else {}
        if not isinstance(configs, dict):
            continue
        for name, value in configs.items():
            topic_name = BROKER_SYNONYMS.get(name)
            if topic_name is not None:
                out[topic_name] = str(value)
    return out


class StoredConfigs:
    """The stored configs of the data directories a command walks, read once per directory."""

    def __init__(self) -> None:
        self._read: dict[str, tuple[dict[str, str], dict[str, dict[str, str]]]] = {}

    def of(self, data_dir: str, topic: str) -> dict[str, str]:
        """``topic``'s stored configs in ``data_dir``: the dynamic defaults, its overrides over
        them (topic config names; ``{}`` when the server stored nothing)."""
        key = os.path.abspath(data_dir)
        found = self._read.get(key)
        if found is None:
            found = self._read[key] = (dynamic_defaults(key), topic_overrides(key))
        defaults, overrides = found
        return {**defaults, **overrides.get(topic, {})}
