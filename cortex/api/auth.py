"""Who may call what: route policies checked against static tokens or Keystone.

The external scheduler endpoints stay token-free (Nova, Cinder and Manila send no
token); they can require a shared secret header. Everything that reveals or changes
state needs a role: ``reader`` (GET decisions, topology, dashboard, ``/metrics``,
``/healthcheck?detail=1``), ``agent`` (POST topology reports, for its own host only) or
``admin`` (everything, any host). ``/metrics`` is public only with ``[api]
public_metrics = true``. Strategies (``[api] auth_strategy``): ``static`` compares
``X-Auth-Token`` (or an ``Authorization: Bearer`` token, as Prometheus sends it) with
the configured tokens in constant time; ``keystone`` runs keystonemiddleware's
auth_token in front of the app (with ``delay_auth_decision`` so the external endpoints
pass untouched) and maps Keystone roles; ``noauth`` lets everything through, for
development. Tokens never appear in logs or error bodies.

An agent is bound to its host: a static token's NAME is the one host it may report
for (``cmp0001:agent:SECRET``), and a Keystone user with only the agent role may
report for the host named like the user (``X-User-Name``, one user per compute host).
"""

from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass

from flask import request

from cortex.api.errors import ApiError
from cortex.conf import Config, ConfigError

LOG = logging.getLogger(__name__)
ROLES = ("admin", "reader", "agent")
#: ``metrics``: public with ``[api] public_metrics``, otherwise ``reader``.
POLICIES = ("public", "external", "metrics", *ROLES)


@dataclass(frozen=True)
class StaticToken:
    """One configured token: its ``name``, its ``role``, the secret itself.

    The name is for logs; for an ``agent`` token it is also the one host the agent may
    report for (``POST /v1/topology/<name>``).
    """

    name: str
    role: str
    token: str


def parse_static_tokens(text: str) -> tuple[StaticToken, ...]:
    """``NAME:ROLE:TOKEN, ...`` into StaticTokens; ConfigError names a bad entry (not its token)."""
    tokens = []
    for index, entry in enumerate(e.strip() for e in text.split(",") if e.strip()):
        parts = entry.split(":", 2)
        if len(parts) != 3 or not all(parts) or parts[1] not in ROLES:
            raise ConfigError(f"[api] static_tokens entry {index + 1} must be NAME:ROLE:TOKEN "
                              f"with ROLE one of {', '.join(ROLES)}")
        tokens.append(StaticToken(*parts))
    return tuple(tokens)


class Authorizer:
    """Checks the current request against a route's policy; raises ApiError 401/403."""

    def __init__(self, conf: Config) -> None:
        self.strategy = conf.get("api", "auth_strategy")
        if self.strategy not in ("static", "keystone", "noauth"):
            raise ConfigError(f"[api] auth_strategy {self.strategy!r}: expected static, "
                              "keystone or noauth")
        self._tokens = parse_static_tokens(conf.get("api", "static_tokens"))
        self._secret = conf.get("api", "external_shared_secret")
        self._keystone_roles = {conf.get("api", f"keystone_{role}_role"): role for role in ROLES}
        self._public_metrics = conf.get("api", "public_metrics")
        if self.strategy == "noauth":
            LOG.warning("auth_strategy=noauth: decisions and topology are open to anyone")

    def authorize(self, policy: str) -> None:
        """Let the request through under ``policy``, or raise ApiError (401, 403)."""
        if policy == "metrics":
            policy = "public" if self._public_metrics else "reader"
        if policy == "public":
            return
        if policy == "external":
            self._check_secret()
            return
        if self.strategy == "noauth":
            return
        roles = self._roles()
        if roles is None:
            raise ApiError(401, "authentication required: send a valid X-Auth-Token")
        if "admin" not in roles and policy not in roles:
            raise ApiError(403, f"role {policy} or admin required")

    def authorize_host(self, host: str) -> None:
        """Let an agent write for ``host`` only if it is its own host; admin: any host.

        Call after ``authorize("agent")``. The caller's host is the static token's NAME,
        or the Keystone user name (``X-User-Name``). Raises ApiError 403 naming both hosts
        (never the token). Nothing to check under ``noauth``.
        """
        if self.strategy == "noauth":
            return
        roles, name = self._caller()
        if roles is None:
            raise ApiError(401, "authentication required: send a valid X-Auth-Token")
        if "admin" in roles:
            return
        if name != host:
            raise ApiError(403, f"the agent {name!r} may report for host {name!r} only, "
                                f"not for {host!r}")

    def _check_secret(self) -> None:
        """The shared secret of the external endpoints, when one is configured."""
        if not self._secret:
            return
        given = request.headers.get("X-Cortex-Shared-Secret", "")
        if not hmac.compare_digest(given.encode(), self._secret.encode()):
            raise ApiError(401, "missing or wrong X-Cortex-Shared-Secret")

    def _roles(self) -> set[str] | None:
        """The caller's Cortex roles, or None when it is not authenticated."""
        return self._caller()[0]

    def _caller(self) -> tuple[set[str] | None, str | None]:
        """``(roles, name)`` of the caller; ``(None, None)`` when it is not authenticated.

        The name is the static token's NAME or the Keystone user name.
        """
        if self.strategy == "keystone":
            if request.environ.get("HTTP_X_IDENTITY_STATUS") != "Confirmed":
                return None, None
            names = request.environ.get("HTTP_X_ROLES", "").split(",")
            return ({self._keystone_roles[n.strip()] for n in names
                     if n.strip() in self._keystone_roles},
                    request.environ.get("HTTP_X_USER_NAME"))
        given = request.headers.get("X-Auth-Token", "")
        if not given:
            scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
            given = credentials.strip() if scheme.lower() == "bearer" else ""
        given_bytes = given.encode()
        matches = [t for t in self._tokens
                   if hmac.compare_digest(given_bytes, t.token.encode())]
        if not given or not matches:
            return None, None
        LOG.debug("authenticated as %s", matches[0].name)
        return {matches[0].role}, matches[0].name


def keystone_middleware(wsgi_app, conf: Config):
    """Wrap ``wsgi_app`` in keystonemiddleware's auth_token (``keystone`` extra).

    Options come from the ``[keystone_authtoken]`` section of cortex.conf as
    keystonemiddleware documents them; ``delay_auth_decision`` is forced on so the
    external endpoints, which carry no token, still reach Cortex.
    """
    try:
        from keystonemiddleware import auth_token
    except ImportError:
        raise ConfigError("auth_strategy=keystone needs the 'keystone' extra "
                          "(pip install 'cortex-scheduler[keystone]')") from None
    options = conf.section("keystone_authtoken") | {"delay_auth_decision": "true"}
    return auth_token.AuthProtocol(wsgi_app, options)
