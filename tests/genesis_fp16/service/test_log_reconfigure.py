"""configure_logging called twice in one process (tests, an in-process command after
another): loggers already used keep following the configuration."""

from __future__ import annotations

import structlog
from structlog.testing import capture_logs

from genesis_fp16.service import logsetup


def test_a_logger_used_before_a_second_configuration_follows_it() -> None:
    """A module's logger, cached on its first record, still reaches a capture taken after
    configure_logging ran again (it kept the first call's processors: issue 95's CI)."""
    logger = structlog.get_logger("genesis_fp16.test.reconfigure")
    logsetup.configure_logging("json", "CRITICAL")
    logger.debug("cached under the first configuration")  # filtered, but cached
    logsetup.configure_logging("json", "CRITICAL")
    with capture_logs() as logs:
        logger.info("after the second")
    assert [e["event"] for e in logs] == ["after the second"]
