"""Nova in the loop: upstream Nova 34 schedules through a real Cortex (docs/nova-in-the-loop.md)."""
