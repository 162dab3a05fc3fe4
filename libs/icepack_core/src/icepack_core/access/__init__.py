"""Operator API tokens: created once, verified, revoked."""
