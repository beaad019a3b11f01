"""Typed, read-only scheduling requests parsed once from the callers' bodies."""

from cortex.request.base import BadRequest, Candidate, CandidateList, hashable, unwrap
from cortex.request.cinder import CinderRequest
from cortex.request.manila import ManilaRequest
from cortex.request.nova import NovaRequest

#: A Cinder or Manila request: what the storage plugins judge.
StorageRequest = CinderRequest | ManilaRequest
#: A scheduling request of any service: what the pipelines, plugins and rules judge.
SchedulingRequest = NovaRequest | CinderRequest | ManilaRequest

PARSERS = {
    "nova": NovaRequest.from_body,
    "cinder": CinderRequest.from_body,
    "manila": ManilaRequest.from_body,
}

__all__ = ["PARSERS", "BadRequest", "Candidate", "CandidateList", "CinderRequest", "ManilaRequest",
           "NovaRequest", "SchedulingRequest", "StorageRequest", "hashable", "unwrap"]
