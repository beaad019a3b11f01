"""In-tree filters, one per module."""
