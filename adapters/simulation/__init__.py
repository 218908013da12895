"""Recorded agent runs replayed through the engine, and the prompt-quality measures."""
