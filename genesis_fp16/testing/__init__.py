"""Tools for testing agent plugins: the contract checker and the device audit.

:func:`check_agent` runs every rule a plugin must meet, for real and tiny, the way
scikit-learn's ``check_estimator`` runs an estimator's::

    from genesis_fp16.testing import check_agent

    report = check_agent(plugin)
    assert report.ok, report.summary()   # one line a rule: "FAIL resumes_bit_for_bit: ..."

``genesis-fp16 check-agent NAME`` prints the same report for an installed plugin.
:class:`~genesis_fp16.testing.device_audit.DeviceAudit` is the run-device audit one of the
rules trains under. Importing this package imports torch (the rules train).
"""

from __future__ import annotations

from genesis_fp16.testing.check_agent import RULES, AgentReport, RuleResult, check_agent

__all__ = ["RULES", "AgentReport", "RuleResult", "check_agent"]
