"""Adapters that plug hista into other trainers (verl: :mod:`hista.integrations.verl`)."""
