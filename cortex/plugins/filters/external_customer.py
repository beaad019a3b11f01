"""filter_external_customer: external customers' VMs only on hosts meant for them.

The reference implementation's external-customer filter: a request whose domain name
(the ``domain_name`` scheduler hint SAP's Nova sends) starts with one of
``domain_name_prefixes`` and is not in ``ignored_domain_names`` comes from an external
customer, and only hosts with ``required_trait`` (default
``CUSTOM_EXTERNAL_CUSTOMER_SUPPORTED``) may take it. Other requests are not filtered.
Not run on rebuild. Invert: none; drop the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from cortex.knowledge.view import HostState
from cortex.plugins.base import Filter
from cortex.plugins.registry import register
from cortex.request import Candidate, NovaRequest


@dataclass(frozen=True)
class ExternalCustomerOptions:
    """Prefixes marking external customers' domains, exceptions, and the hosts' trait."""

    domain_name_prefixes: tuple[str, ...] = ("iaas-",)
    ignored_domain_names: tuple[str, ...] = ()
    required_trait: str = "CUSTOM_EXTERNAL_CUSTOMER_SUPPORTED"


@register
class ExternalCustomerFilter(Filter[NovaRequest, HostState]):
    """Remove hosts without the external-customer trait for external customers' requests."""

    name = "filter_external_customer"
    host_only = True
    Options = ExternalCustomerOptions

    def applies(self, request: NovaRequest) -> bool:
        """Only for requests from an external customer's domain."""
        domain = domain_name(request)
        return domain is not None and domain not in self.options.ignored_domain_names and any(
            domain.startswith(p) for p in self.options.domain_name_prefixes)

    def check(self, host: HostState, request: NovaRequest, candidate: Candidate) -> str | None:
        """Reason when the host lacks the trait."""
        if self.options.required_trait in host.traits:
            return None
        return f"external customer domain, host lacks {self.options.required_trait}"


def domain_name(request) -> str | None:
    """The ``domain_name`` scheduler hint (first value), if any."""
    values = request.scheduler_hints.get("domain_name") or ()
    return values[0] if values else None
