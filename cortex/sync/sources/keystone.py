"""Keystone: domains and projects (``GET /v3/domains``, ``GET /v3/projects``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from cortex.db import models
from cortex.sync.openstack import get_json
from cortex.sync.source import Source, SyncContext


def listing(identity, path: str, key: str) -> Iterator[dict[str, Any]]:
    """Every entry of a Keystone list, following ``links.next`` where the server pages."""
    params: dict[str, str] = {}
    while True:
        body = get_json(identity, path, params=params)
        yield from body.get(key) or ()
        following = (body.get("links") or {}).get("next")
        if not following or not body.get(key):
            return
        params = dict(parse_qsl(urlsplit(following).query))


class KeystoneSource(Source):
    """Sync Keystone through ``cloud().identity``."""

    name = "keystone"

    def __init__(self, cloud: Callable[[], Any]) -> None:
        self._cloud = cloud

    def sync(self, ctx: SyncContext) -> None:
        """Write ``domains`` and ``projects`` (domains acting as projects are left out)."""
        identity = self._cloud().identity
        ctx.replace(models.Domain, ({
            "id": d["id"], "name": d["name"], "enabled": bool(d.get("enabled", True)),
            "description": d.get("description")} for d in listing(identity, "/domains",
                                                                  "domains")), ("id",))
        ctx.replace(models.Project, ({
            "id": p["id"], "name": p["name"], "domain_id": p.get("domain_id"),
            "parent_id": p.get("parent_id"), "enabled": bool(p.get("enabled", True)),
            "is_domain": bool(p.get("is_domain", False)), "description": p.get("description")}
            for p in listing(identity, "/projects", "projects")
            if not p.get("is_domain")), ("id",))
