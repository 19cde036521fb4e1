"""Post-hoc temperature scaling that stays honest under shift: one module per temperature_fit
method, found by name in registry.py, sharing the interface in method.py."""
