"""What a serving command says on stderr: a plain line, or (``--log-format json``) a JSON log line
of the logger ``invalidation_contracts.cli``, like every other line the server then writes."""

from __future__ import annotations

import logging
import sys

PREFIX = "invalidation-contracts: "

_LOGGER = logging.getLogger("invalidation_contracts.cli")
_json = False


def use_json_lines() -> None:
    """From now on, this process's log and ``say`` lines are JSON objects on stderr."""
    import logging.config

    from ..json_logs import log_config

    global _json
    config = log_config()
    config["loggers"][_LOGGER.name] = {"handlers": ["stderr"], "level": "INFO", "propagate": False}
    logging.config.dictConfig(config)
    logging.captureWarnings(True)
    _json = True


def say(text: str, *, level: int = logging.INFO) -> None:
    """``text`` on stderr: as is, or as a JSON log line at ``level`` (without the program's
    name: the logger says it)."""
    if _json:
        _LOGGER.log(level, text.removeprefix(PREFIX))
    else:
        print(text, file=sys.stderr)
