"""Pipelines: named, configured sequences of filters and weighers, and their engine."""
