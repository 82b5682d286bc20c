"""The Kubernetes connector: a cluster's nodes and pods as fedsched events, and its decisions as pods.

Called by ``fedsched connector kubernetes`` and by tests. Pure mapping modules: ``names`` (labels,
annotations, object names, event ids), ``quantity``, ``accelerators`` (GPUs and NPUs by vendor), ``nodes``
(Node -> inventory events), ``pods`` (placement -> manifests), ``kinds`` (what each job kind adds to its
pods), ``services`` (a run's Services), ``template_guard`` (accelerators a template may not ask),
``lifecycle`` (pod statuses -> job transitions), ``registration`` (``ClusterRegistered``, restated for
new models), ``usage`` (DCGM metrics -> usage reports; its task and sources do I/O). I/O modules:
``config_file`` (the ``--config`` YAML), ``kubeapi`` (the API client), ``throttle``, ``reflector``
(list-then-watch), ``node_watcher``, ``roster``, ``pod_watcher``, ``executor``, ``service_keeper``,
``jobbook``, ``reporting``, ``metrics`` (``/metrics`` samples) and ``connector`` (the composition).
"""

from connectors.kubernetes.connector import ConnectorConfig, KubernetesConnector
from connectors.kubernetes.kubeapi import KubeApi, KubeError

__all__ = ["ConnectorConfig", "KubeApi", "KubeError", "KubernetesConnector"]
