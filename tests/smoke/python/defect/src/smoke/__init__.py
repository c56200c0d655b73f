"""Sunaba smoke project (python, seeded defects)."""
