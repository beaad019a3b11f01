"""Filters and weighers: one plugin per module, registered by name."""
