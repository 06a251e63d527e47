"""Helpers the tests share: reading topics back with real clients."""
