"""Measurement: the bench, its bounds (oracle, replay), peers, profiles and simulations."""
