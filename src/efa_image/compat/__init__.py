"""Compatibility between an image's components: the rules, and their facts for a planned build."""
