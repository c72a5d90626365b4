"""A child process that cleans a log and is SIGKILLed at a named step of the swap (the
cleaner's ``crash_hook``): ``python cleaner_crash_child.py <partition dir> <step> <config json>``.
Exits 0 when the step never came (the cleaning finished)."""

from __future__ import annotations

import json
import os
import signal
import sys

from kafkalog.log import Log, TopicConfig
from kafkalog.log.cleaner import cleaning


def main() -> None:
    directory, at, props = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

    def hook(step: str) -> None:
        if step == at:
            os.kill(os.getpid(), signal.SIGKILL)

    cleaning.crash_hook = hook
    log = Log(directory, TopicConfig.from_properties(props))
    log.compact(now=10_000)
    log.close()


if __name__ == "__main__":
    main()
