"""Artifacts and locks: the pinned lock, fetching into a verified store, mirrors, pinning."""
