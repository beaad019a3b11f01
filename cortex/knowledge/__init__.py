"""Knowledge: what Cortex knows of the cloud, as an immutable in-memory view per worker."""
