"""Codegen rules, one module per operator family (registered in :mod:`codegen.registry`)."""
