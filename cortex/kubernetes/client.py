"""The Kubernetes API server calls the extender makes: read a pod, create its Binding.

The paths and bodies are the core API's (``/api/v1``, ``Pod``, ``Binding``). Uses
requests (the ``kubernetes`` extra), imported on the first call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The largest PodGroup ``minMember`` taken; a larger one is not read.
MAX_MIN_MEMBER = 10000
#: What a bind without an API server answers.
NO_API_SERVER = "no Kubernetes API server: set [kubernetes] api_url to bind"


class KubernetesError(RuntimeError):
    """The Kubernetes API server refused or could not be reached; the message says which.

    ``status``: the API server's HTTP status when it answered (409: a Binding for a pod
    already bound), else None.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KubernetesApi:
    """The API server of ``[kubernetes] api_url`` (empty: none; every call then fails).

    ``token_file``: a bearer token (the service account's); ``ca_file``: the CA bundle
    that verifies the server (empty: the system's); ``timeout``: seconds per call.
    """

    def __init__(self, url: str, token_file: str = "", ca_file: str = "",
                 timeout: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.token_file = token_file
        self.ca_file = ca_file
        self.timeout = timeout

    @classmethod
    def from_conf(cls, conf: Any) -> KubernetesApi:
        """The API of ``conf``'s ``[kubernetes]`` section."""
        return cls(conf.get("kubernetes", "api_url"), conf.get("kubernetes", "token_file"),
                   conf.get("kubernetes", "ca_file"), conf.get("kubernetes", "timeout"))

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        """One API call; KubernetesError for no API server, a failure or a non-2xx answer."""
        if not self.url:
            raise KubernetesError(NO_API_SERVER)
        import requests

        headers = {"Accept": "application/json"}
        if self.token_file:
            with open(self.token_file, encoding="utf-8") as token:
                headers["Authorization"] = f"Bearer {token.read().strip()}"
        try:
            answer = requests.request(method, self.url + path, json=body, headers=headers,
                                      timeout=self.timeout, verify=self.ca_file or True)
        except requests.RequestException as exc:
            raise KubernetesError(f"{method} {path}: {type(exc).__name__}") from None
        if answer.status_code >= 300:
            raise KubernetesError(f"{method} {path}: {answer.status_code} "
                                  f"{answer.text[:200]}", answer.status_code)
        return answer.json() if answer.content else None

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        """The Pod object (``GET /api/v1/namespaces/<ns>/pods/<name>``)."""
        pod = self._call("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
            raise KubernetesError(f"pod {namespace}/{name}: not a Pod")
        return pod

    def read_pod_group_min_member(self, namespace: str, name: str) -> int | None:
        """The ``spec.minMember`` of PodGroup ``name``; None when it sets none in 1..10000.

        The PodGroup of scheduler-plugins' coscheduling (``scheduling.x-k8s.io/v1alpha1``).
        Raises KubernetesError as :meth:`read_pod` does.
        """
        group = self._call("GET", f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}"
                                  f"/podgroups/{name}")
        spec = group.get("spec") if isinstance(group, Mapping) else None
        value = spec.get("minMember") if isinstance(spec, Mapping) else None
        return value if isinstance(value, int) and 1 <= value <= MAX_MIN_MEMBER else None

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Create the pod's Binding to ``node`` (``POST .../pods/<name>/binding``)."""
        self._call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    def bound_node(self, namespace: str, name: str) -> str | None:
        """The node the API server shows the pod on (``spec.nodeName``); None if none or unread."""
        try:
            return (self.read_pod(namespace, name).get("spec") or {}).get("nodeName") or None
        except KubernetesError:
            return None
