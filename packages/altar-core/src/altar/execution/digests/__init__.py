"""Digests and verification records: hashing, copying while hashing, checked transfers, staging."""
