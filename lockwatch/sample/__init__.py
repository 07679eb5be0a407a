"""Samplers: the only code that talks to the monitored systems."""
