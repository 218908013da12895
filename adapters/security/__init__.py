"""Secrets and keys: the secret scanner, the content seal and the table of content keys."""
