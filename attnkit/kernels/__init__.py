"""Kernel choices that change speed, not results (beyond float rounding)."""
