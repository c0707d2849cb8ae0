"""Baselines the ALBIC paper compares with: Flux, PoTC, COLA and non-integrated scale-in."""

from sluice.plan.balancing.baselines.cola import cola, lpt_pack
from sluice.plan.balancing.baselines.flux import flux
from sluice.plan.balancing.baselines.non_integrated import non_integrated_scale_in
from sluice.plan.balancing.baselines.potc import PotcResult, hash_choices, potc

__all__ = ["PotcResult", "cola", "flux", "hash_choices", "lpt_pack", "non_integrated_scale_in", "potc"]
