"""Specification implementations the property tests compare the product against."""
