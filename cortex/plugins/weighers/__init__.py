"""In-tree weighers, one per module."""
