"""Writes the two manifests made from other files, so that they cannot drift from them.

- ``prometheusrule.yaml``: the Prometheus Operator's PrometheusRule, whose ``spec`` is
  ``deploy/prometheus/rules.yml`` word for word (comments kept), indented;
- ``grafana-dashboard.yaml``: a ConfigMap labelled ``grafana_dashboard: "1"``, which
  Grafana's dashboard sidecar (the Grafana Helm chart, kube-prometheus-stack) loads,
  holding ``deploy/grafana/genesis-fp16.json`` as it is.

Run it after changing either source; ``--check`` writes nothing and exits 1 naming the
stale files (tests/deploy/test_k8s.py runs the same check)::

    .venv/bin/python deploy/k8s/generate.py
    .venv/bin/python deploy/k8s/generate.py --check
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
K8S = Path("deploy/k8s")
RULES = Path("deploy/prometheus/rules.yml")
DASHBOARD = Path("deploy/grafana/genesis-fp16.json")
COMMAND = "python deploy/k8s/generate.py"


def _header(source: Path) -> str:
    return (
        f"# Generated from {source.as_posix()} by deploy/k8s/generate.py: do not edit.\n"
        f"# After changing {source.name}, run `{COMMAND}`; the tests fail while this is stale.\n"
    )


def _indent(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def prometheus_rule(rules: str) -> str:
    """The PrometheusRule whose spec is ``rules`` (a rules.yml text: ``groups:`` at the top).

    >>> print(prometheus_rule("groups: []\\n").splitlines()[-1])
      groups: []
    """
    return (
        _header(RULES)
        + "#\n"
        + "# The Prometheus Operator loads it when its Prometheus's ruleSelector (and\n"
        + "# ruleNamespaceSelector) match: kube-prometheus-stack's default selects the label\n"
        + "# release: <its Helm release>; add that label here, or set\n"
        + "# prometheus.prometheusSpec.ruleSelectorNilUsesHelmValues=false.\n"
        + "apiVersion: monitoring.coreos.com/v1\n"
        + "kind: PrometheusRule\n"
        + "metadata:\n"
        + "  name: genesis-fp16\n"
        + "  labels:\n"
        + "    app.kubernetes.io/name: genesis-fp16\n"
        + "spec:\n"
        + _indent(rules, 2)
    )


def dashboard_configmap(dashboard: str) -> str:
    """The ConfigMap that Grafana's sidecar turns into the dashboard ``dashboard`` (JSON).

    >>> print(dashboard_configmap("{}\\n").splitlines()[-1])
        {}
    """
    return (
        _header(DASHBOARD)
        + "#\n"
        + '# Grafana\'s dashboard sidecar loads every ConfigMap labelled grafana_dashboard: "1"\n'
        + "# in the namespaces it watches (by default only Grafana's own: apply this there with\n"
        + "# -n, or set the sidecar's searchNamespace). The dashboard asks for its Prometheus\n"
        + "# data source in its own variable, so it needs no data source of a given name.\n"
        + "apiVersion: v1\n"
        + "kind: ConfigMap\n"
        + "metadata:\n"
        + "  name: genesis-fp16-dashboard\n"
        + "  labels:\n"
        + "    app.kubernetes.io/name: genesis-fp16\n"
        + '    grafana_dashboard: "1"\n'
        + "data:\n"
        + f"  {DASHBOARD.name}: |\n"
        + _indent(dashboard, 4)
    )


GENERATED: dict[Path, tuple[Path, Callable[[str], str]]] = {
    K8S / "prometheusrule.yaml": (RULES, prometheus_rule),
    K8S / "grafana-dashboard.yaml": (DASHBOARD, dashboard_configmap),
}


def render(root: Path = ROOT) -> dict[Path, str]:
    """Each generated manifest's path under ``root`` and the text its source makes now."""
    return {
        root / target: make((root / source).read_text())
        for target, (source, make) in GENERATED.items()
    }


def stale(root: Path = ROOT) -> list[Path]:
    """The generated manifests under ``root`` that differ from what their sources make."""
    return [
        path for path, text in render(root).items() if not path.exists() or path.read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    if args.check:
        found = stale()
        for path in found:
            print(f"{path.relative_to(ROOT)} is stale: run `{COMMAND}`", file=sys.stderr)
        return 1 if found else 0
    for path, text in render().items():
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
