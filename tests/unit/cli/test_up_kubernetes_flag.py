"""``fedsched up --kubernetes``: what joins a Kubernetes cluster, and refusals naming what is wrong."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from services.cli.up_cmd import kubernetes_join

pytestmark = pytest.mark.timeout(30)


def test_a_cluster_and_its_kubeconfig_or_every_setting_by_name(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "east.kubeconfig"
    kubeconfig.write_text("apiVersion: v1\n")
    short = kubernetes_join(f"gpu-east={kubeconfig}")
    assert (short.config.cluster, short.kubeconfig, short.context) == ("gpu-east", str(kubeconfig), None)
    connector = tmp_path / "connector.yaml"
    connector.write_text("cluster: {site: dc-east, currency: EUR}\nconnector: {cancel_grace_s: 60}\n")
    full = kubernetes_join(f"cluster=gpu-east,kubeconfig={kubeconfig},context=admin@east,config={connector}")
    assert full.context == "admin@east"
    assert (full.config.site, full.config.currency, full.config.cancel_grace_s) == ("dc-east", "EUR", 60)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("gpu-east", "give CLUSTER=KUBECONFIG"),
        ("gpu-east=/nonexistent/kubeconfig", "no kubeconfig file"),
        ("GPU_East=K", "is not an id"),
        ("cluster=a,kubeconfig=K,token=x", "give cluster=..."),
        ("cluster=a,kubeconfig=K,config=/nonexistent.yaml", "no such configuration file"),
        ("cluster=a,kubeconfig=K,config=BAD", "connector.cancel_grace_s must be an integer"),
    ],
)
def test_a_bad_join_is_refused_naming_what_is_wrong(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "k").write_text("apiVersion: v1\n")
    (tmp_path / "bad.yaml").write_text("connector: {cancel_grace_s: soon}\n")
    given = text.replace("=K", f"={tmp_path / 'k'}").replace("BAD", str(tmp_path / "bad.yaml"))
    with pytest.raises(argparse.ArgumentTypeError, match=says):
        kubernetes_join(given)
