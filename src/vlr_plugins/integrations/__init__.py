"""Thin adapters that register vlr_plugins' core objects into trainers' registries.

Each subpackage imports its ecosystem and is imported only on demand.
"""
