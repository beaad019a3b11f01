"""Cortex: an external scheduler for OpenStack Nova, Cinder and Manila."""

__version__ = "0.1.0"
