"""The Kubernetes API server as Cortex calls it (:mod:`cortex.kubernetes.client`).

Below the services and above nothing of Cortex's: it speaks HTTP to the API server and
knows no knowledge, store or scheduler.
"""
