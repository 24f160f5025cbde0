"""Recalibration: fits (isotonic, Platt, temperature) and the maps they export, and the
CORP decomposition that rests on the isotonic fit."""
