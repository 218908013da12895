"""Reliability and security suite: concurrency, crashes, bad input, schema evolution, load."""
