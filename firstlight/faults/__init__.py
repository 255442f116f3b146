"""Fault campaigns over the fault universe of a chip (rtl/faults.py)."""
