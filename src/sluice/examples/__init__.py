"""Example pipelines that ship with Sluice (``sluice demo --grid`` runs ``grid``)."""
